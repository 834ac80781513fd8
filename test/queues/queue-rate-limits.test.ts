/**
 * Consumer rate limits (docs/queues.md "Rate limits"): a queue policy's `maxDeliveriesPerSecond` bounds how
 * fast the queue's messages are handed out across all consumers and instances, and a consume beyond it waits
 * (its long poll) instead of failing.
 *
 * The rate test runs on three instances sharing PostgreSQL (one instance on PGlite) with many consumers of
 * every kind at once: single consumes over REST and Connect, batch consumes (`max` 5) and a `StreamMessages`
 * call per instance. With a limit of 20 a second, the deliveries its clients receive within a measured 5-second
 * window (after a 1-second start, so the bucket's initial burst is not in it) must be 100 within ±15%, plus
 * the bucket's burst (`max(1, 20 × 0.25)` = 5 tokens) on the high side: 85 to 120. Without the limit the same
 * consumers take the whole backlog in well under a second, so the test fails when the limit is not applied.
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import { RATE_BURST_SECONDS } from "../../src/queues/rate-gate.ts";
import { backend, startInstances, type Instances, type TestApp, type TestServer } from "../support/harness.ts";
import { metricValue } from "../support/server-state.ts";

let instances: Instances;
let servers: TestServer[];
let a: TestServer;

beforeAll(async () => {
  instances = await startInstances(backend === "postgres" ? 3 : 1);
  servers = instances.servers;
  a = servers[0];
}, 120_000);
afterAll(() => instances?.close());

const rest = (s: TestServer, app: TestApp, method: string, path: string, body?: unknown, signal?: AbortSignal) =>
  s.request(method, path, { token: app.token, body, signal });

async function putMany(app: TestApp, queue: string, n: number) {
  for (let i = 0; i < n; i += 500) {
    const messages = Array.from({ length: Math.min(500, n - i) }, (_, j) => ({ payload: i + j }));
    const res = await rest(a, app, "POST", `/v1/queues/${queue}/batch`, { messages });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
  }
}

const aborted = (err: unknown) =>
  (err instanceof Error && err.name === "AbortError") ||
  (err instanceof ConnectError && err.code === Code.Canceled) ||
  (err instanceof DOMException && err.name === "AbortError");

describe("the policy field", () => {
  it("is set, read and removed over REST, Connect and AdminService, and refused out of range naming it", async () => {
    const app = await a.createApp();
    const set = await rest(a, app, "PUT", "/v1/queues/q/policy", { maxDeliveriesPerSecond: 20 });
    expect(set.status, JSON.stringify(set.body)).toBe(200);
    expect(set.body.maxDeliveriesPerSecond).toBe(20);
    const client = a.client(QueueService, app.token, "connect");
    expect((await client.getQueuePolicy({ queue: "q" })).policy?.maxDeliveriesPerSecond).toBe(20);
    const half = await client.updateQueuePolicy({ queue: "q", maxDeliveriesPerSecond: 0.5 });
    expect(half.policy?.maxDeliveriesPerSecond).toBe(0.5);
    expect((await rest(a, app, "GET", "/v1/queues/q/policy")).body.maxDeliveriesPerSecond).toBe(0.5);
    // null removes it, as 0 does; the other fields stay.
    await rest(a, app, "PUT", "/v1/queues/q/policy", { maxDeliveries: 4 });
    const removed = await rest(a, app, "PUT", "/v1/queues/q/policy", { maxDeliveriesPerSecond: null });
    expect(removed.body).toMatchObject({ maxDeliveriesPerSecond: 0, maxDeliveries: 4 });
    const admin = await a.admin.setQueuePolicy({ appId: app.id, queue: "q", maxDeliveriesPerSecond: 7 });
    expect(admin.policy?.maxDeliveriesPerSecond).toBe(7);
    expect((await a.admin.getQueuePolicy({ appId: app.id, queue: "q" })).policy?.maxDeliveriesPerSecond).toBe(7);
    expect((await client.updateQueuePolicy({ queue: "q", maxDeliveriesPerSecond: 0 })).policy).toMatchObject({
      maxDeliveriesPerSecond: 0,
    });

    for (const bad of [-1, 0.001, 100_001, "fast"]) {
      const res = await rest(a, app, "PUT", "/v1/queues/q/policy", { maxDeliveriesPerSecond: bad });
      expect(res.status, JSON.stringify(res.body)).toBe(400);
      expect(JSON.stringify(res.body)).toContain("maxDeliveriesPerSecond");
    }
    const refused = await client.updateQueuePolicy({ queue: "q", maxDeliveriesPerSecond: -2 }).catch((e) => e);
    expect(refused).toBeInstanceOf(ConnectError);
    expect((refused as ConnectError).code).toBe(Code.InvalidArgument);
    expect((refused as ConnectError).message).toContain("maxDeliveriesPerSecond");
    expect((await rest(a, app, "GET", "/v1/queues/q/policy")).body.maxDeliveriesPerSecond).toBe(0);
  });
});

describe("a limited queue", () => {
  it("answers what the bucket holds at once, and a waiting consume as soon as the next token is due", async () => {
    const app = await a.createApp();
    await putMany(app, "slow", 5);
    // 0.5 a second: a burst of one token, the next 2 s later.
    await rest(a, app, "PUT", "/v1/queues/slow/policy", { maxDeliveriesPerSecond: 0.5 });
    // Before the first take: each later token is due 2 s after the one before, counted from here at the earliest.
    const t0 = Date.now();
    const first = await rest(a, app, "POST", "/v1/queues/slow/consume", { waitSeconds: 0, max: 10 });
    expect(first.body.messages).toHaveLength(1);
    // Beyond the limit without waiting: nothing, not an error.
    const none = await rest(a, app, "POST", "/v1/queues/slow/consume", { waitSeconds: 0 });
    expect(none.status).toBe(200);
    expect(none.body.message).toBeNull();
    // A waiting batch consume answers with the one message the limit allows, not waiting for ten.
    const waited = await rest(a, app, "POST", "/v1/queues/slow/consume", { waitSeconds: 20, max: 10 });
    expect(waited.body.messages).toHaveLength(1);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(1900);
    // Over Connect too.
    const client = a.client(QueueService, app.token, "connect");
    const viaConnect = await client.consumeMessage({ queue: "slow", waitSeconds: 20 });
    expect(viaConnect.message?.id).toBeTruthy();
    expect(Date.now() - t0).toBeGreaterThanOrEqual(3900);
    // Removed: what is left comes at once.
    await rest(a, app, "PUT", "/v1/queues/slow/policy", { maxDeliveriesPerSecond: 0 });
    const rest2 = await rest(a, app, "POST", "/v1/queues/slow/consume", { waitSeconds: 0, max: 10 });
    expect(rest2.body.messages).toHaveLength(2);
  }, 60_000);

  it("gives back the tokens a claim did not use: consumes of an empty queue do not spend the limit", async () => {
    const app = await a.createApp();
    // One token, the next 100 s later: spending it on nothing would leave the message below waiting.
    await rest(a, app, "PUT", "/v1/queues/idle/policy", { maxDeliveriesPerSecond: 0.01 });
    for (let i = 0; i < 3; i++) {
      const none = await rest(a, app, "POST", "/v1/queues/idle/consume", { waitSeconds: 0, max: 5 });
      expect(none.body.messages).toEqual([]);
    }
    await rest(a, app, "POST", "/v1/queues/idle", { payload: "now" });
    const got = await rest(a, app, "POST", "/v1/queues/idle/consume", { waitSeconds: 0 });
    expect(got.body.message?.payload).toBe("now");
    // That was the token: the next message waits for the next one.
    await rest(a, app, "POST", "/v1/queues/idle", { payload: "later" });
    expect((await rest(a, app, "POST", "/v1/queues/idle/consume", { waitSeconds: 0 })).body.message).toBeNull();
  });

  it("hands out its messages at the limit across instances and every kind of consumer", async () => {
    const app = await a.createApp();
    const queue = "limited";
    const limit = 20;
    const burst = Math.max(1, limit * RATE_BURST_SECONDS);
    await putMany(app, queue, 600);
    const set = await rest(a, app, "PUT", `/v1/queues/${queue}/policy`, { maxDeliveriesPerSecond: limit });
    expect(set.status).toBe(200);

    const stop = new AbortController();
    const receivedAt: number[] = [];
    const ids = new Set<string>();
    const got = (batch: { id: string }[]) => {
      const now = Date.now();
      for (const m of batch) {
        // Each message once (acked at once, long leases): a second delivery would be a bug of its own.
        expect(ids.has(m.id)).toBe(false);
        ids.add(m.id);
        receivedAt.push(now);
      }
    };
    const loops: Promise<void>[] = [];
    for (const s of servers) {
      const connect = s.client(QueueService, app.token, "connect");
      // Single consumes over REST.
      for (let i = 0; i < 6; i++)
        loops.push(
          (async () => {
            while (!stop.signal.aborted) {
              const res = await rest(s, app, "POST", `/v1/queues/${queue}/consume`, { waitSeconds: 3 }, stop.signal);
              if (res.status !== 200) throw new Error(`consume answered ${res.status} ${JSON.stringify(res.body)}`);
              if (!res.body.message) continue;
              got([res.body.message]);
              await rest(s, app, "POST", "/v1/queues/_ack", { receipt: res.body.message.receipt });
            }
          })(),
        );
      // Single and batch consumes over Connect.
      for (const max of [undefined, undefined, 5, 5])
        loops.push(
          (async () => {
            while (!stop.signal.aborted) {
              const res = await connect.consumeMessage({ queue, waitSeconds: 3, max }, { signal: stop.signal });
              const batch = max ? res.messages : res.message ? [res.message] : [];
              if (batch.length === 0) continue;
              got(batch);
              await connect.ackMessages({ receipts: batch.map((m) => m.receipt) });
            }
          })(),
        );
      // A stream with a window far above the limit.
      loops.push(
        (async () => {
          for await (const part of connect.streamMessages({ queue, window: 100 }, { signal: stop.signal })) {
            got(part.messages);
            await connect.ackMessages({ receipts: part.messages.map((m) => m.receipt) });
          }
        })(),
      );
    }
    const failures: unknown[] = [];
    const settled = Promise.all(loops.map((l) => l.catch((err) => void (aborted(err) || failures.push(err)))));

    const startedAt = Date.now();
    // The first second: the bucket's burst, and the consumers getting into line.
    const windowStart = startedAt + 1000;
    const windowEnd = windowStart + 5000;
    await new Promise((r) => setTimeout(r, windowEnd - Date.now() + 50));
    stop.abort();
    await settled;
    expect(failures).toEqual([]);

    const inWindow = receivedAt.filter((t) => t >= windowStart && t < windowEnd).length;
    // Every delivery had its token (the instances' counters together), and the takes were shared.
    const sum = (name: string) => servers.reduce((n, s) => n + metricValue(s, name), 0);
    expect(sum("queue_rate_tokens_granted_total")).toBeGreaterThanOrEqual(ids.size);
    expect(sum("queue_rate_takes_total")).toBeGreaterThan(0);
    const expected = limit * 5;
    expect(inWindow).toBeGreaterThanOrEqual(Math.floor(expected * 0.85));
    expect(inWindow).toBeLessThanOrEqual(Math.ceil(expected * 1.15 + burst));
  }, 120_000);
});
