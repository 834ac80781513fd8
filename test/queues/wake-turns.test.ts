/**
 * Long-poll wake-ups serve apps in turn (`wake-hub.ts`): a notification that
 * wakes 200 consumers of app A (a batch put on another instance), followed
 * by one for app B, wakes B's consumer among the first, not after all of
 * A's (before: every wake went out in arrival order, B's last). Real
 * NOTIFYs through the database's LISTEN connection, on both backends.
 */
import crypto from "node:crypto";
import pino from "pino";
import { sql } from "kysely";
import { afterAll, beforeAll, expect, it } from "vitest";
import { migrate, openDatabase, type Database } from "../../src/core/database/index.ts";
import { QUEUE_CHANNEL, createQueueStore } from "../../src/queues/queue-store.ts";
import { createWakeHub, WAKE_TURN, type WakeHub } from "../../src/queues/wake-hub.ts";
import { createTestDatabase, type TestDatabase } from "../support/harness.ts";

let testDb: TestDatabase;
let database: Database;
let hub: WakeHub;

beforeAll(async () => {
  testDb = await createTestDatabase();
  database = await openDatabase({ databaseUrl: testDb.url, dataDir: testDb.dataDir });
  await migrate(database.unboundedDb);
  hub = createWakeHub(database, createQueueStore(database.db), pino({ level: "silent" }));
  await hub.start();
}, 60_000);
afterAll(async () => {
  await hub?.close();
  await database?.close();
  await testDb?.drop();
});

it("wakes another app's consumer in the first turn, not behind a flood of one app's wakes", async () => {
  const appA = crypto.randomUUID();
  const appB = crypto.randomUUID();
  const stop = new AbortController();
  const order: string[] = [];
  const wait = (appId: string, queue: string, tag: string) => {
    const waiter = hub.register(appId, queue);
    return waiter.wait(Date.now() + 20_000, stop.signal).then((woken) => {
      if (woken) order.push(tag);
      waiter.leave(false, waiter.beforeClaim());
    });
  };
  const waits = [...Array.from({ length: 200 }, (_, i) => wait(appA, "qa", `a${i}`)), wait(appB, "qb", "b")];
  // Another instance's batch put of 200 on A's queue, then a put on B's, in that order.
  await sql`SELECT pg_notify(${QUEUE_CHANNEL}, ${`elsewhere|${appA}|qa|0|200`}),
                   pg_notify(${QUEUE_CHANNEL}, ${`elsewhere|${appB}|qb|0`})`.execute(database.db);
  await expect.poll(() => order.length, { timeout: 10_000 }).toBe(201);
  stop.abort();
  await Promise.all(waits);
  expect(order.indexOf("b")).toBeLessThan(WAKE_TURN);
  expect(new Set(order).size).toBe(201);
});
