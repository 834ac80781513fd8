/**
 * A ready embedded database to start from. An empty PGlite directory costs
 * its first start an `initdb` (the whole system catalog built by a second
 * WebAssembly Postgres, several seconds of CPU and a few hundred MB at peak)
 * and then every migration. Both always produce the same files, so they are
 * made once per installation (`npm install` runs
 * `scripts/build-embedded-template.ts`; so does `npm start` when its DATA_DIR
 * has no database yet) into `node_modules/.cache/`, and a new DATA_DIR starts
 * as a copy of them.
 *
 * The template is keyed by the PGlite version (the files are Postgres's
 * on-disk format of that build) and records which migrations it has; it is
 * used only while every one of them is still a migration of this code, and
 * the migrations added since run on the copy at start as usual. Nothing about
 * an installation is in it (the admin token's hash and the secrets key's id
 * are written at the first start), so copies of it are independent databases.
 * Without a template (a read-only `node_modules`, a failed build) a new
 * DATA_DIR is made by `initdb` as before.
 */
import { createRequire } from "node:module";
import fs from "node:fs/promises";
import path from "node:path";
import { migrations } from "./migrations/index.ts";

const require = createRequire(import.meta.url);

/** Where templates are kept: the package cache of this installation. */
export const TEMPLATE_CACHE = path.resolve(import.meta.dirname, "../../../node_modules/.cache/platform-batteries");

/** What `manifest.json` beside a template records. */
export interface Manifest {
  pglite: string;
  migrations: string[];
  /** A random id of this build: a copy that saw it change was made while the template was replaced. */
  build?: string;
}

/** The installed PGlite version: templates are Postgres files of that build. */
export async function pgliteVersion(): Promise<string> {
  // The package's exports hide package.json; its entry point sits in dist/.
  const entry = require.resolve("@electric-sql/pglite");
  const pkg = JSON.parse(await fs.readFile(path.join(path.dirname(entry), "..", "package.json"), "utf8")) as {
    version: string;
  };
  return pkg.version;
}

/** The template of this PGlite version in `cache`. */
export async function templateDir(cache: string): Promise<string> {
  return path.join(cache, `pglite-${await pgliteVersion()}`);
}

/** The template's data directory and its manifest, if there is one this code can start from. */
async function usableTemplate(cache: string): Promise<{ pgdata: string; manifest: Manifest } | undefined> {
  const dir = await templateDir(cache);
  let manifest: Manifest;
  try {
    manifest = JSON.parse(await fs.readFile(path.join(dir, "manifest.json"), "utf8")) as Manifest;
  } catch {
    return undefined;
  }
  if (!isMigratablePrefix(manifest.migrations)) return undefined;
  return { pgdata: path.join(dir, "pgdata"), manifest };
}

/** The template's data directory, if there is one this code can start from. */
export async function findTemplate(cache: string = TEMPLATE_CACHE): Promise<string | undefined> {
  return (await usableTemplate(cache))?.pgdata;
}

/**
 * Whether a database with exactly these migrations can be brought up to date
 * by this code: they must be the first ones of this code's, in order. Kysely
 * refuses to run a migration that sorts before one already applied, so a
 * template made by newer code (a migration this code does not know) or by a
 * branch that lacked an earlier migration cannot be started from.
 */
export function isMigratablePrefix(applied: readonly string[]): boolean {
  const ours = Object.keys(migrations).sort();
  return applied.length <= ours.length && [...applied].sort().every((name, i) => name === ours[i]);
}

/** Copies of a template being replaced meanwhile, tried before a new DATA_DIR is made by `initdb` instead. */
const SEED_ATTEMPTS = 3;

/**
 * Makes `pgDir` (DATA_DIR/pg) a copy of the template when it holds no
 * database yet. The copy is made beside it and renamed into place, so an
 * interrupted copy never looks like a database. A copy is made file by file:
 * when the template was rebuilt meanwhile (`npm install`, another start), it
 * would mix the files of two databases, so one that saw the build id change,
 * or a file vanish, is thrown away and made again. Returns whether it copied.
 */
export async function seedFromTemplate(pgDir: string, cache: string = TEMPLATE_CACHE): Promise<boolean> {
  if (await exists(path.join(pgDir, "PG_VERSION"))) return false;
  const partial = `${pgDir}.seeding-${process.pid}`;
  for (let attempt = 0; attempt < SEED_ATTEMPTS; attempt++) {
    const template = await usableTemplate(cache);
    if (!template) return false;
    await fs.rm(partial, { recursive: true, force: true });
    const copied = await fs.cp(template.pgdata, partial, { recursive: true }).then(
      () => true,
      () => false,
    );
    if (!copied || (await usableTemplate(cache))?.manifest.build !== template.manifest.build) continue;
    await fs.rm(pgDir, { recursive: true, force: true });
    await fs.rename(partial, pgDir);
    return true;
  }
  await fs.rm(partial, { recursive: true, force: true });
  return false;
}

async function exists(p: string): Promise<boolean> {
  try {
    await fs.access(p);
    return true;
  } catch {
    return false;
  }
}
