/**
 * A ready embedded database to start from. An empty PGlite directory costs
 * its first start an `initdb` (the whole system catalog built by a second
 * WebAssembly Postgres, several seconds of CPU and a few hundred MB at peak)
 * and then every migration. Both always produce the same files, so they are
 * made once per installation (`npm install` runs this file; so does `npm start`
 * when its DATA_DIR has no database yet) into `node_modules/.cache/`, and a new
 * DATA_DIR starts as a copy of them.
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
import { ConfigError, loadConfig, type Config } from "../config.ts";
import { PGlite } from "@electric-sql/pglite";
import { Kysely } from "kysely";
import { PGliteDialect } from "kysely-pglite-dialect";
import { migrate } from "./migrate.ts";
import { migrations } from "./migrations/index.ts";

const require = createRequire(import.meta.url);

/** Where templates are kept: the package cache of this installation. */
export const TEMPLATE_CACHE = path.resolve(import.meta.dirname, "../../../node_modules/.cache/platform-batteries");

interface Manifest {
  pglite: string;
  migrations: string[];
}

async function pgliteVersion(): Promise<string> {
  // The package's exports hide package.json; its entry point sits in dist/.
  const entry = require.resolve("@electric-sql/pglite");
  const pkg = JSON.parse(await fs.readFile(path.join(path.dirname(entry), "..", "package.json"), "utf8")) as {
    version: string;
  };
  return pkg.version;
}

async function templateDir(cache: string): Promise<string> {
  return path.join(cache, `pglite-${await pgliteVersion()}`);
}

/** The template's data directory, if there is one this code can start from. */
export async function findTemplate(cache: string = TEMPLATE_CACHE): Promise<string | undefined> {
  const dir = await templateDir(cache);
  let manifest: Manifest;
  try {
    manifest = JSON.parse(await fs.readFile(path.join(dir, "manifest.json"), "utf8")) as Manifest;
  } catch {
    return undefined;
  }
  if (!isMigratablePrefix(manifest.migrations)) return undefined;
  return path.join(dir, "pgdata");
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

/** Whether the template has every migration of this code (else building it again saves the missing ones at each new DATA_DIR). */
export async function isTemplateCurrent(cache: string = TEMPLATE_CACHE): Promise<boolean> {
  try {
    const manifest = JSON.parse(
      await fs.readFile(path.join(await templateDir(cache), "manifest.json"), "utf8"),
    ) as Manifest;
    return Object.keys(migrations).every((name) => manifest.migrations.includes(name));
  } catch {
    return false;
  }
}

/**
 * Makes `pgDir` (DATA_DIR/pg) a copy of the template when it holds no
 * database yet. The copy is made beside it and renamed into place, so an
 * interrupted copy never looks like a database. Returns whether it copied.
 */
export async function seedFromTemplate(pgDir: string, cache: string = TEMPLATE_CACHE): Promise<boolean> {
  if (await exists(path.join(pgDir, "PG_VERSION"))) return false;
  const template = await findTemplate(cache);
  if (!template) return false;
  const partial = `${pgDir}.seeding-${process.pid}`;
  await fs.rm(partial, { recursive: true, force: true });
  await fs.cp(template, partial, { recursive: true });
  await fs.rm(pgDir, { recursive: true, force: true });
  await fs.rename(partial, pgDir);
  return true;
}

/**
 * Builds the template: a new PGlite database with every migration, closed
 * cleanly, written beside the old one and renamed into place (a concurrent
 * start reads either the old template or the new one, never a partial one).
 */
export async function buildTemplate(cache: string = TEMPLATE_CACHE): Promise<string> {
  const dir = await templateDir(cache);
  const work = `${dir}.building-${process.pid}`;
  await fs.rm(work, { recursive: true, force: true });
  await fs.mkdir(work, { recursive: true });
  const pglite = await PGlite.create(path.join(work, "pgdata"));
  const db = new Kysely<Record<never, never>>({ dialect: new PGliteDialect(pglite) });
  try {
    await migrate(db);
  } finally {
    await db.destroy(); // closes PGlite: a clean shutdown, so the copies need no recovery
  }
  const manifest: Manifest = { pglite: await pgliteVersion(), migrations: Object.keys(migrations) };
  await fs.writeFile(path.join(work, "manifest.json"), JSON.stringify(manifest, null, 2) + "\n");
  const old = `${dir}.old-${process.pid}`;
  await fs.rename(dir, old).catch(() => undefined);
  await fs.rename(work, dir);
  await fs.rm(old, { recursive: true, force: true });
  return dir;
}

async function exists(p: string): Promise<boolean> {
  try {
    await fs.access(p);
    return true;
  } catch {
    return false;
  }
}

/**
 * `node src/core/database/pglite-template.ts [--if-needed]`: builds the
 * template (`npm install`). With `--if-needed` (`npm start`), only when the
 * embedded database is the one configured, DATA_DIR has none yet and the
 * template is missing or lacks a migration; a failure is reported and the
 * start goes on (the server then runs `initdb` itself).
 */
if (import.meta.main) {
  const ifNeeded = process.argv.includes("--if-needed");
  // The environment is read as the server reads it (`loadConfig`); a bad variable is the
  // server's to report, with the rest of the configuration, so the template step skips.
  let config: Config | undefined;
  try {
    config = loadConfig(process.env);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
  }
  const needed =
    !ifNeeded ||
    (config !== undefined &&
      !config.databaseUrl &&
      !(await exists(path.join(config.dataDir, "pg", "PG_VERSION"))) &&
      !(await isTemplateCurrent()));
  if (needed) {
    try {
      const dir = await buildTemplate();
      process.stderr.write(`embedded database template ready in ${path.relative(process.cwd(), dir)}\n`);
    } catch (err) {
      process.stderr.write(
        `embedded database template not built (a new DATA_DIR will run initdb instead): ${err instanceof Error ? err.message : String(err)}\n`,
      );
    }
  }
}
