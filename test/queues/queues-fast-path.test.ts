/**
 * The fast path for internal services (Connect and gRPC only): PutMessages
 * (all or nothing), AckMessages (one answer per receipt) and StreamMessages
 * (a windowed, server-streaming consume). Each test runs over Connect and over
 * gRPC (h2c), against the real server and the real database of the run.
 */
import { Code, ConnectError, type Client } from "@connectrpc/connect";
import { describe, expect, it, vi } from "vitest";
import { QueueService, type Message } from "../../gen/platform/queues/v1/queues_pb.js";
import { startServer, useTestApp, useTestServer, type Protocol, type TestServer } from "../support/harness.ts";

const t = useTestServer();
const app = useTestApp(t);

type Queues = Client<typeof QueueService>;

const err = (p: Promise<unknown>) =>
  p.then(
    () => undefined,
    (e: unknown) => ConnectError.from(e),
  );

/** The sum of a metric's values on a server. */
async function metric(server: TestServer, name: string): Promise<number> {
  const m = server.server.deps.metrics.registry.getSingleMetric(name);
  if (!m) throw new Error(`no metric ${name}`);
  return (await m.get()).values.reduce((sum, v) => sum + v.value, 0);
}

async function stats(client: Queues, queue: string) {
  const { queues } = await client.listQueues({});
  const q = queues.find((x) => x.name === queue);
  return { depth: Number(q?.depth ?? 0n), inFlight: Number(q?.inFlight ?? 0n) };
}

const payloads = (n: number, from = 0) =>
  Array.from({ length: n }, (_, i) => ({ payload: { kind: { case: "numberValue" as const, value: from + i } } }));

