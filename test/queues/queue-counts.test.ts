/**
 * The per-queue counts (migration 0012) behind the depth cap and the listing:
 * always equal to a plain count of the rows, under racing puts, batches,
 * consumes, acks, nacks, dead letters, purges and expiry, and after the
 * server process is killed (`kill -9`) in the middle of such work; the depth
 * cap stays exact under 200 racing puts.
 */
import { createClient } from "@connectrpc/connect";
import { sql } from "kysely";
import { describe, expect, it, vi } from "vitest";
import { AdminService } from "../../gen/platform/admin/v1/admin_pb.js";
import { QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import { openDatabase, type Db } from "../../src/core/database/index.ts";
import { createQueueStore } from "../../src/queues/queue-store.ts";
import { transportFor, useTestServer, describeOnPostgres } from "../support/harness.ts";
import { usePgClients } from "../support/pg-clients.ts";
import { useCrashableService, type ServiceProcess } from "../support/service-process.ts";

/** Per queue of the app: the counters' sum and a plain count of the rows; and the listing against a plain count of the states. */
async function compare(db: Db, appId: string) {
  const { rows } = await sql<{ queue: string; counted: number; plain: number }>`
    SELECT coalesce(c.queue, m.queue) AS queue, coalesce(c.n, 0)::int AS counted, coalesce(m.n, 0)::int AS plain
    FROM (SELECT queue, sum(n) AS n FROM queue_counts WHERE app_id = ${appId} GROUP BY queue) c
    FULL JOIN (SELECT queue, count(*) AS n FROM queue_messages WHERE app_id = ${appId} GROUP BY queue) m
      ON m.queue = c.queue`.execute(db);
  return rows;
}

async function plainStates(db: Db, appId: string) {
  const { rows } = await sql<{ name: string; depth: number; inFlight: number }>`
    SELECT queue AS name,
           count(*) FILTER (WHERE NOT coalesce(lease_until > now() AND visible_at > now(), false) AND expires_at > now())::int AS depth,
           count(*) FILTER (WHERE lease_until > now() AND visible_at > now())::int AS "inFlight"
    FROM queue_messages WHERE app_id = ${appId} GROUP BY queue ORDER BY queue`.execute(db);
  return rows.filter((r) => r.depth > 0 || r.inFlight > 0);
}

describe("in one server", () => {
  const t = useTestServer();
  const num = (v: number) => ({ kind: { case: "numberValue" as const, value: v } });

  it("the counts equal a plain count after racing puts, batches, consumes, acks, nacks, dead letters and purges", async () => {
    const app = await t.createApp();
    const c = t.client(QueueService, app.token);
    await c.updateQueuePolicy({ queue: "c1", maxDeliveries: 2, deadLetterQueue: "c3" });
    await c.updateQueuePolicy({ queue: "c2", maxDeliveries: 1 });
    const queues = ["c1", "c2", "c3"];
    const pick = <T>(xs: T[]) => xs[Math.floor(Math.random() * xs.length)];
    const worker = async (w: number) => {
      for (let i = 0; i < 40; i++) {
        const queue = pick(queues);
        const r = Math.random();
        if (r < 0.3) await c.putMessage({ queue, payload: num(i), ttlSeconds: i % 7 === 0 ? 1 : undefined });
        else if (r < 0.45)
          await c.putMessages({
            queue,
            messages: Array.from({ length: 1 + (i % 5) }, (_, k) => ({ payload: num(k) })),
          });
        else if (r < 0.9) {
          const { messages } = await c.consumeMessage({ queue, waitSeconds: 0, max: 3, leaseSeconds: 1 + (w % 2) });
          for (const m of messages) {
            const s = Math.random();
            if (s < 0.5) await c.ackMessage({ receipt: m.receipt });
            else if (s < 0.8) await c.nackMessage({ receipt: m.receipt, delaySeconds: 0 });
            // else: left to lapse
          }
        } else if (r < 0.93) await t.admin.purgeQueue({ appId: app.id, queue }).catch(() => undefined);
        else await c.ackMessages({ receipts: [] }).catch(() => undefined);
      }
    };
    await Promise.all(Array.from({ length: 8 }, (_, w) => worker(w)));
    // Expiry and the folding of the slots change rows too.
    const store = createQueueStore(t.server.deps.db);
    await store.expire(10_000);
    await store.compactCounts(10_000);
    const rows = await compare(t.server.deps.db, app.id);
    expect(rows.length).toBeGreaterThan(0);
    for (const r of rows) expect(r.counted, r.queue).toBe(r.plain);
    // The listing also names a queue that holds only dead letters (c2's go to its own list): the plain
    // count of messages has no such line, so both are compared on the queues with messages.
    async function listedStates() {
      return (await c.listQueues({})).queues
        .map((q) => ({ name: q.name, depth: Number(q.depth), inFlight: Number(q.inFlight) }))
        .filter((q) => q.depth > 0 || q.inFlight > 0);
    }
    // The listing and the plain count are read apart: a lease may lapse between them (more often on a loaded
    // machine), so they are read again until one pair of reads agrees.
    await vi.waitFor(async () => expect(await listedStates()).toEqual(await plainStates(t.server.deps.db, app.id)), {
      timeout: 5000,
      interval: 50,
    });
  });

  it("the depth cap is exact under 200 racing puts (single, batch and keyed), with caps below and above two shared statements' worth (64)", async () => {
    for (const cap of [50, 150]) {
      const app = await t.createApp();
      await t.admin.updateApp({ appId: app.id, limits: { maxQueueDepth: cap } });
      const c = t.client(QueueService, app.token);
      const outcomes = await Promise.all(
        Array.from({ length: 200 }, (_, i) => {
          const call =
            i % 10 === 0
              ? c.putMessages({ queue: "capped", messages: [{ payload: num(i) }] })
              : i % 10 === 1
                ? c.putMessage({ queue: "capped", payload: num(i), dedupKey: `k${i}` })
                : c.putMessage({ queue: "capped", payload: num(i) });
          return call.then(
            () => true,
            () => false,
          );
        }),
      );
      expect(outcomes.filter(Boolean)).toHaveLength(cap);
      const q = (await c.listQueues({})).queues.find((x) => x.name === "capped");
      expect(Number(q?.depth)).toBe(cap);
      const rows = await compare(t.server.deps.db, app.id);
      expect(rows).toEqual([{ queue: "capped", counted: cap, plain: cap }]);
    }
  });
});

describeOnPostgres(
  "puts that meet a put holding the queue's lock",
  "holding a put open takes a second connection, and PGlite has one",
  () => {
    const t = useTestServer();
    const num = (v: number) => ({ kind: { case: "numberValue" as const, value: v } });
    /** [0] holds the gate; [1] watches the server's sessions from outside. */
    const clients = usePgClients(t, 2);
    const GATE = 7_424_242;

    /** Sessions of the server waiting on an advisory lock other than the gate. */
    async function waitingOnQueueLocks(): Promise<number> {
      const { rows } = await clients[1].query(
        `SELECT count(*)::int AS n FROM pg_locks
         WHERE locktype = 'advisory' AND NOT granted AND NOT (classid = 0 AND objid = $1)`,
        [GATE],
      );
      return rows[0].n as number;
    }
    async function waitingOnGate(): Promise<number> {
      const { rows } = await clients[1].query(
        `SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND classid = 0 AND objid = $1`,
        [GATE],
      );
      return rows[0].n as number;
    }

    /**
     * Runs `run` with the gate held and a trigger that makes every insert of a
     * row of queue `gated` with payload `payload` (JSON text) wait at the gate
     * before its statement can commit: a put is held open after it counted.
     */
    async function withGate(payload: string, run: () => Promise<void>): Promise<void> {
      const db = t.server.deps.db;
      await sql`
        CREATE FUNCTION test_put_gate() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN PERFORM pg_advisory_lock(${sql.lit(GATE)}); PERFORM pg_advisory_unlock(${sql.lit(GATE)}); RETURN NULL; END $$`.execute(
        db,
      );
      await sql`
        CREATE TRIGGER test_put_gate AFTER INSERT ON queue_messages
        FOR EACH ROW WHEN (NEW.queue = 'gated' AND NEW.payload = ${sql.lit(payload)}) EXECUTE FUNCTION test_put_gate()`.execute(
        db,
      );
      try {
        await clients[0].query("SELECT pg_advisory_lock($1)", [GATE]);
        await run();
      } finally {
        await clients[0].query("SELECT pg_advisory_unlock_all()");
        await sql`DROP TRIGGER IF EXISTS test_put_gate ON queue_messages`.execute(db);
        await sql`DROP FUNCTION IF EXISTS test_put_gate()`.execute(db);
      }
    }
    const openGate = () => clients[0].query("SELECT pg_advisory_unlock($1)", [GATE]);

    it("single puts sent while a batch filling the queue is still open are refused, not added past the cap", async () => {
      // The batch counts the queue under its lock, inserts, then waits at the gate (a trigger on its
      // rows, not on the single puts') before it commits. Single puts sent meanwhile go in shared statements that count far
      // below the cap: they must see the batch, so they wait for its commit and are then refused.
      const cap = 100;
      const app = await t.createApp();
      await t.admin.updateApp({ appId: app.id, limits: { maxQueueDepth: cap } });
      const c = t.client(QueueService, app.token);
      const db = t.server.deps.db;
      const batchPayload = { kind: { case: "stringValue" as const, value: "batch" } };
      await withGate('"batch"', async () => {
        const batch = c
          .putMessages({ queue: "gated", messages: Array.from({ length: cap }, () => ({ payload: batchPayload })) })
          .then(
            () => true,
            () => false,
          );
        await vi.waitFor(async () => expect(await waitingOnGate()).toBe(1), { timeout: 10_000, interval: 20 });
        let settled = 0;
        const singles = Array.from({ length: 20 }, (_, i) =>
          c.putMessage({ queue: "gated", payload: num(i) }).then(
            () => (settled++, true),
            () => (settled++, false),
          ),
        );
        // Either the singles went past the open batch (the fault) or they wait on the queue's lock.
        await vi.waitFor(
          async () => expect(settled === singles.length || (await waitingOnQueueLocks()) > 0).toBe(true),
          { timeout: 10_000, interval: 20 },
        );
        await openGate();
        expect(await batch).toBe(true);
        const accepted = (await Promise.all(singles)).filter(Boolean).length;
        const rows = await compare(db, app.id);
        expect({ accepted, rows }).toEqual({ accepted: 0, rows: [{ queue: "gated", counted: cap, plain: cap }] });
      });
    });

    it("a put that waited for the queue's lock counts its delay and time to live from after the wait", async () => {
      // Both kinds of put wait for the lock: the unkeyed one in a shared statement, the keyed one in a transaction of its own.
      const app = await t.createApp();
      await t.admin.updateApp({ appId: app.id, limits: { maxQueueDepth: 10 } });
      const c = t.client(QueueService, app.token);
      const [lock, observer] = clients;
      await lock.query("BEGIN");
      await lock.query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", [`queue:${app.id}:held`]);
      const puts = [
        c.putMessage({ queue: "held", payload: num(1), ttlSeconds: 600, delaySeconds: 30 }),
        c.putMessage({ queue: "held", payload: num(2), ttlSeconds: 600, delaySeconds: 30, dedupKey: "k" }),
      ];
      await vi.waitFor(async () => expect(await waitingOnQueueLocks()).toBe(2), { timeout: 10_000, interval: 20 });
      const { rows: before } = await observer.query("SELECT clock_timestamp() AS t");
      await lock.query("COMMIT");
      await Promise.all(puts);
      const { rows } = await observer.query(
        `SELECT payload, visible_at >= $2::timestamptz + interval '30 s' AS delay_after,
                expires_at >= $2::timestamptz + interval '600 s' AS ttl_after
         FROM queue_messages WHERE app_id = $1 AND queue = 'held' ORDER BY payload`,
        [app.id, before[0].t],
      );
      expect(rows).toEqual([
        { payload: "1", delay_after: true, ttl_after: true },
        { payload: "2", delay_after: true, ttl_after: true },
      ]);
    });

    it("createQueueStore putMany: four instances' batches sent at the same moment stay within the cap", async () => {
      // Each instance sends at most one batch per queue at a time; four instances each send a full one
      // (32) at once on a queue capped at 100. A trigger on the first row a batch inserts waits at the gate, so
      // every batch that has counted the queue is held open with its rows uncommitted. Counting beside each
      // other, each would see none of the others' rows and insert all 32 (128); the cap lets 100 in.
      const cap = 100;
      const app = await t.createApp();
      const db = t.server.deps.db;
      await withGate('"first"', async () => {
        const instances = Array.from({ length: 4 }, () => createQueueStore(db));
        const batches = instances.map((store) =>
          store.putMany({
            appId: app.id,
            queue: "gated",
            depthBelow: cap,
            items: Array.from({ length: 32 }, (_, i) => ({
              payload: JSON.stringify(i === 0 ? "first" : i),
              delaySeconds: 0,
              ttlSeconds: 600,
              notify: undefined,
            })),
          }),
        );
        // Every batch is either held at the gate (it counted) or waits for the queue's lock (it has not).
        await vi.waitFor(async () => expect((await waitingOnGate()) + (await waitingOnQueueLocks())).toBe(4), {
          timeout: 10_000,
          interval: 20,
        });
        await openGate();
        const results = (await Promise.all(batches)).flat();
        const rows = await compare(db, app.id);
        expect({ inserted: results.filter((r) => r.inserted).length, rows }).toEqual({
          inserted: cap,
          rows: [{ queue: "gated", counted: cap, plain: cap }],
        });
        // Those left out are told the depth they met.
        for (const r of results) if (!r.inserted) expect(r.depth).toBe(cap);
      });
    });
  },
);

describe("across kill -9", () => {
  const service = useCrashableService();

  it("the counts equal a plain count after the server is killed at random moments of concurrent work", async () => {
    let server: ServiceProcess | undefined = await service.start();
    const { database } = service;
    const admin = createClient(AdminService, transportFor(server.url, "connect", database.adminToken));
    const { app } = await admin.createApp({ name: "counted" });
    const { token } = await admin.issueToken({ appId: app!.id });
    for (let round = 0; round < 3; round++) {
      if (!server) server = await service.start();
      const c = createClient(QueueService, transportFor(server.url, "grpc", token));
      let stop = false;
      let killed = false;
      let done = 0;
      let enough!: () => void;
      const reached = new Promise<void>((resolve) => (enough = resolve));
      // Killed after a random number of operations, while the workers keep going.
      const killAt = 50 + Math.floor(Math.random() * 150);
      const workers = Array.from({ length: 6 }, async (_, w) => {
        while (!stop) {
          try {
            const queue = `k${w % 3}`;
            if (w % 2 === 0) {
              await c.putMessages({
                queue,
                messages: Array.from({ length: 5 }, (_, i) => ({
                  payload: { kind: { case: "numberValue", value: i } },
                })),
              });
            } else {
              const { messages } = await c.consumeMessage({ queue, waitSeconds: 0, max: 5 });
              if (messages.length > 0) await c.ackMessages({ receipts: messages.map((m) => m.receipt) });
            }
            if (++done === killAt) enough();
          } catch {
            // The server is gone; or, before the kill, a call refused on a busy machine (503 unavailable): the
            // worker goes on, or the kill would wait for operations that no worker makes any more.
            if (killed) break;
          }
        }
      });
      await reached;
      killed = true;
      expect(await service.kill()).toBe("SIGKILL");
      stop = true;
      await Promise.all(workers);
      server = undefined;
      // The database as the killed server left it (PGlite: its data directory, now free).
      const db = await openDatabase({ databaseUrl: database.url, dataDir: database.dataDir });
      try {
        const rows = await compare(db.db, app!.id);
        expect(rows.length).toBeGreaterThan(0);
        for (const r of rows) expect(r.counted, `round ${round} ${r.queue}`).toBe(r.plain);
      } finally {
        await db.close();
      }
    }
  }, 180_000);
});
