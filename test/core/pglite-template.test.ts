/**
 * The embedded database's template (src/core/database/pglite-template.ts): a
 * new DATA_DIR starts as a copy of a migrated database, each copy is a
 * database of its own, and a template this code cannot migrate from is not used.
 * PGlite only, whatever the backend of the run (the template is PGlite's).
 */
import { watch } from "node:fs";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { migrate, openDatabase } from "../../src/core/database/index.ts";
import {
  findTemplate,
  isMigratablePrefix,
  seedFromTemplate,
  templateDir,
  type Manifest,
} from "../../src/core/database/pglite-template.ts";
import { buildTemplate, isTemplateCurrent } from "../../scripts/build-embedded-template.ts";
import { migrations } from "../../src/core/database/migrations/index.ts";

let scratch: string;
let cache: string;

beforeAll(async () => {
  scratch = await fs.mkdtemp(path.join(os.tmpdir(), "pb-template-test-"));
  cache = path.join(scratch, "cache");
  await buildTemplate(cache);
}, 120_000);

afterAll(async () => {
  await fs.rm(scratch, { recursive: true, force: true });
});

async function appliedMigrations(dataDir: string): Promise<string[]> {
  const database = await openDatabase({ dataDir, templateCache: cache });
  try {
    const { rows } = await sql<{ name: string }>`SELECT name FROM kysely_migration ORDER BY name`.execute(database.db);
    return rows.map((r) => r.name);
  } finally {
    await database.close();
  }
}