describe.each(["connect", "grpc"] as Protocol[])("over %s", (protocol) => {
  const q = (name: string) => `${name}-${protocol}`;
  const client = () => t.client(QueueService, app.token, protocol);

  it("PutMessages stores a batch in order and hands it out in that order", async () => {
    const c = client();
    const put = await c.putMessages({ queue: q("order"), messages: payloads(50) });
    expect(put.messages).toHaveLength(50);
    expect(new Set(put.messages.map((m) => m.id)).size).toBe(50);
    // Ids in the layout of UUID version 7: the put's time in ms first, then random bits.
    for (const { id } of put.messages) {
      expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
      expect(Math.abs(parseInt(id.slice(0, 8) + id.slice(9, 13), 16) - Date.now())).toBeLessThan(60_000);
    }
    const got: number[] = [];
    for (let i = 0; i < 50; i++) {
      const { message } = await c.consumeMessage({ queue: q("order"), waitSeconds: 0 });
      got.push(message!.payload!.kind.value as number);
      expect(message!.id).toBe(put.messages[i].id);
    }
    expect(got).toEqual(Array.from({ length: 50 }, (_, i) => i));
  });

  it("PutMessages is all or nothing: one bad message or the depth cap stores none", async () => {
    const c = client();
    const bad = await err(
      c.putMessages({
        queue: q("all"),
        messages: [...payloads(3), { ttlSeconds: 0, payload: payloads(1)[0].payload }, ...payloads(3)],
      }),
    );
    expect(bad?.code).toBe(Code.InvalidArgument);
    expect(bad?.rawMessage).toContain("messages[3].ttlSeconds");
    const missing = await err(c.putMessages({ queue: q("all"), messages: [...payloads(2), {}] }));
    expect(missing?.rawMessage).toContain("messages[2].payload: is required");
    const empty = await err(c.putMessages({ queue: q("all"), messages: [] }));
    expect(empty?.code).toBe(Code.InvalidArgument);
    const tooMany = await err(c.putMessages({ queue: q("all"), messages: payloads(1001) }));
    expect(tooMany?.rawMessage).toContain("messages: must hold 1 to 1000 entries");
    const events = await err(c.putMessages({ queue: "_events", messages: payloads(1) }));
    expect(events?.code).toBe(Code.PermissionDenied);
    expect(await stats(c, q("all"))).toEqual({ depth: 0, inFlight: 0 });

    const capped = await t.createApp();
    await t.admin.updateApp({ appId: capped.id, limits: { maxQueueDepth: 10, maxPayloadBytes: 64 } });
    const cc = t.client(QueueService, capped.token, protocol);
    const big = await err(
      cc.putMessages({
        queue: "cap",
        messages: [...payloads(2), { payload: { kind: { case: "stringValue", value: "x".repeat(100) } } }],
      }),
    );
    expect(big?.rawMessage).toContain("messages[2].payload: must be at most 64 bytes");
    await cc.putMessages({ queue: "cap", messages: payloads(7) });
    const full = await err(cc.putMessages({ queue: "cap", messages: payloads(4) }));
    expect(full?.code).toBe(Code.ResourceExhausted);
    expect(await stats(cc, "cap")).toEqual({ depth: 7, inFlight: 0 });
    await cc.putMessages({ queue: "cap", messages: payloads(3) });
    expect(await stats(cc, "cap")).toEqual({ depth: 10, inFlight: 0 });
    // Concurrent batches near the cap: the ones that fit are stored whole, the others not at all.
    const c2 = await t.createApp();
    await t.admin.updateApp({ appId: c2.id, limits: { maxQueueDepth: 25 } });
    const cc2 = t.client(QueueService, c2.token, protocol);
    const outcomes = await Promise.all(
      Array.from({ length: 8 }, () =>
        cc2.putMessages({ queue: "cap", messages: payloads(6) }).then(
          () => true,
          () => false,
        ),
      ),
    );
    expect(outcomes.filter(Boolean)).toHaveLength(4);
    expect(await stats(cc2, "cap")).toEqual({ depth: 24, inFlight: 0 });
  });

  it("PutMessages counts leased messages out of the depth cap, and answers each message's expiry as stored", async () => {
    const capped = await t.createApp();
    await t.admin.updateApp({ appId: capped.id, limits: { maxQueueDepth: 10 } });
    const c = t.client(QueueService, capped.token, protocol);
    const first = await c.putMessages({ queue: "leased", messages: payloads(10) });
    // The answer's expiry is the stored one (the consume reads it from the row), to the millisecond.
    const { messages: leased } = await c.consumeMessage({ queue: "leased", waitSeconds: 0, max: 4, leaseSeconds: 60 });
    expect(leased).toHaveLength(4);
    for (const m of leased) expect(m.expiresAt).toEqual(first.messages.find((p) => p.id === m.id)!.expiresAt);
    // 10 rows, 6 waiting: the queue's rows exceed what the batch leaves room for, so the leased are counted out.
    const refill = await c.putMessages({ queue: "leased", messages: payloads(4) });
    expect(refill.messages).toHaveLength(4);
    expect(await stats(c, "leased")).toEqual({ depth: 10, inFlight: 4 });
    const full = await err(c.putMessages({ queue: "leased", messages: payloads(1) }));
    expect(full?.code).toBe(Code.ResourceExhausted);
    expect(full?.rawMessage).toContain("has 10 messages waiting");
    // Acked, the leased leave the queue's rows: a queue within the batch's room is answered without counting.
    const acked = await c.ackMessages({ receipts: leased.map((m) => m.receipt) });
    expect(acked.acked).toEqual([true, true, true, true]);
    expect(await stats(c, "leased")).toEqual({ depth: 10, inFlight: 0 });
    expect((await err(c.putMessages({ queue: "leased", messages: payloads(1) })))?.code).toBe(Code.ResourceExhausted);
  });

  it("AckMessages answers once per receipt: duplicates, unknown and lapsed receipts are false", async () => {
    const c = client();
    await c.putMessages({ queue: q("ack"), messages: payloads(3) });
    const a = (await c.consumeMessage({ queue: q("ack"), waitSeconds: 0, leaseSeconds: 60 })).message!;
    const b = (await c.consumeMessage({ queue: q("ack"), waitSeconds: 0, leaseSeconds: 60 })).message!;
    const lapsing = (await c.consumeMessage({ queue: q("ack"), waitSeconds: 0, leaseSeconds: 1 })).message!;
    // The lease lapses and the message is delivered again: the first receipt no longer acks.
    const again = (await c.consumeMessage({ queue: q("ack"), waitSeconds: 5, leaseSeconds: 60 })).message!;
    expect(again.id).toBe(lapsing.id);
    expect(again.deliveries).toBe(2);
    const unknown = Buffer.alloc(20, 7).toString("base64url");
    const { acked } = await c.ackMessages({
      receipts: [a.receipt, a.receipt, unknown, lapsing.receipt, b.receipt, again.receipt],
    });
    expect(acked).toEqual([true, false, false, false, true, true]);
    expect((await c.ackMessages({ receipts: [a.receipt, b.receipt] })).acked).toEqual([false, false]);
    const bad = await err(c.ackMessages({ receipts: [a.receipt, "nope"] }));
    expect(bad?.code).toBe(Code.InvalidArgument);
    expect(bad?.rawMessage).toContain("receipts[1]: is not a receipt");
    // Another app's receipt acks nothing.
    const other = await t.createApp();
    await c.putMessages({ queue: q("ack"), messages: payloads(1) });
    const mine = (await c.consumeMessage({ queue: q("ack"), waitSeconds: 0 })).message!;
    expect(
      (await t.client(QueueService, other.token, protocol).ackMessages({ receipts: [mine.receipt] })).acked,
    ).toEqual([false]);
    expect((await c.ackMessages({ receipts: [mine.receipt] })).acked).toEqual([true]);
  });

  it("concurrent acks of one batch of receipts: each receipt answered true exactly once", async () => {
    const c = client();
    await c.putMessages({ queue: q("ackrace"), messages: payloads(100) });
    const receipts: string[] = [];
    for (let i = 0; i < 100; i++)
      receipts.push((await c.consumeMessage({ queue: q("ackrace"), waitSeconds: 0 })).message!.receipt);
    const answers = await Promise.all(Array.from({ length: 6 }, () => c.ackMessages({ receipts })));
    for (let i = 0; i < 100; i++) expect(answers.filter((a) => a.acked[i]).length).toBe(1);
    expect(await stats(c, q("ackrace"))).toEqual({ depth: 0, inFlight: 0 });
  });

  it("streams and unary consumers on one queue: every message leased once, acked once, none lost", async () => {
    const c = client();
    const queue = q("mixed");
    const total = 1200;
    const holder = new Map<string, string>();
    const acked = new Set<string>();
    const violations: string[] = [];
    const done = new AbortController();
    let resolveAll: () => void = () => {};
    const allAcked = new Promise<void>((r) => (resolveAll = r));
    const handle = async (who: string, messages: Message[], ack: (receipts: string[]) => Promise<boolean[]>) => {
      for (const m of messages) {
        if (holder.has(m.id)) violations.push(`${m.id} held by ${holder.get(m.id)} and ${who}`);
        if (acked.has(m.id)) violations.push(`${m.id} delivered after its ack`);
        holder.set(m.id, who);
      }
      await new Promise((r) => setImmediate(r));
      for (const m of messages) holder.delete(m.id);
      const answers = await ack(messages.map((m) => m.receipt));
      answers.forEach((ok, i) => {
        if (!ok) violations.push(`${messages[i].id} ack refused`);
        acked.add(messages[i].id);
      });
      if (acked.size >= total) resolveAll();
    };
    const streams = Array.from({ length: 4 }, async (_, s) => {
      try {
        for await (const res of c.streamMessages(
          { queue, window: 8 + s * 8, leaseSeconds: 120 },
          { signal: done.signal },
        )) {
          await handle(`stream${s}`, res.messages, async (receipts) => (await c.ackMessages({ receipts })).acked);
        }
      } catch (e) {
        if (ConnectError.from(e).code !== Code.Canceled) throw e;
      }
    });
    const unary = Array.from({ length: 4 }, async (_, u) => {
      while (!done.signal.aborted) {
        const { message } = await c.consumeMessage({ queue, waitSeconds: 1, leaseSeconds: 120 });
        if (message) await handle(`unary${u}`, [message], async ([r]) => [(await c.ackMessage({ receipt: r })).acked]);
      }
    });
    await Promise.all(
      Array.from({ length: 6 }, (_, p) => c.putMessages({ queue, messages: payloads(total / 6, p * 1000) })),
    );
    await allAcked;
    done.abort();
    await Promise.all([...streams, ...unary]);
    expect(violations).toEqual([]);
    expect(acked.size).toBe(total);
    expect(await stats(c, queue)).toEqual({ depth: 0, inFlight: 0 });
  });

  it("a stream holds at most its window; acks refill it", async () => {
    const c = client();
    const queue = q("window");
    await c.putMessages({ queue, messages: payloads(30) });
    const stop = new AbortController();
    const got: Message[] = [];
    const it = c.streamMessages({ queue, window: 10 }, { signal: stop.signal })[Symbol.asyncIterator]();
    while (got.length < 10) got.push(...(await it.next()).value!.messages);
    expect(got).toHaveLength(10);
    // The window is full: nothing more is leased until an ack.
    expect(await stats(c, queue)).toEqual({ depth: 20, inFlight: 10 });
    expect((await c.ackMessages({ receipts: got.slice(0, 4).map((m) => m.receipt) })).acked).toEqual([
      true,
      true,
      true,
      true,
    ]);
    const more: Message[] = [];
    while (more.length < 4) more.push(...(await it.next()).value!.messages);
    expect(more.map((m) => m.payload!.kind.value)).toEqual([10, 11, 12, 13]);
    expect(await stats(c, queue)).toEqual({ depth: 16, inFlight: 10 });
    stop.abort();
    await it.next().then(
      () => undefined,
      () => undefined,
    );
    const bad = await err(
      (async () => {
        for await (const _ of c.streamMessages({ queue, window: 0 })) break;
      })(),
    );
    expect(bad?.code).toBe(Code.InvalidArgument);
    expect(bad?.rawMessage).toContain("window: must be an integer from 1 to 1000");
  });

  it("cancel leases nothing that was not sent; what was sent keeps its lease and acks", async () => {
    const c = client();
    const queue = q("cancel");
    await c.putMessages({ queue, messages: payloads(20) });
    const stop = new AbortController();
    const got: Message[] = [];
    const stream = c.streamMessages({ queue, window: 5, leaseSeconds: 120 }, { signal: stop.signal });
    const it = stream[Symbol.asyncIterator]();
    while (got.length < 5) got.push(...(await it.next()).value!.messages);
    stop.abort();
    await it.next().then(
      () => undefined,
      () => undefined,
    );
    await vi.waitFor(async () => expect(await metric(t, "queue_streams")).toBe(0), { timeout: 15_000 });
    expect(await stats(c, queue)).toEqual({ depth: 15, inFlight: 5 });
    expect((await c.ackMessages({ receipts: got.map((m) => m.receipt) })).acked).toEqual([
      true,
      true,
      true,
      true,
      true,
    ]);

    // Streams cancelled at random moments, while claims are under way: every
    // lease in the store is one a stream sent (the others were given back).
    await c.putMessages({ queue, messages: payloads(400) });
    const sentBefore = await metric(t, "queue_stream_messages_sent_total");
    await Promise.all(
      Array.from({ length: 20 }, async (_, i) => {
        const abort = new AbortController();
        const run = (async () => {
          for await (const _ of c.streamMessages({ queue, window: 20, leaseSeconds: 120 }, { signal: abort.signal }))
            void 0;
        })().catch(() => undefined);
        for (let k = 0; k < i % 5; k++) await new Promise((r) => setImmediate(r));
        abort.abort();
        await run;
      }),
    );
    await vi.waitFor(async () => expect(await metric(t, "queue_streams")).toBe(0), { timeout: 15_000 });
    const sent = (await metric(t, "queue_stream_messages_sent_total")) - sentBefore;
    const after = await stats(c, queue);
    expect(after.inFlight).toBe(sent);
    expect(after.depth + after.inFlight).toBe(415);
  });
});

