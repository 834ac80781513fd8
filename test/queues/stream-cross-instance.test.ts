/**
 * A `StreamMessages` call's window frees when its messages are acked on any
 * instance: behind a load balancer that spreads HTTP/2 requests, the stream
 * runs on one instance and its `AckMessages` calls land on another. Before,
 * the window freed only as leases lapsed (window ÷ lease messages a second).
 * The streams of an instance whose windows are full ask the database together
 * (`stream-windows.ts` `recheckTick`, `queue-consumers.ts`).
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import { startInstances, type Instances, type TestApp, type TestServer } from "../support/harness.ts";
import { metricValue, until } from "../support/server-state.ts";

let instances: Instances;
let a: TestServer;
let b: TestServer;
let app: TestApp;

beforeAll(async () => {
  instances = await startInstances(2);
  [a, b] = instances.servers as [TestServer, TestServer];
  app = await a.createApp();
});
afterAll(() => instances?.close());

it("a stream on instance A keeps delivering while its messages are acked on instance B (leases far from lapsing)", async () => {
  const total = 60;
  const onA = a.client(QueueService, app.token, "grpc");
  const onB = b.client(QueueService, app.token, "grpc");
  await onB.putMessages({
    queue: "spread",
    messages: Array.from({ length: total }, (_, i) => ({ payload: { kind: { case: "numberValue", value: i } } })),
  });
  const stop = new AbortController();
  const seen = new Set<string>();
  const started = Date.now();
  try {
    for await (const res of onA.streamMessages(
      { queue: "spread", window: 4, leaseSeconds: 600 },
      { signal: stop.signal },
    )) {
      const { acked } = await onB.ackMessages({ receipts: res.messages.map((m) => m.receipt) });
      expect(acked.every(Boolean)).toBe(true);
      for (const m of res.messages) seen.add(m.id);
      if (seen.size === total) break;
    }
  } finally {
    stop.abort();
  }
  expect(seen.size).toBe(total);
  // 15 windows' worth, each freed by acks on the other instance: seconds at most, not 15 leases of 600 s.
  expect(Date.now() - started).toBeLessThan(20_000);
}, 30_000);

it("a stream on instance A keeps its window full while a lease it handed out is extended on instance B", async () => {
  const onA = a.client(QueueService, app.token, "grpc");
  const onB = b.client(QueueService, app.token, "grpc");
  await onB.putMessages({
    queue: "extended",
    messages: [0, 1].map((i) => ({ payload: { kind: { case: "numberValue", value: i } } })),
  });
  const stop = new AbortController();
  const received: { id: string; at: number }[] = [];
  let extendedAt = 0;
  const reading = (async () => {
    try {
      for await (const res of onA.streamMessages(
        { queue: "extended", window: 1, leaseSeconds: 1 },
        { signal: stop.signal },
      )) {
        for (const m of res.messages) {
          received.push({ id: m.id, at: Date.now() });
          if (received.length === 1) {
            // Held past the lease it came with, by an extension made on the other instance.
            const { leaseExpiresAt } = await onB.extendLease({ receipt: m.receipt, leaseSeconds: 60 });
            expect(leaseExpiresAt).toBeDefined();
            extendedAt = Date.now();
          }
        }
      }
    } catch {
      // The test's own stop.
    }
  })();
  // Longer than the first message's original lease (1 s), well within its extension (60 s).
  await new Promise((resolve) => setTimeout(resolve, 3000));
  stop.abort();
  await reading;
  expect(extendedAt).toBeGreaterThan(0);
  // A window of 1 holds the extended message: the second one is not sent beside it.
  expect(received.map((r) => r.id)).toHaveLength(1);
}, 30_000);

it("streams with full windows ask the database together, and an ack on B frees only the window of the stream that sent it", async () => {
  const other = await a.createApp();
  const streams = 12;
  const owners = Array.from({ length: streams }, (_, i) => (i % 2 === 0 ? app : other));
  await Promise.all(
    owners.map((owner, i) =>
      b.client(QueueService, owner.token, "grpc").putMessages({
        queue: `full-${i}`,
        messages: [0, 1].map((n) => ({ payload: { kind: { case: "numberValue", value: n } } })),
      }),
    ),
  );
  const stop = new AbortController();
  const received = owners.map(() => [] as { id: string; receipt: string }[]);
  const readers = owners.map(async (owner, i) => {
    try {
      for await (const res of a
        .client(QueueService, owner.token, "grpc")
        .streamMessages({ queue: `full-${i}`, window: 1, leaseSeconds: 600 }, { signal: stop.signal }))
        received[i].push(...res.messages);
    } catch {
      // The test's own stop.
    }
  });
  try {
    await until(() => received.every((r) => r.length === 1), "every stream to fill its window of 1");
    // A rate over time, so time passes here (there is no event to wait for): first past the backoff's first
    // steps (5 to 80 ms, 155 ms in all), which streams filled at different moments take at different times,
    // then one second at the 100 ms step, where every stream asks at the same moments.
    await new Promise((resolve) => setTimeout(resolve, 400));
    const counted = metricValue(a, "queue_stream_rechecks_total");
    const started = Date.now();
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const statements = metricValue(a, "queue_stream_rechecks_total") - counted;
    const steps = (Date.now() - started) / 100;
    // One statement a step for all 12 streams (a busy machine only makes the steps fewer). Each stream on its
    // own timer, 12 went out a step: 120 in the second.
    expect(statements).toBeGreaterThan(0);
    expect(statements).toBeLessThanOrEqual(Math.ceil(steps) + 2);
    // An ack on B of stream 3's message (the other app's) frees its window alone, within a step or two.
    const { acked } = await b.client(QueueService, owners[3].token, "grpc").ackMessages({
      receipts: [received[3][0].receipt],
    });
    expect(acked).toEqual([true]);
    await until(() => received[3].length === 2, "stream 3 to get its second message");
    expect(received.map((r) => r.length)).toEqual(owners.map((_, i) => (i === 3 ? 2 : 1)));
  } finally {
    stop.abort();
    await Promise.all(readers);
  }
}, 30_000);
