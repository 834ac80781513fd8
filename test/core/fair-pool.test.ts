/**
 * Fair shares of the database pool (`fair-gate.ts` in front of `pg-pool.ts`):
 * while other apps wait for a connection, one app holds at most its share of
 * the pool, and waiting apps are served in turn. On PostgreSQL, with real
 * statements: app A floods a pool of 4 with slow statements, app B's one
 * statement waits for one of them, not for A's whole queue (before: first
 * come, first served, B waited behind all of A's). The gate alone is tested
 * on any backend.
 */
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDatabase, type Database } from "../../src/core/database/index.ts";
import { createFairGate } from "../../src/core/fair-gate.ts";
import { runAsTenant } from "../../src/core/tenant.ts";
import { backend, createTestDatabase, type TestDatabase } from "../support/harness.ts";

describe("the fair gate", () => {
  it("serves waiting tenants in turn and holds a tenant to its share while others wait", async () => {
    const gate = createFairGate({ capacity: 4, maxShare: 0.5 });
    const order: string[] = [];
    const take = (tenant: string) =>
      gate.acquire(tenant).then(() => {
        order.push(tenant);
      });
    // A fills the gate alone (nobody waits, so its share does not bind), then queues more.
    await Promise.all([take("a"), take("a"), take("a"), take("a")]);
    const waiting = [...Array.from({ length: 6 }, () => take("a")), take("b"), take("b"), take("c")];
    expect(gate.stats().waiting).toBe(9);
    // A gives back two places: they go to B and C, who wait below their share, not to A's earlier calls.
    gate.release("a");
    gate.release("a");
    await Promise.resolve();
    expect(order.slice(4)).toEqual(["b", "c"]);
    // Two more: A, first in turn again and now below its share, then B.
    gate.release("a");
    gate.release("a");
    await Promise.resolve();
    expect(order.slice(6)).toEqual(["a", "b"]);
    // Of the four places given back by A it took one again.
    expect(gate.stats().heldBy.get("a")).toBe(1);
    for (let i = 0; i < 6; i++) gate.release(order[i]);
    await Promise.all(waiting);
    expect(order.filter((t) => t === "a")).toHaveLength(10);
  });

  it("gives up on a wait after its timeout with the error it is told", async () => {
    const gate = createFairGate({ capacity: 1, maxShare: 1, timeoutMs: 50, timeoutError: () => new Error("no place") });
    await gate.acquire("a");
    await expect(gate.acquire("b")).rejects.toThrow("no place");
    expect(gate.stats().waiting).toBe(0);
    gate.release("a");
    await gate.acquire("b");
  });
});

describe.skipIf(backend !== "postgres")("the database pool, shared by apps (PostgreSQL)", () => {
  let testDb: TestDatabase;
  let database: Database;
  beforeAll(async () => {
    testDb = await createTestDatabase();
    database = await openDatabase({ databaseUrl: testDb.url, dataDir: testDb.dataDir, poolSize: 4, poolAppShare: 0.5 });
  });
  afterAll(async () => {
    await database?.close();
    await testDb?.drop();
  });

  const sleep = (ms: number) => sql`SELECT pg_sleep(${ms / 1000})`.execute(database.db);

  it("serves an app's one statement after one of a flooding app's, not after all of them", async () => {
    await Promise.all(Array.from({ length: 4 }, () => sleep(1))); // the pool's four connections exist
    const statementMs = 100;
    const flood = runAsTenant("app-a", () =>
      Promise.all(
        Array.from({ length: 24 }, async () => {
          await database.db.connection().execute(async (conn) => {
            await sql`SELECT pg_sleep(${statementMs / 1000})`.execute(conn);
          });
        }),
      ),
    );
    await new Promise((r) => setTimeout(r, statementMs / 2));
    const started = Date.now();
    const bWaits = runAsTenant("app-b", () =>
      Promise.all(
        Array.from({ length: 3 }, () =>
          database.db.connection().execute(async (conn) => {
            await sql`SELECT 1`.execute(conn);
          }),
        ),
      ),
    );
    await bWaits;
    const waited = Date.now() - started;
    await flood;
    // First come, first served, B waited for 24 / 4 = 6 rounds of A's statements (about 550 ms); in turn,
    // for about one.
    expect(waited).toBeLessThan(statementMs * 3);
  });
});