it("server shutdown ends open streams cleanly, over Connect and gRPC", async () => {
  const server = await startServer();
  const own = await server.createApp();
  const outcomes = (["connect", "grpc"] as Protocol[]).map(async (protocol) => {
    const c = server.client(QueueService, own.token, protocol);
    await c.putMessages({ queue: `down-${protocol}`, messages: payloads(1) });
    const got: Message[] = [];
    for await (const res of c.streamMessages({ queue: `down-${protocol}`, window: 10 })) got.push(...res.messages);
    return got.length;
  });
  await vi.waitFor(async () => expect(await metric(server, "queue_streams")).toBe(2), { timeout: 15_000 });
  await vi.waitFor(async () => expect(await metric(server, "queue_stream_messages_sent_total")).toBe(2), {
    timeout: 15_000,
  });
  await server.close();
  expect(await Promise.all(outcomes)).toEqual([1, 1]);
});

it("server shutdown ends waiting consumes at once, each with an empty answer", async () => {
  const server = await startServer();
  const own = await server.createApp();
  // Many at once: the shutdown reaches each of them through one listener of the instance's shutdown signal.
  const waiting = Array.from({ length: 20 }, () =>
    server.request("POST", "/v1/queues/down-idle/consume", { token: own.token, body: { waitSeconds: 20 } }),
  );
  await vi.waitFor(async () => expect(await metric(server, "queue_waiting_consumers")).toBe(20), { timeout: 15_000 });
  const started = Date.now();
  await server.close();
  const answers = await Promise.all(waiting);
  // Well before the 20 s wait would have run out.
  expect(Date.now() - started).toBeLessThan(15_000);
  expect(answers.map((a) => [a.status, a.body])).toEqual(Array.from({ length: 20 }, () => [200, { message: null }]));
}, 30_000);
