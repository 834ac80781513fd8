/**
 * DATA_DIR and everything in it are readable and writable by their owner
 * only (src/core/owner-only.ts): the embedded database (copied from the
 * template, and the files PGlite makes while running, which it creates 0666
 * whatever the umask), the lock, the admin token and the secrets key; the
 * template in the installation's cache too. Modes are counted over the whole
 * tree, under a umask that would leave files readable by everyone.
 */
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDatabase } from "../../src/core/database/index.ts";
import { buildTemplate } from "../../scripts/build-embedded-template.ts";
import { resolveDataDirSecrets } from "../../src/core/data-dir.ts";
import { loadConfig } from "../../src/core/config.ts";

let scratch: string;
let umask: number;

beforeAll(() => {
  umask = process.umask(0o000);
});
afterAll(async () => {
  process.umask(umask);
  await fs.rm(scratch, { recursive: true, force: true });
});

/** `{ "dir 700": n, "file 600": n, ... }` over `dir` and everything under it. */
async function modes(dir: string): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  const add = (kind: string, mode: number) => {
    const key = `${kind} ${(mode & 0o777).toString(8)}`;
    counts[key] = (counts[key] ?? 0) + 1;
  };
  add("dir", (await fs.stat(dir)).mode);
  for (const entry of await fs.readdir(dir, { withFileTypes: true, recursive: true })) {
    const stat = await fs.lstat(path.join(entry.parentPath, entry.name));
    if (stat.isDirectory()) add("dir", stat.mode);
    else if (stat.isFile()) add("file", stat.mode);
  }
  return counts;
}

function onlyOwnerModes(counts: Record<string, number>): void {
  expect(Object.keys(counts).sort()).toEqual(["dir 700", "file 600"]);
}

describe("DATA_DIR is owner-only", () => {
  it("the template, the embedded database copied from it and grown by it, the lock and the generated keys", async () => {
    scratch = await fs.mkdtemp(path.join(os.tmpdir(), "pb-modes-"));
    const cache = path.join(scratch, "cache");
    await buildTemplate(cache);
    const template = await modes(cache);
    onlyOwnerModes(template);
    expect(template["file 600"]).toBeGreaterThan(900);

    const dataDir = path.join(scratch, "data");
    const config = loadConfig({ DATA_DIR: dataDir });
    await resolveDataDirSecrets(config);
    const database = await openDatabase({ dataDir, templateCache: cache });
    try {
      // New relation files, made by PGlite while it runs.
      await sql`CREATE TABLE grown (a int)`.execute(database.db);
      await sql`INSERT INTO grown SELECT generate_series(1, 1000)`.execute(database.db);
      // While it runs, DATA_DIR's 0700 keeps other users from every file below it.
      const open = await modes(dataDir);
      expect(Object.keys(open).filter((key) => key.startsWith("dir"))).toEqual(["dir 700"]);
      expect((await fs.stat(dataDir)).mode & 0o777).toBe(0o700);
    } finally {
      await database.close();
    }
    const closed = await modes(dataDir);
    onlyOwnerModes(closed);
    expect(closed["file 600"]).toBeGreaterThan(900);
    for (const file of ["admin-token", "secrets-key"])
      expect((await fs.stat(path.join(dataDir, file))).mode & 0o777).toBe(0o600);
  }, 180_000);
});
