/**
 * Fair shares of the database pool (`fair-gate.ts` in front of `pg-pool.ts`):
 * while other apps wait for a connection, one app holds at most its share of
 * the pool, and waiting apps are served in turn. On PostgreSQL, with real
 * statements: app A floods a pool of 4 with slow statements, app B's
 * statements go at once on the places A may not take (before: first come,
 * first served, B waited behind all of A's). The gate alone is tested on any
 * backend.
 */
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { openDatabase, type Database } from "../../src/core/database/index.ts";
import { createFairGate } from "../../src/core/fair-gate.ts";
import { runAsTenant } from "../../src/core/tenant.ts";
import { createTestDatabase, type TestDatabase, describeOnPostgres } from "../support/harness.ts";

describe("the fair gate", () => {
  it("holds each tenant to its share and serves waiting tenants in turn, not in arrival order", async () => {
    const gate = createFairGate({ capacity: 6, maxShare: 0.5 });
    const order: string[] = [];
    const take = (tenant: string) =>
      gate.acquire(tenant).then(() => {
        order.push(tenant);
      });
    // A asks for 8 places: it gets its share, 3 of 6, and the rest of its calls wait although places are free.
    const a = Array.from({ length: 8 }, () => take("a"));
    await Promise.resolve();
    expect(order).toEqual(["a", "a", "a"]);
    // B and C, arriving later, take the free places at once: they never wait for A's calls.
    const bc = [take("b"), take("b"), take("c")];
    await Promise.resolve();
    expect(order.slice(3)).toEqual(["b", "b", "c"]);
    expect(gate.stats()).toMatchObject({ held: 6, waiting: 5 });
    // B and C ask for more: the gate is full, so they wait, in turn after A, who has waited longer.
    const more = [take("b"), take("c")];
    for (const tenant of ["c", "a", "b", "a"]) gate.release(tenant);
    await Promise.resolve();
    // C's place goes to B (A is at its share), A's to A, B's to C (in turn before A), the last to A.
    expect(order.slice(6)).toEqual(["b", "a", "c", "a"]);
    expect(gate.stats().heldBy.get("a")).toBeLessThanOrEqual(3);
    for (const tenant of order.slice()) gate.release(tenant);
    await Promise.all([...a, ...bc, ...more]);
    expect(order.filter((t) => t === "a")).toHaveLength(8);
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

describe("the fair gate's timeouts", () => {
  it("ends each wait past its timeout by one sweep, serves later waiters in turn, and stops sweeping once nobody waits", async () => {
    vi.useFakeTimers({ toFake: ["setInterval", "clearInterval", "performance"] });
    try {
      const gate = createFairGate({
        capacity: 1,
        maxShare: 1,
        timeoutMs: 50,
        timeoutError: () => new Error("no place"),
      });
      await gate.acquire("holder");
      const outcomes: string[] = [];
      const wait = (tenant: string) =>
        gate.acquire(tenant).then(
          () => void outcomes.push(`${tenant} served`),
          (err: Error) => void outcomes.push(`${tenant}: ${err.message}`),
        );
      void wait("a");
      await vi.advanceTimersByTimeAsync(40);
      const b = wait("b");
      // At 60 ms: A's wait (since 0) passed its 50 ms at a sweep; B's (since 40) has not.
      await vi.advanceTimersByTimeAsync(20);
      expect(outcomes).toEqual(["a: no place"]);
      expect(gate.stats().waiting).toBe(1);
      gate.release("holder");
      await b;
      expect(outcomes).toEqual(["a: no place", "b served"]);
      // Nobody waits: no sweep left running.
      expect(vi.getTimerCount()).toBe(0);
    } finally {
      vi.useRealTimers();
    }
  });
});

describeOnPostgres("the database pool, shared by apps", "PGlite has one connection, no pool", () => {
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

  it("serves an app's statements at once while a flooding app holds its share of the pool", async () => {
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
    // First come, first served, B waited for 24 / 4 = 6 rounds of A's statements (about 550 ms); now A holds
    // at most 2 of the 4 connections and B's go on the other two at once.
    expect(waited).toBeLessThan(statementMs * 2);
  });
});
