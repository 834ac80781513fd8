/**
 * The bounded pool (src/core/database/pg-pool.ts `boundedPool`) as Kysely
 * sees it, on PostgreSQL: a connection is handed out as the same client object
 * at every checkout (Kysely keys its own per-connection object by it, so a new
 * one per checkout made garbage that outlived the young generation), and a
 * connection whose statement got no answer, or that met a failover (a
 * read-only server: SQLSTATE 25006), is never handed out again.
 */
import pg from "pg";
import { afterAll, beforeAll, expect, it } from "vitest";
import { boundedPool } from "../../src/core/database/pg-pool.ts";
import { createTestDatabase, type TestDatabase, describeOnPostgres } from "../support/harness.ts";

describeOnPostgres("boundedPool", "the bounded pool is the pg driver's", () => {
  let database: TestDatabase;
  let raw: pg.Pool;
  beforeAll(async () => {
    database = await createTestDatabase();
    raw = new pg.Pool({ connectionString: database.url, max: 2 });
  });
  afterAll(async () => {
    await raw?.end();
    await database?.drop();
  });

  it("hands out one client object per connection, whatever the number of checkouts", async () => {
    const pool = boundedPool(raw, { statementTimeoutMs: 5_000, onAnswer: () => {} });
    const seen = new Map<unknown, Set<number | undefined>>();
    for (let i = 0; i < 20; i++) {
      const clients = await Promise.all([pool.connect(), pool.connect()]);
      for (const client of clients) {
        const { rows } = await client.query("SELECT pg_backend_pid() AS pid", []);
        if (!seen.has(client)) seen.set(client, new Set());
        seen.get(client)!.add((rows[0] as { pid: number }).pid);
        client.release();
      }
    }
    // Two connections, two objects, each always on its own backend.
    expect(seen.size).toBe(2);
    expect([...seen.values()].map((pids) => pids.size)).toEqual([1, 1]);
  });

  it("never hands out again a connection whose statement was given up on", async () => {
    const pool = boundedPool(raw, { statementTimeoutMs: 100, onAnswer: () => {} });
    const client = await pool.connect();
    // This pool's connections have no server-side statement_timeout: the client side gives up (after the
    // bound and its grace), as when the database stops answering.
    const failed = await client.query("SELECT pg_sleep(3)", []).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(failed).toBeInstanceOf(Error);
    client.release();
    const next = await pool.connect();
    expect(next).not.toBe(client);
    next.release();
  });

  it("discards a connection whose write was refused as read-only (25006), so the next one is made anew", async () => {
    const pool = boundedPool(raw, { statementTimeoutMs: 5_000, onAnswer: () => {} });
    const client = await pool.connect();
    const pid = (await client.query<{ pid: number }>("SELECT pg_backend_pid() AS pid", [])).rows[0].pid;
    // What a connection that reached a standby (or a primary being demoted) meets at its next write.
    await client.query("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY", []);
    const refused = await client.query("CREATE TEMP TABLE refused (x int)", []).then(
      () => undefined,
      (err: unknown) => err as { code?: string },
    );
    expect(refused?.code).toBe("25006");
    // Statements after it still run on it (a transaction's ROLLBACK), until it is given back.
    expect((await client.query<{ one: number }>("SELECT 1 AS one", [])).rows[0].one).toBe(1);
    client.release();
    const next = await pool.connect();
    expect(next).not.toBe(client);
    expect((await next.query<{ pid: number }>("SELECT pg_backend_pid() AS pid", [])).rows[0].pid).not.toBe(pid);
    next.release();
  });
});
