/**
 * The bounded pool (src/core/database/pg-pool.ts `boundedPool`) as Kysely
 * sees it, on PostgreSQL: a connection is handed out as the same client object
 * at every checkout (Kysely keys its own per-connection object by it, so a new
 * one per checkout made garbage that outlived the young generation), and a
 * connection whose statement got no answer is never handed out again.
 */
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { boundedPool } from "../../src/core/database/pg-pool.ts";
import { backend, createTestDatabase, type TestDatabase } from "../support/harness.ts";

describe.skipIf(backend !== "postgres")("boundedPool", () => {
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
});
