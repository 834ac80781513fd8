/**
 * The queue controls beyond the base API (docs/queues.md): lease extension, nack,
 * the app's queue policy (retry hold, max deliveries, dead-letter queue or
 * drop), the app's dead letters, batches over REST and dedup keys, over REST
 * and Connect, with real racing calls where the claim is about a race.
 */
import { sql } from "kysely";
import { describe, expect, it } from "vitest";
import { QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import { restAs, useTestServer, type TestApp } from "../support/harness.ts";
import { lapseQueue, metricValue, until } from "../support/server-state.ts";
import { tables } from "../support/tables.ts";

const t = useTestServer();

const num = (v: number) => ({ kind: { case: "numberValue" as const, value: v } });

async function newApp(maxDeliveries = 0): Promise<TestApp> {
  const app = await t.createApp();
  if (maxDeliveries > 0) await t.admin.updateApp({ appId: app.id, limits: { maxDeliveries } });
  return app;
}

const rest = restAs(t);

async function put(app: TestApp, queue: string, payload: unknown, extra: Record<string, unknown> = {}) {
  const res = await rest(app, "POST", `/v1/queues/${queue}`, { payload, ...extra });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body as { id: string; expiresAt: number; deduplicated?: boolean };
}

async function consume(app: TestApp, queue: string, body: Record<string, unknown> = {}) {
  const res = await rest(app, "POST", `/v1/queues/${queue}/consume`, { waitSeconds: 0, ...body });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body as {
    message: { id: string; receipt: string; deliveries: number; leaseExpiresAt: number; payload: unknown } | null;
  };
}

async function listed(app: TestApp, queue: string) {
  const res = await rest(app, "GET", "/v1/queues");
  return (res.body.queues as { name: string; depth: number; inFlight: number; deadLetters: number }[]).find(
    (q) => q.name === queue,
  );
}

const lapse = (appId: string, queue: string) => lapseQueue(t, appId, queue);

describe("lease extension", () => {
  it("extends the lease of a receipt that holds it, and answers false for a lapsed or acked one", async () => {
    const app = await newApp();
    await put(app, "ext", { n: 1 });
    const { message } = await consume(app, "ext", { leaseSeconds: 5 });
    const before = Date.now();
    const ext = await rest(app, "POST", "/v1/queues/_extend", { receipt: message!.receipt, leaseSeconds: 600 });
    expect(ext.status).toBe(200);
    expect(ext.body.extended).toBe(true);
    expect(ext.body.leaseExpiresAt).toBeGreaterThanOrEqual(before + 590_000);
    expect(await listed(app, "ext")).toMatchObject({ depth: 0, inFlight: 1 });
    // Shortened again, then lapsed: the receipt no longer holds the lease.
    await lapse(app.id, "ext");
    const late = await rest(app, "POST", "/v1/queues/_extend", { receipt: message!.receipt, leaseSeconds: 60 });
    expect(late.body).toEqual({ extended: false, leaseExpiresAt: null });
    const again = await consume(app, "ext");
    expect(again.message?.deliveries).toBe(2);
    expect((await rest(app, "POST", "/v1/queues/_ack", { receipt: again.message!.receipt })).body).toEqual({
      acked: true,
    });
    const gone = await t
      .client(QueueService, app.token)
      .extendLease({ receipt: again.message!.receipt, leaseSeconds: 9 });
    expect(gone.extended).toBe(false);
  });

  it("rejects a lease outside 1..43200 naming the field", async () => {
    const app = await newApp();
    await put(app, "ext-bad", 1);
    const { message } = await consume(app, "ext-bad");
    for (const leaseSeconds of [0, 43_201]) {
      const res = await rest(app, "POST", "/v1/queues/_extend", { receipt: message!.receipt, leaseSeconds });
      expect(res.status).toBe(400);
      expect(res.body.error.message).toMatch(/^leaseSeconds: must be an integer from 1 to 43200/);
    }
    const res = await rest(app, "POST", "/v1/queues/_extend", { receipt: message!.receipt });
    expect(res.status).toBe(400);
    expect(res.body.error.message).toMatch(/^leaseSeconds/);
  });

  it("an extension racing the lapse either keeps the lease (nobody else gets the message) or reports false", async () => {
    const app = await newApp();
    const c = t.client(QueueService, app.token);
    const db = tables(t.server.deps.db);
    const seen = new Set<boolean>();
    for (let round = 0; round < 12; round++) {
      const queue = `race-ext-${round}`;
      await c.putMessage({ queue, payload: num(round) });
      const { message } = await c.consumeMessage({ queue, waitSeconds: 0, leaseSeconds: 60 });
      // The lease now ends within a few milliseconds, while the extension is on its way and a consumer waits.
      await sql`UPDATE queue_messages SET lease_until = now() + make_interval(secs => ${(round % 4) * 0.004}),
                       visible_at = now() + make_interval(secs => ${(round % 4) * 0.004})
                WHERE id = ${message!.id}`.execute(db);
      const [ext, other] = await Promise.all([
        c.extendLease({ receipt: message!.receipt, leaseSeconds: 60 }),
        c.consumeMessage({ queue, waitSeconds: 1, leaseSeconds: 60 }),
      ]);
      seen.add(ext.extended);
      const first = await c.ackMessage({ receipt: message!.receipt });
      // The extension's answer is the truth: the lease it reports held acks; one it reports lost does not.
      expect(first.acked).toBe(ext.extended);
      if (ext.extended) expect(other.message).toBeUndefined();
      else expect((await c.ackMessage({ receipt: other.message!.receipt })).acked).toBe(true);
    }
    expect(seen.has(false)).toBe(true);
  });
});

describe("nack", () => {
  it("gives the message back now, counting the delivery; later with delaySeconds", async () => {
    const app = await newApp();
    await put(app, "nack", { n: 1 });
    const first = (await consume(app, "nack")).message!;
    const res = await rest(app, "POST", "/v1/queues/_nack", { receipt: first.receipt, delaySeconds: 0 });
    expect(res.body).toEqual({ nacked: true });
    // The old receipt no longer acks, and the message is back at once, its delivery counted.
    expect((await rest(app, "POST", "/v1/queues/_ack", { receipt: first.receipt })).body.acked).toBe(false);
    const second = (await consume(app, "nack")).message!;
    expect(second.deliveries).toBe(2);
    // With a delay: waiting (counted in depth) but not visible.
    expect((await rest(app, "POST", "/v1/queues/_nack", { receipt: second.receipt, delaySeconds: 600 })).body).toEqual({
      nacked: true,
    });
    expect((await consume(app, "nack")).message).toBeNull();
    expect(await listed(app, "nack")).toMatchObject({ depth: 1, inFlight: 0 });
    expect((await rest(app, "POST", "/v1/queues/_ack", { receipt: second.receipt })).body.acked).toBe(false);
    // A nack of a receipt that no longer holds its lease.
    expect((await rest(app, "POST", "/v1/queues/_nack", { receipt: second.receipt })).body).toEqual({ nacked: false });
  });

  it("without delaySeconds applies the policy's retry delay and backoff, bounded by its maximum", async () => {
    const app = await newApp();
    const policy = await rest(app, "PUT", "/v1/queues/backoff/policy", {
      retryDelaySeconds: 10,
      retryBackoff: 3,
      maxRetryDelaySeconds: 50,
    });
    expect(policy.status).toBe(200);
    await put(app, "backoff", 1);
    const db = tables(t.server.deps.db);
    const holds: number[] = [];
    for (let i = 0; i < 4; i++) {
      const m = (await consume(app, "backoff")).message!;
      expect(m.deliveries).toBe(i + 1);
      expect((await rest(app, "POST", "/v1/queues/_nack", { receipt: m.receipt })).body.nacked).toBe(true);
      const { rows } = await sql<{ hold: number }>`
        SELECT extract(epoch FROM visible_at - now())::float8 AS hold FROM queue_messages WHERE id = ${m.id}`.execute(
        db,
      );
      holds.push(Math.round(rows[0].hold));
      await lapse(app.id, "backoff");
    }
    expect(holds).toEqual([10, 30, 50, 50]);
  });

  it("a lapsed lease is held back by the retry delay too, and the base API's immediate return stays without a policy", async () => {
    const app = await newApp();
    await rest(app, "PUT", "/v1/queues/held/policy", { retryDelaySeconds: 100 });
    // "plain" has no policy: the default's backoff holds nacks back, never a lapse (docs/queues.md).
    await put(app, "held", 1);
    await put(app, "plain", 1);
    const held = (await consume(app, "held", { leaseSeconds: 1 })).message!;
    const plain = (await consume(app, "plain", { leaseSeconds: 1 })).message!;
    // The leases end (only the leases: the retry hold after one stays).
    await sql`UPDATE queue_messages SET visible_at = visible_at - (lease_until - now()) - interval '1 second',
                     lease_until = now() - interval '1 second'
              WHERE id IN (${held.id}, ${plain.id})`.execute(tables(t.server.deps.db));
    expect((await consume(app, "plain")).message?.deliveries).toBe(2);
    expect((await consume(app, "held")).message).toBeNull();
    expect(await listed(app, "held")).toMatchObject({ depth: 1, inFlight: 0 });
  });

  it("a message delivered past where the backoff's power overflows a float8 still leases, nacks and lets the line move", async () => {
    // 2^1024 (the default backoff, 2) and 10^309 (the largest) overflow: PostgreSQL raised an error in every claim
    // that reached such a message, so nothing behind it was ever consumed.
    const app = await newApp();
    await rest(app, "PUT", "/v1/queues/worn10/policy", {
      retryDelaySeconds: 5,
      retryBackoff: 10,
      maxRetryDelaySeconds: 60,
    });
    const db = tables(t.server.deps.db);
    for (const queue of ["worn", "worn10"]) {
      const worn = await put(app, queue, "worn");
      await put(app, queue, "next");
      await sql`UPDATE queue_messages SET deliveries = 5000, claims = 5000 WHERE id = ${worn.id}`.execute(db);
      const first = (await consume(app, queue)).message!;
      expect(first).toMatchObject({ id: worn.id, deliveries: 5001 });
      const second = (await consume(app, queue)).message!;
      expect(second.payload).toBe("next");
      expect((await rest(app, "POST", "/v1/queues/_nack", { receipt: first.receipt })).body).toEqual({ nacked: true });
    }
    // The holds are the policy's maximum (60 s) and the default's (3,600 s, less up to half of it by the jitter).
    const { rows } = await sql<{ queue: string; hold: number }>`
      SELECT queue, extract(epoch FROM visible_at - now())::float8 AS hold FROM queue_messages
      WHERE app_id = ${app.id} AND deliveries = 5001`.execute(db);
    const holds = Object.fromEntries(rows.map((r) => [r.queue, Math.max(0, Math.round(r.hold))]));
    expect(holds.worn10).toBe(60);
    expect(holds.worn).toBeGreaterThanOrEqual(1799);
    expect(holds.worn).toBeLessThanOrEqual(3600);
    // Its hold ends now (only its own: the other message keeps its lease).
    await sql`UPDATE queue_messages SET visible_at = now() - interval '1 millisecond'
              WHERE app_id = ${app.id} AND queue = 'worn' AND deliveries = 5001`.execute(db);
    expect((await consume(app, "worn")).message?.deliveries).toBe(5002);
  });

  it("a message leased 2^31 - 1 times is leased again and lets the line move (the counts are int4)", async () => {
    const app = await newApp();
    const worn = await put(app, "counted", "worn");
    await put(app, "counted", "next");
    await sql`UPDATE queue_messages SET deliveries = 2147483647, claims = 2147483647 WHERE id = ${worn.id}`.execute(
      tables(t.server.deps.db),
    );
    const first = (await consume(app, "counted")).message!;
    expect(first).toMatchObject({ id: worn.id, deliveries: 2147483647 });
    expect((await consume(app, "counted")).message?.payload).toBe("next");
    // The new receipt holds the lease: it acks.
    expect((await rest(app, "POST", "/v1/queues/_ack", { receipt: first.receipt })).body).toEqual({ acked: true });
  });

  it("a nack without delaySeconds wakes a waiting consumer at once when the message is back at once", async () => {
    const app = await newApp();
    await put(app, "nack-wake", 1);
    const first = (await consume(app, "nack-wake")).message!;
    const started = Date.now();
    const waiting = rest(app, "POST", "/v1/queues/nack-wake/consume", { waitSeconds: 20 });
    await until(() => metricValue(t, "queue_waiting_consumers") === 1, "the consume to wait");
    expect((await rest(app, "POST", "/v1/queues/_nack", { receipt: first.receipt })).body).toEqual({ nacked: true });
    const res = await waiting;
    expect(res.body.message).toMatchObject({ id: first.id, deliveries: 2 });
    // Not at the wake-up hub's 5 s safety check.
    expect(Date.now() - started).toBeLessThan(3000);
  });

  it("a nack racing an ack: exactly one of them wins", async () => {
    const app = await newApp();
    const c = t.client(QueueService, app.token);
    const rounds = 30;
    await c.putMessages({
      queue: "nack-race",
      messages: Array.from({ length: rounds }, (_, i) => ({ payload: num(i) })),
    });
    const { messages } = await c.consumeMessage({ queue: "nack-race", waitSeconds: 0, max: rounds });
    expect(messages).toHaveLength(rounds);
    const outcomes = await Promise.all(
      messages.map((m) =>
        Promise.all([c.nackMessage({ receipt: m.receipt, delaySeconds: 0 }), c.ackMessage({ receipt: m.receipt })]),
      ),
    );
    let acked = 0;
    for (const [nack, ack] of outcomes) {
      expect(Number(nack.nacked) + Number(ack.acked)).toBe(1);
      acked += Number(ack.acked);
    }
    // What was nacked is back in line, what was acked is gone.
    expect((await listed(app, "nack-race"))?.depth ?? 0).toBe(rounds - acked);
  });
});

describe("queue policy", () => {
  it("answers the defaults, changes only the fields given, outlives an empty queue, checks its fields", async () => {
    const app = await newApp();
    const get = await rest(app, "GET", "/v1/queues/pol/policy");
    expect(get.status).toBe(200);
    expect(get.body).toEqual({
      queue: "pol",
      maxDeliveries: 0,
      deadLetterQueue: null,
      retryDelaySeconds: 1,
      retryBackoff: 2,
      maxRetryDelaySeconds: 3600,
      retryJitter: 0.5,
      leaseSeconds: 30,
      dedupWindowSeconds: 300,
      maxDeliveriesPerSecond: 0,
    });
    const set = await rest(app, "PUT", "/v1/queues/pol/policy", { maxDeliveries: 3, deadLetterQueue: "pol-dead" });
    expect(set.body).toMatchObject({ maxDeliveries: 3, deadLetterQueue: "pol-dead", retryDelaySeconds: 1 });
    const more = await rest(app, "PUT", "/v1/queues/pol/policy", { leaseSeconds: 90 });
    expect(more.body).toMatchObject({ maxDeliveries: 3, deadLetterQueue: "pol-dead", leaseSeconds: 90 });
    const back = await rest(app, "PUT", "/v1/queues/pol/policy", { deadLetterQueue: null });
    expect(back.body).toMatchObject({ maxDeliveries: 3, deadLetterQueue: null });
    // The queue never held a message, yet its policy is kept; a consume uses its lease.
    await put(app, "pol", 1);
    const m = (await consume(app, "pol")).message!;
    expect(m.leaseExpiresAt - Date.now()).toBeGreaterThan(80_000);
    for (const [body, field] of [
      [{ maxDeliveries: -1 }, "maxDeliveries"],
      [{ retryBackoff: 0.5 }, "retryBackoff"],
      [{ leaseSeconds: 0 }, "leaseSeconds"],
      [{ dedupWindowSeconds: 86_401 }, "dedupWindowSeconds"],
      [{ deadLetterQueue: "pol" }, "deadLetterQueue"],
      [{ deadLetterQueue: "no spaces" }, "deadLetterQueue"],
      [{ retryDelaySeconds: "5" }, "retryDelaySeconds"],
    ] as const) {
      const res = await rest(app, "PUT", "/v1/queues/pol/policy", body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.error.message).toMatch(new RegExp(`^${field}: `));
    }
    // Another app sees none of it.
    const other = await newApp();
    expect((await rest(other, "GET", "/v1/queues/pol/policy")).body.maxDeliveries).toBe(0);
  });

  it("the operator's maxDeliveries bounds the queue's", async () => {
    const app = await newApp(5);
    expect((await rest(app, "GET", "/v1/queues/b/policy")).body.maxDeliveries).toBe(5);
    expect((await rest(app, "PUT", "/v1/queues/b/policy", { maxDeliveries: 2 })).body.maxDeliveries).toBe(2);
    const over = await rest(app, "PUT", "/v1/queues/b/policy", { maxDeliveries: 6 });
    expect(over.status).toBe(400);
    expect(over.body.error.message).toBe("maxDeliveries: must be an integer from 1 to 5");
    expect((await rest(app, "PUT", "/v1/queues/b/policy", { maxDeliveries: 0 })).status).toBe(400);
    // Lowered by the operator afterwards: the queue's is lowered with it.
    await t.admin.updateApp({ appId: app.id, limits: { maxDeliveries: 1 } });
    const fresh = await t.client(QueueService, app.token).getQueuePolicy({ queue: "b" });
    expect(fresh.policy?.maxDeliveries).toBe(1);
  });

  it("past maxDeliveries a message moves to the dead-letter queue, a regular queue of the app", async () => {
    const app = await newApp();
    await rest(app, "PUT", "/v1/queues/work/policy", { maxDeliveries: 2, deadLetterQueue: "work-failed" });
    const { id } = await put(app, "work", { job: 7 });
    for (let i = 0; i < 2; i++) {
      const m = (await consume(app, "work")).message!;
      await rest(app, "POST", "/v1/queues/_nack", { receipt: m.receipt, delaySeconds: 0 });
    }
    expect((await consume(app, "work")).message).toBeNull();
    const moved = (await consume(app, "work-failed")).message!;
    expect(moved.payload).toEqual({ job: 7 });
    expect(moved.deliveries).toBe(1);
    // It keeps its id (docs/queues.md "Queue policies"), so its status can be asked on the dead-letter queue.
    expect(moved.id).toBe(id);
    expect(await listed(app, "work")).toBeUndefined();
  });

  it("with deadLetterQueue _drop a message past maxDeliveries is deleted", async () => {
    const app = await newApp();
    await rest(app, "PUT", "/v1/queues/dropq/policy", { maxDeliveries: 1, deadLetterQueue: "_drop" });
    await put(app, "dropq", 1);
    const m = (await consume(app, "dropq")).message!;
    await rest(app, "POST", "/v1/queues/_nack", { receipt: m.receipt, delaySeconds: 0 });
    expect((await consume(app, "dropq")).message).toBeNull();
    expect(await listed(app, "dropq")).toBeUndefined();
  });
});

describe("the app's dead letters", () => {
  async function deadLetters(app: TestApp, queue: string, n: number) {
    await rest(app, "PUT", `/v1/queues/${queue}/policy`, { maxDeliveries: 1 });
    const batch = await rest(app, "POST", `/v1/queues/${queue}/batch`, {
      messages: Array.from({ length: n }, (_, i) => ({ payload: { i } })),
    });
    expect(batch.status).toBe(200);
    const taken = await consume(app, queue, { max: 100 });
    const receipts = (taken as unknown as { messages: { receipt: string }[] }).messages.map((m) => m.receipt);
    expect(receipts).toHaveLength(n);
    for (const receipt of receipts) await rest(app, "POST", "/v1/queues/_nack", { receipt, delaySeconds: 0 });
    expect((await consume(app, queue)).message).toBeNull();
    return (batch.body.messages as { id: string }[]).map((m) => m.id);
  }

  it("lists them in pages, replays and purges them, by id or all; the operator sees the same list", async () => {
    const app = await newApp();
    const ids = await deadLetters(app, "dl", 5);
    const first = await rest(app, "GET", "/v1/queues/dl/dead-letters?limit=3");
    expect(first.status).toBe(200);
    expect(first.body.deadLetters).toHaveLength(3);
    expect(first.body.deadLetters[0]).toMatchObject({ deliveries: 1, payload: { i: expect.any(Number) } });
    const second = await rest(app, "GET", `/v1/queues/dl/dead-letters?limit=3&cursor=${first.body.nextCursor}`);
    expect(second.body.deadLetters).toHaveLength(2);
    expect(second.body.nextCursor).toBeNull();
    const seen = [...first.body.deadLetters, ...second.body.deadLetters].map((d: { id: string }) => d.id);
    expect(seen.sort()).toEqual([...ids].sort());
    const op = await t.admin.listDeadLetters({ appId: app.id, queue: "dl", pageSize: 10 });
    expect(op.deadLetters).toHaveLength(5);

    expect((await rest(app, "POST", "/v1/queues/dl/dead-letters/replay", { ids: [ids[0]] })).body).toEqual({
      replayed: 1,
    });
    expect((await consume(app, "dl")).message?.id).toBe(ids[0]);
    expect((await rest(app, "POST", "/v1/queues/dl/dead-letters/purge", { ids: [ids[1]] })).body).toEqual({
      purged: 1,
    });
    expect((await rest(app, "POST", "/v1/queues/dl/dead-letters/replay", {})).body).toEqual({ replayed: 3 });
    expect((await rest(app, "POST", "/v1/queues/dl/dead-letters/purge")).body).toEqual({ purged: 0 });
    // Another app's ids match nothing.
    const other = await newApp();
    expect((await rest(other, "POST", "/v1/queues/dl/dead-letters/purge", { ids })).body).toEqual({ purged: 0 });
    const bad = await rest(app, "GET", "/v1/queues/dl/dead-letters?cursor=nope");
    expect(bad.status).toBe(400);
    expect(bad.body.error.message).toMatch(/^cursor: /);
    const badId = await rest(app, "POST", "/v1/queues/dl/dead-letters/replay", { ids: ["x"] });
    expect(badId.status).toBe(400);
    expect(badId.body.error.message).toMatch(/^ids\[0\]: /);
  });

  it("a replay racing consumers: every replayed message is consumed exactly once", async () => {
    const app = await newApp();
    const n = 40;
    const ids = await deadLetters(app, "dl-race", n);
    // Raise the limit so the replayed messages are not buried again at once.
    await rest(app, "PUT", "/v1/queues/dl-race/policy", { maxDeliveries: 0 });
    const c = t.client(QueueService, app.token);
    const got: string[] = [];
    let replayDone = false;
    const consumer = async () => {
      for (;;) {
        const { messages } = await c.consumeMessage({ queue: "dl-race", waitSeconds: 0, max: 3 });
        for (const m of messages) {
          got.push(m.id);
          expect((await c.ackMessage({ receipt: m.receipt })).acked).toBe(true);
        }
        if (messages.length === 0 && replayDone) return;
      }
    };
    const consumers = Array.from({ length: 6 }, consumer);
    const replayed = await rest(app, "POST", "/v1/queues/dl-race/dead-letters/replay", {});
    replayDone = true;
    await Promise.all(consumers);
    expect(replayed.body.replayed).toBe(n);
    expect(got.sort()).toEqual([...ids].sort());
  });
});

describe("batches over REST", () => {
  it("puts all or nothing, consumes up to max, acks many in order", async () => {
    const app = await newApp();
    const res = await rest(app, "POST", "/v1/queues/b1/batch", {
      messages: [{ payload: 1 }, { payload: { a: 2 }, delaySeconds: 600 }, { payload: "three", ttlSeconds: 60 }],
    });
    expect(res.status).toBe(200);
    expect(res.body.queue).toBe("b1");
    expect(res.body.messages).toHaveLength(3);
    expect(res.body.messages[0]).toMatchObject({ deduplicated: false });
    // One invalid message: none is stored, and the field is named.
    const bad = await rest(app, "POST", "/v1/queues/b1/batch", {
      messages: [{ payload: 4 }, { payload: 5, ttlSeconds: 0 }],
    });
    expect(bad.status).toBe(400);
    expect(bad.body.error.message).toMatch(/^messages\[1\]\.ttlSeconds: /);
    const none = await rest(app, "POST", "/v1/queues/b1/batch", { messages: [] });
    expect(none.status).toBe(400);
    expect(none.body.error.message).toMatch(/^messages: must hold 1 to 1000/);
    const taken = await rest(app, "POST", "/v1/queues/b1/consume", { max: 10, waitSeconds: 0 });
    expect(taken.status).toBe(200);
    expect(taken.body.message).toBeUndefined();
    expect(taken.body.messages.map((m: { payload: unknown }) => m.payload)).toEqual([1, "three"]);
    const receipts = taken.body.messages.map((m: { receipt: string }) => m.receipt);
    const acked = await rest(app, "POST", "/v1/queues/_ack", { receipts: [receipts[1], receipts[0], receipts[1]] });
    expect(acked.body).toEqual({ acked: [true, true, false] });
    const empty = await rest(app, "POST", "/v1/queues/b1/consume", { max: 5, waitSeconds: 0 });
    expect(empty.body).toEqual({ messages: [] });
    // Without max: the base API's shape.
    expect((await rest(app, "POST", "/v1/queues/b1/consume", { waitSeconds: 0 })).body).toEqual({ message: null });
    for (const max of [0, 101]) {
      const r = await rest(app, "POST", "/v1/queues/b1/consume", { max, waitSeconds: 0 });
      expect(r.status).toBe(400);
      expect(r.body.error.message).toMatch(/^max: must be an integer from 1 to 100/);
    }
    const noReceipt = await rest(app, "POST", "/v1/queues/_ack", {});
    expect(noReceipt.status).toBe(400);
    expect(noReceipt.body.error.message).toMatch(/^receipt: is required/);
  });

  it("a batch put checks the depth cap for the whole batch, exactly", async () => {
    const app = await newApp();
    await t.admin.updateApp({ appId: app.id, limits: { maxQueueDepth: 10 } });
    const ok = await rest(app, "POST", "/v1/queues/cap/batch", {
      messages: Array.from({ length: 8 }, (_, i) => ({ payload: i })),
    });
    expect(ok.status).toBe(200);
    const over = await rest(app, "POST", "/v1/queues/cap/batch", {
      messages: Array.from({ length: 3 }, (_, i) => ({ payload: i })),
    });
    expect(over.status).toBe(429);
    expect(over.body.error.code).toBe("queue_full");
    expect((await listed(app, "cap"))?.depth).toBe(8);
  });
  it("a consume with max waits for a put and answers what arrived", async () => {
    const app = await newApp();
    const pending = rest(app, "POST", "/v1/queues/wait-many/consume", { max: 10, waitSeconds: 20 });
    while ((await waiting()) === 0) await new Promise((r) => setImmediate(r));
    await put(app, "wait-many", "x");
    const res = await pending;
    expect(res.body.messages.map((m: { payload: unknown }) => m.payload)).toEqual(["x"]);
  });
});

async function waiting(): Promise<number> {
  const m = t.server.deps.metrics.registry.getSingleMetric("queue_waiting_consumers");
  return m ? (await m.get()).values.reduce((sum, v) => sum + v.value, 0) : 0;
}

describe("dedup keys", () => {
  it("a second put of a key within the window adds nothing and answers the first message", async () => {
    const app = await newApp();
    const first = await put(app, "dd", { v: 1 }, { dedupKey: "order-1" });
    expect(first.deduplicated).toBe(false);
    const again = await put(app, "dd", { v: 2 }, { dedupKey: "order-1" });
    expect(again).toEqual({ ...first, deduplicated: true });
    // Acked: still deduplicated within the window.
    const m = (await consume(app, "dd")).message!;
    expect(m.payload).toEqual({ v: 1 });
    await rest(app, "POST", "/v1/queues/_ack", { receipt: m.receipt });
    expect((await put(app, "dd", { v: 3 }, { dedupKey: "order-1" })).deduplicated).toBe(true);
    expect(await listed(app, "dd")).toBeUndefined();
    // Another key, another queue, a put without a key: each adds a message.
    expect((await put(app, "dd", 1, { dedupKey: "order-2" })).deduplicated).toBe(false);
    expect((await put(app, "dd2", 1, { dedupKey: "order-1" })).deduplicated).toBe(false);
    expect((await put(app, "dd", 1)).deduplicated).toBeUndefined();
    // Past the window, the key adds again.
    await sql`UPDATE queue_dedup SET until = now() WHERE app_id = ${app.id}`.execute(tables(t.server.deps.db));
    const later = await put(app, "dd", { v: 4 }, { dedupKey: "order-1" });
    expect(later.deduplicated).toBe(false);
    expect(later.id).not.toBe(first.id);
    const bad = await rest(app, "POST", "/v1/queues/dd", { payload: 1, dedupKey: "k".repeat(129) });
    expect(bad.status).toBe(400);
    expect(bad.body.error.message).toMatch(/^dedupKey: must be 1 to 128 characters/);
  });

  it("in a batch, a repeated key adds one message; racing puts of one key add one", async () => {
    const app = await newApp();
    const res = await rest(app, "POST", "/v1/queues/ddb/batch", {
      messages: [
        { payload: 1, dedupKey: "a" },
        { payload: 2, dedupKey: "a" },
        { payload: 3, dedupKey: "b" },
      ],
    });
    const [a, a2, b] = res.body.messages as { id: string; deduplicated: boolean }[];
    expect(a.deduplicated).toBe(false);
    expect(a2).toMatchObject({ id: a.id, deduplicated: true });
    expect(b.deduplicated).toBe(false);
    const c = t.client(QueueService, app.token);
    const racing = await Promise.all(
      Array.from({ length: 30 }, (_, i) => c.putMessage({ queue: "ddr", payload: num(i), dedupKey: "same" })),
    );
    expect(new Set(racing.map((r) => r.id)).size).toBe(1);
    expect(racing.filter((r) => !r.deduplicated)).toHaveLength(1);
    expect((await listed(app, "ddr"))?.depth).toBe(1);
  });

  it("the window follows the policy", async () => {
    const app = await newApp();
    await rest(app, "PUT", "/v1/queues/ddw/policy", { dedupWindowSeconds: 7 });
    await put(app, "ddw", 1, { dedupKey: "k" });
    const { rows } = await sql<{ s: number }>`
      SELECT extract(epoch FROM until - now())::float8 AS s FROM queue_dedup WHERE app_id = ${app.id}`.execute(
      tables(t.server.deps.db),
    );
    expect(Math.round(rows[0].s)).toBe(7);
  });
});