describe("the embedded database template", () => {
  it("has every migration, and a new DATA_DIR starts migrated from it", async () => {
    expect(await isTemplateCurrent(cache)).toBe(true);
    const dataDir = path.join(scratch, "a");
    expect(await appliedMigrations(dataDir)).toEqual(Object.keys(migrations));
    // The copy is the database now: opening it again does not copy over it.
    expect(await seedFromTemplate(path.join(dataDir, "pg"), cache)).toBe(false);
  });

  it("gives each DATA_DIR a database of its own, which keeps its writes across a reopen", async () => {
    const first = path.join(scratch, "b");
    const second = path.join(scratch, "c");
    const one = await openDatabase({ dataDir: first, templateCache: cache });
    await migrate(one.db);
    await sql`INSERT INTO platform_settings (name, value) VALUES ('probe', 'first')`.execute(one.db);
    await one.close();
    const two = await openDatabase({ dataDir: second, templateCache: cache });
    const { rows: inSecond } = await sql`SELECT value FROM platform_settings WHERE name = 'probe'`.execute(two.db);
    await two.close();
    expect(inSecond).toEqual([]);
    const again = await openDatabase({ dataDir: first, templateCache: cache });
    const { rows: inFirst } = await sql`SELECT value FROM platform_settings WHERE name = 'probe'`.execute(again.db);
    await again.close();
    expect(inFirst).toEqual([{ value: "first" }]);
  });

  it("is not used when it has a migration this code does not know; the DATA_DIR is made by initdb instead", async () => {
    const other = path.join(scratch, "other-cache");
    await fs.cp(cache, other, { recursive: true });
    const [dir] = await fs.readdir(other);
    const manifestFile = path.join(other, dir, "manifest.json");
    const manifest = JSON.parse(await fs.readFile(manifestFile, "utf8")) as { migrations: string[] };
    await fs.writeFile(
      manifestFile,
      JSON.stringify({ ...manifest, migrations: [...manifest.migrations, "9999-from-the-future"] }),
    );
    expect(await findTemplate(other)).toBeUndefined();
    expect(await seedFromTemplate(path.join(scratch, "d", "pg"), other)).toBe(false);
  });

  it("is used when it lacks migrations added since, which then run on the copy", async () => {
    const older = path.join(scratch, "older-cache");
    await fs.cp(cache, older, { recursive: true });
    const [dir] = await fs.readdir(older);
    const manifestFile = path.join(older, dir, "manifest.json");
    const manifest = JSON.parse(await fs.readFile(manifestFile, "utf8")) as { migrations: string[] };
    await fs.writeFile(manifestFile, JSON.stringify({ ...manifest, migrations: manifest.migrations.slice(0, -1) }));
    expect(await isTemplateCurrent(older)).toBe(false);
    expect(await findTemplate(older)).toBeDefined();
  });

  it("is not used when it lacks a migration that sorts before one it has (Kysely would refuse to migrate it)", async () => {
    const gap = path.join(scratch, "gap-cache");
    await fs.cp(cache, gap, { recursive: true });
    const [dir] = await fs.readdir(gap);
    const manifestFile = path.join(gap, dir, "manifest.json");
    const manifest = JSON.parse(await fs.readFile(manifestFile, "utf8")) as { migrations: string[] };
    const withGap = manifest.migrations.filter((_, i) => i !== manifest.migrations.length - 2);
    await fs.writeFile(manifestFile, JSON.stringify({ ...manifest, migrations: withGap }));
    expect(await findTemplate(gap)).toBeUndefined();
    expect(await seedFromTemplate(path.join(scratch, "g", "pg"), gap)).toBe(false);
  });

  it("a copy made while the template is replaced is thrown away and made again: a new DATA_DIR is one build whole", async () => {
    const own = path.join(scratch, "swap-cache");
    await fs.cp(cache, own, { recursive: true });
    const dir = await templateDir(own);
    // Another build to swap in: its own id, and a marker file in every directory of its database.
    const other = `${dir}-other`;
    await fs.cp(dir, other, { recursive: true });
    const manifest = JSON.parse(await fs.readFile(path.join(other, "manifest.json"), "utf8")) as Manifest;
    await fs.writeFile(path.join(other, "manifest.json"), JSON.stringify({ ...manifest, build: "other" }));
    const dirsOf = async (root: string) => [
      root,
      ...(await fs.readdir(root, { recursive: true, withFileTypes: true }))
        .filter((e) => e.isDirectory())
        .map((e) => path.join(e.parentPath, e.name)),
    ];
    for (const d of await dirsOf(path.join(other, "pgdata"))) await fs.writeFile(path.join(d, "marker"), "");

    const dataDir = path.join(scratch, "swap-data");
    await fs.mkdir(dataDir);
    // As soon as the copy has begun, the template is replaced by the other build (what a rebuild does).
    let swapped: Promise<void> | undefined;
    const watcher = watch(dataDir, (_event, name) => {
      if (swapped || !name?.startsWith("pg.seeding-")) return;
      swapped = (async () => {
        await fs.rename(dir, `${dir}-away`);
        await fs.rename(other, dir);
        await fs.rename(`${dir}-away`, other);
      })();
    });
    try {
      expect(await seedFromTemplate(path.join(dataDir, "pg"), own)).toBe(true);
    } finally {
      watcher.close();
    }
    await swapped;
    expect(swapped).toBeDefined();
    const marked = await Promise.all(
      (await dirsOf(path.join(dataDir, "pg"))).map((d) =>
        fs.access(path.join(d, "marker")).then(
          () => 1,
          () => 0,
        ),
      ),
    );
    // Every directory from the one build (the other, copied again after the swap), none mixed.
    expect(new Set(marked)).toEqual(new Set([1]));
  });

  it("isMigratablePrefix: only the first migrations of this code, in order", () => {
    const ours = Object.keys(migrations).sort();
    expect(isMigratablePrefix([])).toBe(true);
    expect(isMigratablePrefix(ours)).toBe(true);
    expect(isMigratablePrefix(ours.slice(0, 3))).toBe(true);
    expect(isMigratablePrefix([ours[0], ours[2]])).toBe(false);
    expect(isMigratablePrefix([...ours, "9999-from-the-future"])).toBe(false);
  });
});
