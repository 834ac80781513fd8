/**
 * `queryPrepared` (`core/database/prepared.ts`): a hot read without the query
 * builder. On a pool handle it checks a connection out of the pool itself and
 * sends the statement named (prepared once per connection); in a transaction it
 * runs on the transaction's connection; on PGlite it goes through Kysely. The
 * rows are the same either way, and a failing statement gives its connection back.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { migrate, openDatabase, queryPrepared, type Database } from "../../src/core/database/index.ts";
import { backend, createTestDatabase, type TestDatabase } from "../support/harness.ts";
import { tables } from "../support/tables.ts";

const POOL_SIZE = 4;
let tdb: TestDatabase;
let database: Database;

beforeAll(async () => {
  tdb = await createTestDatabase();
  database = await openDatabase({ databaseUrl: tdb.url, dataDir: tdb.dataDir, poolSize: POOL_SIZE });
  await migrate(database.db);
});
afterAll(async () => {
  await database?.close();
  await tdb?.drop();
});

describe(`queryPrepared on ${backend}`, () => {
  it("returns the statement's rows, with its parameters and the pool's type parsing", async () => {
    const rows = await queryPrepared<{ n: number; names: string[] }>(
      database.db,
      "SELECT $1::bigint + 1 AS n, $2::text[] AS names",
      [41, ["a", "b"]],
    );
    expect(rows).toEqual([{ n: 42, names: ["a", "b"] }]);
  });

  it("sends the statement as a named prepared statement on PostgreSQL (a comment on PGlite)", async () => {
    // The statement is prepared on its connection before it runs, so it finds itself there.
    const rows = await queryPrepared<{ n: number }>(
      database.db,
      "SELECT count(*)::int AS n FROM pg_prepared_statements WHERE statement LIKE '%query-prepared-test-mark%'",
      [],
    );
    expect(rows[0].n).toBe(backend === "postgres" ? 1 : 0);
  });

  it("runs in a transaction on the transaction's connection", async () => {
    const name = `qp-${Math.random().toString(36).slice(2)}`;
    const seen = await database.db.transaction().execute(async (trx) => {
      await tables(trx).insertInto("apps").values({ name, status: "running", mail_from: "", limits: "{}" }).execute();
      return queryPrepared<{ n: number }>(trx, "SELECT count(*)::int AS n FROM apps WHERE name = $1", [name]);
    });
    expect(seen[0].n).toBe(1);
  });

  it("fails as the statement fails, and gives its connection back", async () => {
    // More failures than the pool has connections: a connection kept by a failure would leave none.
    for (let i = 0; i < POOL_SIZE * 3; i++) {
      await expect(queryPrepared(database.db, "SELECT 1 / $1::int AS n", [0])).rejects.toThrow(/division by zero/);
    }
    expect(await queryPrepared(database.db, "SELECT 1 AS n", [])).toEqual([{ n: 1 }]);
  });
});
