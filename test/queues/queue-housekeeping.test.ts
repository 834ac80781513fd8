/**
 * The queue housekeeping of rows nothing else removes: a rate-limited queue's token bucket goes with its
 * limit (in the policy change's transaction) and the sweep deletes the buckets of queues without a limit
 * or idle; the dead-letter counts are folded into one row per queue and a queue's rows go once its dead
 * letters are all gone, without losing a dead letter counted during the fold (on PostgreSQL, with a
 * transaction holding a count's row open and with racing connections); a take open during the sweep
 * keeps its bucket.
 */
import { sql } from "kysely";
import type pg from "pg";
import { describe, expect, it, vi } from "vitest";
import { QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import type { Db } from "../../src/core/database/index.ts";
import { createMetrics } from "../../src/core/metrics.ts";
import { queueHousekeeping } from "../../src/queues/queue-housekeeping.ts";
import { createQueueStore } from "../../src/queues/queue-store.ts";
import { createRateBucketStore } from "../../src/queues/rate-bucket-store.ts";
import { backend, useTestServer } from "../support/harness.ts";
import { usePgClients } from "../support/pg-clients.ts";

/** Runs the queue housekeeping task `name` once, as the scheduler would. */
async function runTask(db: Db, name: string): Promise<number> {
  const tasks = queueHousekeeping(createQueueStore(db), createRateBucketStore(db), createMetrics());
  const task = tasks.find((x) => x.name === name);
  if (!task) throw new Error(`no task ${name}`);
  return task.run(new AbortController().signal);
}

async function buckets(db: Db, appId: string): Promise<string[]> {
  const { rows } = await sql<{ queue: string }>`
    SELECT queue FROM queue_rate_buckets WHERE app_id = ${appId} ORDER BY queue`.execute(db);
  return rows.map((r) => r.queue);
}

/** Per queue of the app: its count rows, their sum, and a plain count of its dead letters. */
async function deadCounts(db: Db, appId: string) {
  const { rows } = await sql<{ queue: string; slots: number; counted: number; plain: number }>`
    SELECT coalesce(c.queue, d.queue) AS queue, coalesce(c.slots, 0)::int AS slots,
           coalesce(c.n, 0)::int AS counted, coalesce(d.n, 0)::int AS plain
    FROM (SELECT queue, count(*) AS slots, sum(n) AS n FROM dead_letter_counts WHERE app_id = ${appId} GROUP BY queue) c
    FULL JOIN (SELECT queue, count(*) AS n FROM queue_dead_letters WHERE app_id = ${appId} GROUP BY queue) d
      ON d.queue = c.queue
    ORDER BY 1`.execute(db);
  return rows;
}

/** A dead letter inserted as a dead-letter move does (the triggers count it). */
const insertDeadLetter = (appId: string, queue: string) => sql`
  INSERT INTO queue_dead_letters (id, app_id, queue, payload, enqueued_at, deliveries, claims, expires_at)
  VALUES (gen_random_uuid(), ${appId}, ${queue}, '1', now(), 1, 1, now() + interval '1 day')`;

describe("queue housekeeping", () => {
  const t = useTestServer();
  const num = (v: number) => ({ kind: { case: "numberValue" as const, value: v } });

  it("removing maxDeliveriesPerSecond deletes the queue's bucket; other changes and other queues keep theirs", async () => {
    const app = await t.createApp();
    const c = t.client(QueueService, app.token);
    const db = t.server.deps.db;
    for (const queue of ["r1", "r2"]) {
      await c.updateQueuePolicy({ queue, maxDeliveriesPerSecond: 50 });
      await c.putMessage({ queue, payload: num(1) });
      const { message } = await c.consumeMessage({ queue, waitSeconds: 5 });
      expect(message).toBeDefined();
    }
    expect(await buckets(db, app.id)).toEqual(["r1", "r2"]);
    // A change that keeps the limit keeps the bucket.
    await c.updateQueuePolicy({ queue: "r1", maxDeliveries: 3 });
    expect(await buckets(db, app.id)).toEqual(["r1", "r2"]);
    await c.updateQueuePolicy({ queue: "r1", maxDeliveriesPerSecond: 0 });
    expect(await buckets(db, app.id)).toEqual(["r2"]);
  });

  it("the sweep deletes buckets of queues without a limit and idle ones, in bounded batches, and keeps those in use", async () => {
    const app = await t.createApp();
    const c = t.client(QueueService, app.token);
    const db = t.server.deps.db;
    const store = createRateBucketStore(db);
    for (const queue of ["busy", "idle"]) await c.updateQueuePolicy({ queue, maxDeliveriesPerSecond: 20 });
    // Buckets as takes make them: "gone" has no policy (its limit was removed while an instance still took on it).
    for (const queue of ["busy", "idle", "gone"]) await store.take(app.id, queue, 20, 5, 1);
    await sql`UPDATE queue_rate_buckets SET refilled_at = now() - interval '2 hours'
              WHERE app_id = ${app.id} AND queue = 'idle'`.execute(db);
    expect(await buckets(db, app.id)).toEqual(["busy", "gone", "idle"]);
    // Other tests' apps may have buckets of their own: this app's two go within a batch of 1 each time.
    let swept = 0;
    while ((await buckets(db, app.id)).length > 1) {
      expect(await store.sweep({ idleSeconds: 3_600, limit: 1 })).toBe(1);
      expect(++swept).toBeLessThanOrEqual(10);
    }
    expect(await buckets(db, app.id)).toEqual(["busy"]);
    expect(await runTask(db, "queue rate buckets")).toBe(0);
    expect(await buckets(db, app.id)).toEqual(["busy"]);
    // A limited queue whose bucket was swept takes again from a full one.
    const taken = await store.take(app.id, "idle", 20, 5, 10);
    expect(taken.granted).toBe(5);
  });

  it("dead-letter counts are folded to one row per queue, and a queue's rows go once its dead letters are gone", async () => {
    const app = await t.createApp();
    const c = t.client(QueueService, app.token);
    const db = t.server.deps.db;
    // Real dead letters: delivered once, nacked, and moved to the queue's own list.
    await c.updateQueuePolicy({ queue: "d1", maxDeliveries: 1, retryDelaySeconds: 0 });
    await c.putMessages({ queue: "d1", messages: [0, 1, 2].map((i) => ({ payload: num(i) })) });
    const { messages } = await c.consumeMessage({ queue: "d1", waitSeconds: 5, max: 3 });
    expect(messages).toHaveLength(3);
    for (const m of messages) await c.nackMessage({ receipt: m.receipt, delaySeconds: 0 });
    await vi.waitFor(
      async () => {
        await c.consumeMessage({ queue: "d1", waitSeconds: 0 });
        expect((await deadCounts(db, app.id)).find((r) => r.queue === "d1")?.plain).toBe(3);
      },
      { timeout: 20_000, interval: 100 },
    );
    for (let i = 0; i < 2; i++) await insertDeadLetter(app.id, "d2").execute(db);
    // A second slot for d1 (another connection's), as concurrent dead-letter moves leave.
    await sql`INSERT INTO dead_letter_counts (app_id, queue, slot, n)
              SELECT ${app.id}, 'd1', s, 0 FROM generate_series(0, 7) s ON CONFLICT DO NOTHING`.execute(db);
    // d2's letters are purged: its count rows sum to 0.
    await sql`DELETE FROM queue_dead_letters WHERE app_id = ${app.id} AND queue = 'd2'`.execute(db);
    const before = await deadCounts(db, app.id);
    expect(before.map((r) => [r.queue, r.slots > 1 || r.queue === "d2", r.counted, r.plain])).toEqual([
      ["d1", true, 3, 3],
      ["d2", true, 0, 0],
    ]);
    expect(await runTask(db, "queue dead-letter counts")).toBeGreaterThanOrEqual(2);
    expect(await deadCounts(db, app.id)).toEqual([{ queue: "d1", slots: 1, counted: 3, plain: 3 }]);
    // Folded: nothing left to do for this app.
    await runTask(db, "queue dead-letter counts");
    expect(await deadCounts(db, app.id)).toEqual([{ queue: "d1", slots: 1, counted: 3, plain: 3 }]);
  });
});

describe.skipIf(backend !== "postgres")(
  `the dead-letter counts' fold under concurrent dead letters (${backend === "postgres" ? "PostgreSQL" : "skipped: needs a PostgreSQL server (DATABASE_URL); a transaction held open takes a second connection, and PGlite has one"})`,
  () => {
    const t = useTestServer();
    /** [0] holds a transaction open; [1] watches from outside; [2..5] race. */
    const clients = usePgClients(t, 6);
    const insert = (client: pg.Client, appId: string, queue: string) =>
      client.query(
        `INSERT INTO queue_dead_letters (id, app_id, queue, payload, enqueued_at, deliveries, claims, expires_at)
         VALUES (gen_random_uuid(), $1, $2, '1', now(), 1, 1, now() + interval '1 day')`,
        [appId, queue],
      );
    const removeOne = (client: pg.Client, appId: string, queue: string) =>
      client.query(
        `DELETE FROM queue_dead_letters WHERE id = (
           SELECT id FROM queue_dead_letters WHERE app_id = $1 AND queue = $2 LIMIT 1 FOR UPDATE SKIP LOCKED)`,
        [appId, queue],
      );

    it("a dead letter counted in a transaction open while the fold finds its queue at 0 is kept", async () => {
      const app = await t.createApp();
      const db = t.server.deps.db;
      const store = createQueueStore(db);
      // The holder's slot row, at 0 (a letter added and removed): the fold picks this queue to delete.
      await insert(clients[0], app.id, "held");
      await removeOne(clients[0], app.id, "held");
      expect(await deadCounts(db, app.id)).toEqual([{ queue: "held", slots: 1, counted: 0, plain: 0 }]);
      await clients[0].query("BEGIN");
      let fold: Promise<number> | undefined;
      try {
        await insert(clients[0], app.id, "held");
        fold = store.compactDeadLetterCounts(1_000);
        // The fold waits for the open transaction's row lock.
        await vi.waitFor(
          async () => {
            const { rows } = await clients[1].query(
              `SELECT count(*)::int AS n FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
               WHERE NOT l.granted AND a.query LIKE '%dead_letter_counts%'`,
            );
            expect(rows[0].n).toBeGreaterThan(0);
          },
          { timeout: 10_000, interval: 20 },
        );
      } finally {
        await clients[0].query("COMMIT");
      }
      await fold;
      expect(await deadCounts(db, app.id)).toEqual([{ queue: "held", slots: 1, counted: 1, plain: 1 }]);
    });

    it("a take open on an idle bucket while the sweep runs keeps the bucket and what it took", async () => {
      const app = await t.createApp();
      const c = t.client(QueueService, app.token);
      const db = t.server.deps.db;
      const rateBuckets = createRateBucketStore(db);
      await c.updateQueuePolicy({ queue: "held", maxDeliveriesPerSecond: 4 });
      await rateBuckets.take(app.id, "held", 4, 1, 1);
      await sql`UPDATE queue_rate_buckets SET refilled_at = now() - interval '2 hours'
                WHERE app_id = ${app.id} AND queue = 'held'`.execute(db);
      // A take, as rate-bucket-store.ts makes it, held open: the bucket is in use again.
      await clients[0].query("BEGIN");
      try {
        await clients[0].query(
          `UPDATE queue_rate_buckets SET tokens = 0, granted = 1, refilled_at = statement_timestamp()
           WHERE app_id = $1 AND queue = 'held'`,
          [app.id],
        );
        // The sweep skips the locked bucket rather than waiting for it or deleting it after the take.
        await rateBuckets.sweep({ idleSeconds: 3_600, limit: 1_000 });
      } finally {
        await clients[0].query("COMMIT");
      }
      await rateBuckets.sweep({ idleSeconds: 3_600, limit: 1_000 });
      const { rows } = await sql<{ tokens: number; granted: number }>`
        SELECT tokens, granted FROM queue_rate_buckets WHERE app_id = ${app.id} AND queue = 'held'`.execute(db);
      expect(rows.map((r) => [Number(r.tokens), Number(r.granted)])).toEqual([[0, 1]]);
    });

    it("racing dead letters added and removed on four connections while folds run: the counts equal a plain count", async () => {
      const app = await t.createApp();
      const db = t.server.deps.db;
      const store = createQueueStore(db);
      const queues = ["x1", "x2", "x3"];
      let done = false;
      const racer = async (client: pg.Client, w: number) => {
        for (let i = 0; i < 60; i++) {
          const queue = queues[(w + i) % queues.length];
          if (i % 3 === 2) await removeOne(client, app.id, queue);
          else if (i % 5 === 4) {
            // Several queues in one transaction, as a dead-letter move of a batch counts them.
            await client.query("BEGIN");
            for (const q of queues) await insert(client, app.id, q);
            await removeOne(client, app.id, queues[w % queues.length]);
            await client.query("COMMIT");
          } else await insert(client, app.id, queue);
        }
      };
      const folder = async () => {
        let folds = 0;
        while (!done || folds < 3) {
          await store.compactDeadLetterCounts(1_000);
          folds++;
        }
        return folds;
      };
      const folding = folder();
      await Promise.all(clients.slice(2).map((client, w) => racer(client, w)));
      done = true;
      expect(await folding).toBeGreaterThanOrEqual(3);
      // A queue emptied at the end has its rows removed by the last fold; the others' rows equal a plain count.
      while ((await removeOne(clients[2], app.id, "x3")).rowCount === 1) continue;
      await store.compactDeadLetterCounts(1_000);
      const rows = await deadCounts(db, app.id);
      expect(rows.map((r) => r.queue)).toEqual(rows.some((r) => r.queue === "x3") ? ["x1", "x2", "x3"] : ["x1", "x2"]);
      expect(rows.find((r) => r.queue === "x3")).toBeUndefined();
      for (const r of rows) {
        expect(r.counted, r.queue).toBe(r.plain);
        expect(r.slots, r.queue).toBe(r.plain === 0 ? 0 : 1);
      }
    });
  },
);
