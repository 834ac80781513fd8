/**
 * `secrets check-key` (src/secrets/check-key.ts, src/cli.ts): says whether a
 * key given as SECRETS_KEY_FILE opens a database's secrets, exit 0 or 1,
 * without a server and without changing the database. Runs on the suite's
 * backend (PGlite, or PostgreSQL with DATABASE_URL).
 */
import crypto from "node:crypto";
import { execFile } from "node:child_process";
import fs from "node:fs/promises";
import path from "node:path";
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDatabase } from "../../src/core/database/index.ts";
import { keyIdOf } from "../../src/secrets/keyring.ts";
import { createTestDatabase, startServer, type TestDatabase } from "../support/harness.ts";
import { cleanEnv, nodeBinary } from "../support/service-process.ts";

type Outcome = { code: number; stdout: string; stderr: string };
const root = path.resolve(import.meta.dirname, "../..");

function cli(args: string[], env: NodeJS.ProcessEnv): Promise<Outcome> {
  return new Promise((resolve) => {
    execFile(nodeBinary, ["src/cli.ts", ...args], { cwd: root, env }, (err, stdout, stderr) =>
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

let database: TestDatabase;
let keyFile: string;
let otherKeyFile: string;
const otherKey = crypto.randomBytes(32);

/** The environment of a check of `database` with the key in `file` (and optionally more). */
const envWith = (file: string, extra: Record<string, string> = {}) =>
  cleanEnv({
    DATA_DIR: database.dataDir,
    ...(database.url ? { DATABASE_URL: database.url } : {}),
    SECRETS_KEY_FILE: file,
    ...extra,
  });

async function secretRows(): Promise<unknown[]> {
  const db = await openDatabase({ databaseUrl: database.url, dataDir: database.dataDir });
  try {
    return (await sql`SELECT app_id, name, key_id, value_encrypted FROM secrets ORDER BY app_id, name`.execute(db.db))
      .rows;
  } finally {
    await db.close();
  }
}

beforeAll(async () => {
  database = await createTestDatabase();
  keyFile = path.join(database.dataDir, "..", `${path.basename(database.dataDir)}.key`);
  otherKeyFile = `${keyFile}.other`;
  await fs.writeFile(keyFile, database.secretsKey + "\n", { mode: 0o600 });
  await fs.writeFile(otherKeyFile, otherKey.toString("base64") + "\n", { mode: 0o600 });
  const server = await startServer({ database });
  try {
    const app = await server.createApp();
    await server.admin.declareSecrets({ appId: app.id, names: ["API_KEY", "DB_PASSWORD"] });
    await server.admin.setSecret({ appId: app.id, name: "API_KEY", value: "sk_live_1" });
    await server.admin.setSecret({ appId: app.id, name: "DB_PASSWORD", value: "hunter2" });
  } finally {
    await server.close();
  }
});
afterAll(async () => {
  await fs.rm(keyFile, { force: true });
  await fs.rm(otherKeyFile, { force: true });
  await database.drop();
});

describe("secrets check-key", () => {
  it("exits 0 for the key the secrets were sealed under, naming its key id and the values", async () => {
    const before = await secretRows();
    const ok = await cli(["secrets", "check-key"], envWith(keyFile));
    const keyId = keyIdOf(Buffer.from(database.secretsKey, "base64"));
    expect(ok).toEqual({
      code: 0,
      stdout: `key id ${keyId} opens this database's secrets (2 value(s); the instances use key id ${keyId})\n`,
      stderr: "",
    });
    const json = await cli(["secrets", "check-key", "--json"], envWith(keyFile));
    expect(json.code).toBe(0);
    expect(JSON.parse(json.stdout)).toMatchObject({
      opens: true,
      keyId,
      databaseKeyId: keyId,
      values: 2,
      missingKeys: {},
    });
    // Nothing was changed, and no key or value was printed.
    expect(await secretRows()).toEqual(before);
    expect(ok.stdout + json.stdout).not.toContain(database.secretsKey);
  });

  it("exits 1 for another key, naming the key id the values are under, never a key", async () => {
    const refused = await cli(["secrets", "check-key"], envWith(otherKeyFile));
    const keyId = keyIdOf(Buffer.from(database.secretsKey, "base64"));
    expect(refused.code).toBe(1);
    expect(refused.stdout.trim().split("\n")).toEqual([
      `key id ${keyIdOf(otherKey)} does not open this database's secrets: 2 value(s) are sealed under key id ${keyId}`,
    ]);
    expect(refused.stdout).not.toContain(otherKey.toString("base64"));
    expect(refused.stdout).not.toContain(database.secretsKey);
  });

  it("a new key with the sealing one among SECRETS_OLD_KEYS (a rotation under way) opens the database", async () => {
    const rotating = await cli(
      ["secrets", "check-key"],
      envWith(otherKeyFile, { SECRETS_OLD_KEYS: database.secretsKey }),
    );
    expect(rotating.code).toBe(0);
    expect(rotating.stdout).toMatch(new RegExp(`^key id ${keyIdOf(otherKey)} opens this database's secrets`));
  });

  it("a value changed in the database does not authenticate: exit 1", async () => {
    const db = await openDatabase({ databaseUrl: database.url, dataDir: database.dataDir });
    try {
      // Flip one byte of the ciphertext (after the 12-byte iv and 16-byte tag) of the first value.
      await sql`UPDATE secrets SET value_encrypted = set_byte(value_encrypted, 28, get_byte(value_encrypted, 28) # 1)
        WHERE (app_id, name) = (SELECT app_id, name FROM secrets WHERE value_encrypted IS NOT NULL ORDER BY app_id, name LIMIT 1)`.execute(
        db.db,
      );
    } finally {
      await db.close();
    }
    const refused = await cli(["secrets", "check-key"], envWith(keyFile));
    expect(refused.code).toBe(1);
    expect(refused.stdout).toMatch(/does not authenticate/);
  });

  it("refuses with one line when there is no key or no database, and a key file that is missing is a configuration error", async () => {
    const noKey = await cli(["secrets", "check-key"], cleanEnv({ DATA_DIR: path.join(database.dataDir, "nothing") }));
    expect(noKey.code).toBe(1);
    expect(noKey.stderr.trim().split("\n")).toEqual([
      expect.stringMatching(/^error: no key to check: set SECRETS_KEY_FILE/),
    ]);

    const noDatabase = await cli(
      ["secrets", "check-key"],
      cleanEnv({ DATA_DIR: path.join(database.dataDir, "nothing"), SECRETS_KEY_FILE: keyFile }),
    );
    expect(noDatabase.code).toBe(1);
    expect(noDatabase.stderr.trim().split("\n")).toEqual([
      expect.stringMatching(/^error: no database in .*nothing\/pg/),
    ]);

    const missing = await cli(["secrets", "check-key"], envWith(`${keyFile}.absent`));
    expect(missing).toMatchObject({ code: 2, stderr: `SECRETS_KEY_FILE: ${keyFile}.absent does not exist\n` });
  });
});
