/**
 * Migrations only move forward (docs/compatibility.md): a database that
 * records a migration this code does not know was migrated by a newer version.
 * `migrate()`, the server's start and the CLI's `migrate` refuse it with one
 * line and change nothing (src/core/database/migrate.ts).
 */
import { execFile } from "node:child_process";
import path from "node:path";
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { migrate, NewerDatabaseError, openDatabase } from "../../src/core/database/index.ts";
import { createTestDatabase, type TestDatabase } from "../support/harness.ts";
import { cleanEnv, nodeBinary } from "../support/service-process.ts";

const root = path.resolve(import.meta.dirname, "../..");
const { version } = (await import("../../package.json", { with: { type: "json" } })).default;
const FUTURE = "9001-from-a-newer-version";
const refusal = `database: migrated by a newer version of platform-batteries (migration ${FUTURE} is unknown to ${version}); run that version or a newer one`;

type Outcome = { code: number; stdout: string; stderr: string };
const run = (script: string, args: string[], env: NodeJS.ProcessEnv): Promise<Outcome> =>
  new Promise((resolve) => {
    execFile(nodeBinary, [script, ...args], { cwd: root, env }, (err, stdout, stderr) =>
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });

let database: TestDatabase;
const open = () => openDatabase({ databaseUrl: database.url, dataDir: database.dataDir });

async function appliedNames(): Promise<string[]> {
  const db = await open();
  try {
    return (await sql<{ name: string }>`SELECT name FROM kysely_migration ORDER BY name`.execute(db.db)).rows.map(
      (r) => r.name,
    );
  } finally {
    await db.close();
  }
}

beforeAll(async () => {
  database = await createTestDatabase();
  const db = await open();
  try {
    await migrate(db.db);
    // What a newer version's migration leaves behind: its name among the applied ones.
    await sql`INSERT INTO kysely_migration (name, timestamp) VALUES (${FUTURE}, ${new Date().toISOString()})`.execute(
      db.db,
    );
  } finally {
    await db.close();
  }
});
afterAll(() => database.drop());

describe("a database migrated by a newer version", () => {
  it("migrate() refuses it, naming the unknown migration and this version", async () => {
    const db = await open();
    try {
      const err = await migrate(db.db).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(NewerDatabaseError);
      expect((err as NewerDatabaseError).message).toBe(refusal);
      expect((err as NewerDatabaseError).unknownMigrations).toEqual([FUTURE]);
    } finally {
      await db.close();
    }
  });

  it("the server's start and the CLI's migrate stop with that one line and change nothing", async () => {
    const before = await appliedNames();
    const env = cleanEnv({
      PORT: "0",
      DATA_DIR: database.dataDir,
      ADMIN_TOKEN: database.adminToken,
      SECRETS_KEY: database.secretsKey,
      ...(database.url ? { DATABASE_URL: database.url } : {}),
    });
    const server = await run("src/main.ts", [], env);
    expect(server.code).toBe(1);
    expect(server.stderr).toBe(`failed to start: ${refusal}\n`);
    // It listened while opening its database (answering 503), and never became ready.
    expect(server.stdout).not.toContain("platform batteries listening");

    const migrated = await run("src/cli.ts", ["migrate"], env);
    expect(migrated).toEqual({ code: 1, stdout: "", stderr: `error: ${refusal}\n` });
    expect(await appliedNames()).toEqual(before);
  });
});
