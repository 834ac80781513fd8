/**
 * Builds the embedded database's template (see
 * `src/core/database/pglite-template.ts`, which starts a new DATA_DIR from it)
 * into the installation's cache: a new PGlite database with every migration.
 *
 * `node scripts/build-embedded-template.ts [--if-needed]`: `npm install` runs
 * it (`prepare`), and so does `npm run build:embedded-template` after a new
 * migration. With `--if-needed` (`npm start`), only when the embedded database
 * is the one configured, DATA_DIR has none yet and the template is missing or
 * lacks a migration; a failure is reported and the start goes on (the server
 * then runs `initdb` itself).
 */
import crypto from "node:crypto";
import fs from "node:fs/promises";
import path from "node:path";
import { PGlite } from "@electric-sql/pglite";
import { Kysely } from "kysely";
import { PGliteDialect } from "kysely-pglite-dialect";
import { ConfigError, loadConfig, type Config } from "../src/core/config.ts";
import { migrate } from "../src/core/database/migrate.ts";
import { migrations } from "../src/core/database/migrations/index.ts";
import { pgliteVersion, templateDir, TEMPLATE_CACHE, type Manifest } from "../src/core/database/pglite-template.ts";
import { makeOwnerOnly, ownerOnlyDir } from "../src/core/owner-only.ts";

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
 * Builds the template: a new PGlite database with every migration, closed
 * cleanly, written beside the old one and renamed into place, with a new
 * build id in its manifest (a concurrent start's copy that saw the id change
 * is made again: see `seedFromTemplate`).
 */
export async function buildTemplate(cache: string = TEMPLATE_CACHE): Promise<string> {
  const dir = await templateDir(cache);
  const work = `${dir}.building-${process.pid}`;
  await fs.rm(work, { recursive: true, force: true });
  await ownerOnlyDir(cache);
  await ownerOnlyDir(work);
  const pglite = await PGlite.create(path.join(work, "pgdata"));
  const db = new Kysely<Record<never, never>>({ dialect: new PGliteDialect(pglite) });
  try {
    await migrate(db);
  } finally {
    await db.destroy(); // closes PGlite: a clean shutdown, so the copies need no recovery
  }
  const manifest: Manifest = {
    pglite: await pgliteVersion(),
    migrations: Object.keys(migrations),
    build: crypto.randomUUID(),
  };
  await fs.writeFile(path.join(work, "manifest.json"), JSON.stringify(manifest, null, 2) + "\n");
  // PGlite makes its files 0666; the copies of the template start as owner-only as it is.
  await makeOwnerOnly(work);
  const old = `${dir}.old-${process.pid}`;
  await fs.rename(dir, old).catch(() => undefined);
  await fs.rename(work, dir);
  await fs.rm(old, { recursive: true, force: true });
  return dir;
}

async function exists(p: string): Promise<boolean> {
  return fs.access(p).then(
    () => true,
    () => false,
  );
}

/**
 * The one line an install prints when npm runs on a Node older than 24 (its
 * EBADENGINE warnings are off: see .npmrc). npm names its own Node in
 * `npm_config_user_agent` ("npm/11.6.2 node/v20.19.5 linux x64 ...").
 */
export function olderNodeNote(env: NodeJS.ProcessEnv): string | undefined {
  const npmNode = /\bnode\/v(\d+)\.[\d.]+/.exec(env.npm_config_user_agent ?? "");
  if (env.npm_lifecycle_event !== "prepare" || !npmNode || Number(npmNode[1]) >= 24) return undefined;
  return `npm runs on Node v${npmNode[0].slice(6)} here; this install brought Node ${process.versions.node} (the node package, node_modules/.bin/node), which every npm script runs, because the server and its dependencies need Node 22 or newer (npm's engine warnings about v${npmNode[1]} are off: .npmrc)\n`;
}

if (import.meta.main) {
  const note = olderNodeNote(process.env);
  if (note) process.stderr.write(note);
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
  if (!needed) {
    // A template built before templates were made owner-only becomes so (the copies are made so anyway).
    const dir = await templateDir(TEMPLATE_CACHE);
    if (await exists(dir)) await makeOwnerOnly(dir).catch(() => undefined);
  } else {
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
