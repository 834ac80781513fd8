/**
 * Ordered message groups (docs/queues.md "Ordered groups"): a put (and each message of a batch put) may
 * carry `groupKey`; a group's messages are delivered one at a time in put order. The next one is not
 * visible while one before it is leased, held back for a retry or delayed; an ack releases it, so does a
 * dead letter (which keeps the group's name); other groups and ungrouped messages flow on. Checked over
 * REST and Connect, on a consume and on a stream, with bad keys refused naming the field.
 */
import { describe, expect, it } from "vitest";
import { QueueService, MessageStatus } from "../../gen/platform/queues/v1/queues_pb.js";
import { restAs, useTestServer, type TestApp } from "../support/harness.ts";
import { metricValue, until } from "../support/server-state.ts";

const t = useTestServer();

const rest = restAs(t);
const num = (v: number) => ({ kind: { case: "numberValue" as const, value: v } });

interface RestMessage {
  id: string;
  payload: unknown;
  receipt: string;
}

async function take(app: TestApp, queue: string, body: Record<string, unknown> = {}): Promise<RestMessage[]> {
  const res = await rest(app, "POST", `/v1/queues/${queue}/consume`, { waitSeconds: 0, max: 100, ...body });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.messages as RestMessage[];
}

describe("ordered groups", () => {
  it("hands out one message of a group at a time, in put order; other groups and ungrouped ones flow on", async () => {
    const app = await t.createApp();
    const put = (payload: string, groupKey?: string) =>
      rest(app, "POST", "/v1/queues/g", { payload, ...(groupKey === undefined ? {} : { groupKey }) });
    expect((await put("a1", "a")).status).toBe(200);
    await put("b1", "b");
    await put("a2", "a");
    await put("free1");
    const batch = await rest(app, "POST", "/v1/queues/g/batch", {
      messages: [
        { payload: "a3", groupKey: "a" },
        { payload: "b2", groupKey: "b" },
        { payload: "free2" },
        { payload: "b3", groupKey: "b", priority: 9 },
      ],
    });
    expect(batch.status, JSON.stringify(batch.body)).toBe(200);
    // Only the heads, and every ungrouped message; b3's priority does not pass b1 and b2.
    const first = await take(app, "g");
    expect(first.map((m) => m.payload)).toEqual(["a1", "b1", "free1", "free2"]);
    // Leased heads hold their groups back.
    expect(await take(app, "g")).toEqual([]);
    // Acking a1 releases a2 (only); b stays behind b1.
    const ack = await rest(app, "POST", "/v1/queues/_ack", { receipt: first[0].receipt });
    expect(ack.body.acked).toBe(true);
    const second = await take(app, "g");
    expect(second.map((m) => m.payload)).toEqual(["a2"]);
    // A nack (with a hold) keeps the group back until it is visible again, then it comes first.
    const nack = await rest(app, "POST", "/v1/queues/_nack", { receipt: second[0].receipt, delaySeconds: 600 });
    expect(nack.body.nacked).toBe(true);
    expect(await take(app, "g")).toEqual([]);
    await rest(app, "POST", "/v1/queues/_ack", { receipts: [first[1].receipt] });
    expect((await take(app, "g")).map((m) => m.payload)).toEqual(["b2"]);
  });

  it("a delayed message holds its group back; the message status tells the group", async () => {
    const app = await t.createApp();
    const c = t.client(QueueService, app.token);
    const later = await c.putMessage({ queue: "d", payload: num(1), groupKey: "x", delaySeconds: 600 });
    const next = await c.putMessage({ queue: "d", payload: num(2), groupKey: "x" });
    await c.putMessage({ queue: "d", payload: num(3), groupKey: "y" });
    const got = await c.consumeMessage({ queue: "d", waitSeconds: 0, max: 10 });
    expect(got.messages.map((m) => m.payload?.kind.value)).toEqual([3]);
    const status = await c.getMessage({ queue: "d", id: next.id });
    expect(status.status).toBe(MessageStatus.WAITING);
    expect(status.groupKey).toBe("x");
    const delayed = await rest(app, "GET", `/v1/queues/d/messages/${later.id}`);
    expect(delayed.body).toMatchObject({ status: "delayed", groupKey: "x" });
    const plain = await c.putMessage({ queue: "d", payload: num(4) });
    expect((await rest(app, "GET", `/v1/queues/d/messages/${plain.id}`)).body.groupKey).toBeNull();
  });

  it("a dead letter releases its group and names it (REST and Connect listings, status)", async () => {
    const app = await t.createApp();
    const c = t.client(QueueService, app.token);
    await c.updateQueuePolicy({ queue: "dl", maxDeliveries: 2, retryDelaySeconds: 0 });
    const head = await c.putMessage({ queue: "dl", payload: num(1), groupKey: "order-7" });
    await c.putMessage({ queue: "dl", payload: num(2), groupKey: "order-7" });
    for (let i = 0; i < 2; i++) {
      const got = await c.consumeMessage({ queue: "dl", waitSeconds: 0, max: 10 });
      expect(got.messages.map((m) => m.id)).toEqual([head.id]);
      expect((await c.nackMessage({ receipt: got.messages[0].receipt, delaySeconds: 0 })).nacked).toBe(true);
    }
    // The next claim buries the head and, from then on, the second is the group's head.
    const after = await c.consumeMessage({ queue: "dl", waitSeconds: 5, max: 10 });
    expect(after.messages.map((m) => m.payload?.kind.value)).toEqual([2]);
    const listed = await c.listQueueDeadLetters({ queue: "dl" });
    expect(listed.deadLetters.map((d) => [d.id, d.groupKey])).toEqual([[head.id, "order-7"]]);
    const viaRest = await rest(app, "GET", "/v1/queues/dl/dead-letters");
    expect(viaRest.body.deadLetters[0]).toMatchObject({ id: head.id, groupKey: "order-7" });
    expect((await c.getMessage({ queue: "dl", id: head.id })).groupKey).toBe("order-7");
    const admin = await t.admin.listDeadLetters({ appId: app.id, queue: "dl" });
    expect(admin.deadLetters[0].groupKey).toBe("order-7");
    // Replayed, it goes to the end of its group's line: not before the one still leased.
    expect((await c.replayQueueDeadLetters({ queue: "dl", ids: [head.id] })).replayed).toBe(1);
    expect((await c.consumeMessage({ queue: "dl", waitSeconds: 0, max: 10 })).messages).toEqual([]);
    await c.ackMessage({ receipt: after.messages[0].receipt });
    const replayed = await c.consumeMessage({ queue: "dl", waitSeconds: 0, max: 10 });
    expect(replayed.messages.map((m) => m.id)).toEqual([head.id]);
  });

  it("an ack of a group's head wakes a consume waiting for the next one", async () => {
    const app = await t.createApp();
    const c = t.client(QueueService, app.token);
    await c.putMessages({ queue: "w", messages: [1, 2].map((v) => ({ payload: num(v), groupKey: "k" })) });
    const first = await c.consumeMessage({ queue: "w", waitSeconds: 0, leaseSeconds: 600 });
    const waiting = metricValue(t, "queue_waiting_consumers");
    const started = Date.now();
    const pending = c.consumeMessage({ queue: "w", waitSeconds: 20 });
    await until(() => metricValue(t, "queue_waiting_consumers") > waiting, "the consume to wait");
    expect((await c.ackMessage({ receipt: first.message!.receipt })).acked).toBe(true);
    const second = await pending;
    expect(second.message?.payload?.kind.value).toBe(2);
    // Woken by the ack's notification, not by the re-check every 5 s (nor at the end of the wait).
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it("a stream holds at most one message of a group at a time, in put order", async () => {
    const app = await t.createApp();
    const c = t.client(QueueService, app.token);
    const groups = 3;
    const each = 12;
    await c.putMessages({
      queue: "s",
      messages: Array.from({ length: groups * each }, (_, n) => ({
        payload: num(n),
        groupKey: `g${n % groups}`,
      })),
    });
    const stop = new AbortController();
    const seen: number[][] = Array.from({ length: groups }, () => []);
    const outstanding = new Map<number, string>();
    let received = 0;
    try {
      for await (const res of c.streamMessages(
        { queue: "s", window: 10, leaseSeconds: 600 },
        { signal: stop.signal },
      )) {
        for (const m of res.messages) {
          const n = m.payload?.kind.value as number;
          const group = n % groups;
          expect(outstanding.has(group), `a second message of g${group} while one is leased`).toBe(false);
          outstanding.set(group, m.receipt);
          seen[group].push(n);
          received++;
        }
        const receipts = [...outstanding.values()];
        outstanding.clear();
        const { acked } = await c.ackMessages({ receipts });
        expect(acked.every(Boolean)).toBe(true);
        if (received === groups * each) break;
      }
    } finally {
      stop.abort();
    }
    for (let g = 0; g < groups; g++) expect(seen[g]).toEqual(Array.from({ length: each }, (_, i) => i * groups + g));
  }, 60_000);

  it("refuses a bad groupKey naming the field (REST and Connect)", async () => {
    const app = await t.createApp();
    for (const groupKey of ["", "x".repeat(129), "a\nb", "tab\there", "\u0085", 7]) {
      const res = await rest(app, "POST", "/v1/queues/bad", { payload: 1, groupKey });
      expect(res.status, JSON.stringify(groupKey)).toBe(400);
      expect(res.body.error.message).toContain("groupKey");
    }
    expect((await rest(app, "POST", "/v1/queues/bad", { payload: 1, groupKey: "é".repeat(128) })).status).toBe(200);
    const batch = await rest(app, "POST", "/v1/queues/bad/batch", {
      messages: [
        { payload: 1, groupKey: "ok" },
        { payload: 2, groupKey: "" },
      ],
    });
    expect(batch.status).toBe(400);
    expect(batch.body.error.message).toContain("messages[1].groupKey");
    const c = t.client(QueueService, app.token);
    await expect(c.putMessage({ queue: "bad", payload: num(1), groupKey: "\u0000" })).rejects.toThrow(/groupKey/);
  });

  it("a consumed message carries its groupKey over REST, Connect and a stream; an ungrouped one none", async () => {
    const app = await t.createApp();
    const c = t.client(QueueService, app.token);
    const key = 'customer-"7"/é';
    await rest(app, "POST", "/v1/queues/carry", { payload: "grouped", groupKey: key });
    await rest(app, "POST", "/v1/queues/carry", { payload: "plain" });
    // REST: `groupKey` on the grouped message, absent on the other.
    const taken = await rest(app, "POST", "/v1/queues/carry/consume", { waitSeconds: 0, max: 10, leaseSeconds: 1 });
    expect(taken.status, JSON.stringify(taken.body)).toBe(200);
    const byPayload = new Map(
      (taken.body.messages as (RestMessage & { groupKey?: string })[]).map((m) => [m.payload, m]),
    );
    expect(byPayload.get("grouped")?.groupKey).toBe(key);
    expect(byPayload.get("plain")).not.toHaveProperty("groupKey");
    const single = await rest(app, "POST", "/v1/queues/one/consume", { waitSeconds: 0 });
    expect(single.body.message).toBeNull();
    await rest(app, "POST", "/v1/queues/one", { payload: 1, groupKey: "solo" });
    expect((await rest(app, "POST", "/v1/queues/one/consume", { waitSeconds: 0 })).body.message.groupKey).toBe("solo");
    // Connect: `group_key` on ConsumeMessage's message (single and `max`), unset on the ungrouped one.
    await c.putMessage({ queue: "rpc", payload: num(1), groupKey: key });
    await c.putMessage({ queue: "rpc", payload: num(2) });
    const one = await c.consumeMessage({ queue: "rpc", waitSeconds: 0 });
    expect(one.message?.groupKey).toBe(key);
    const rest2 = await c.consumeMessage({ queue: "rpc", waitSeconds: 0, max: 10 });
    expect(rest2.messages.map((m) => m.groupKey)).toEqual([undefined]);
    // StreamMessages: the same field on the streamed messages.
    await c.putMessage({ queue: "streamed", payload: num(1), groupKey: "s-1" });
    await c.putMessage({ queue: "streamed", payload: num(2) });
    const stop = new AbortController();
    const streamed = new Map<number, string | undefined>();
    try {
      for await (const res of c.streamMessages(
        { queue: "streamed", window: 10, leaseSeconds: 600 },
        { signal: stop.signal },
      )) {
        for (const m of res.messages) streamed.set(m.payload?.kind.value as number, m.groupKey);
        if (streamed.size === 2) break;
      }
    } finally {
      stop.abort();
    }
    expect([...streamed.entries()].sort()).toEqual([
      [1, "s-1"],
      [2, undefined],
    ]);
  }, 60_000);
});
