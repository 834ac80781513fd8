/**
 * Failures that say why, the default backoff, and the app's own controls (docs/queues.md): a nack's
 * `reason` (bounded) kept on the message and shown on its dead letter (the app's and the operator's
 * listing), "lease expired" for a lapsed lease, a dead letter that keeps its id (in the list and on a
 * dead-letter queue); the default policy's exponential backoff with jitter, an explicit policy kept
 * exact; purge (waiting, then leased too) and a message's status, over REST and Connect.
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { sql } from "kysely";
import { describe, expect, it } from "vitest";
import { MessageStatus, QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import { restAs, useTestServer, type TestApp } from "../support/harness.ts";
import { lapseQueue } from "../support/server-state.ts";
import { tables } from "../support/tables.ts";

const t = useTestServer();

const rest = restAs(t);

async function put(app: TestApp, queue: string, payload: unknown, extra: Record<string, unknown> = {}) {
  const res = await rest(app, "POST", `/v1/queues/${queue}`, { payload, ...extra });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body as { id: string; expiresAt: number };
}

async function consume(app: TestApp, queue: string, body: Record<string, unknown> = {}) {
  const res = await rest(app, "POST", `/v1/queues/${queue}/consume`, { waitSeconds: 0, ...body });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return (res.body as { message: { id: string; receipt: string; deliveries: number } | null }).message!;
}

interface State {
  id: string;
  queue: string;
  status: string;
  deliveries: number;
  visibleAt: number | null;
  leaseExpiresAt: number | null;
  failureReason: string | null;
  diedAt: number | null;
}

async function state(app: TestApp, queue: string, id: string): Promise<{ status: number; body: State }> {
  const res = await rest(app, "GET", `/v1/queues/${queue}/messages/${id}`);
  return { status: res.status, body: res.body as State };
}

const lapse = (appId: string, queue: string) => lapseQueue(t, appId, queue);

describe("the default retry policy", () => {
  it("backs off exponentially with jitter; an explicit delay stays exact", async () => {
    const app = await t.createApp();
    const policy = await rest(app, "GET", "/v1/queues/jobs/policy");
    expect(policy.body).toMatchObject({
      retryDelaySeconds: 1,
      retryBackoff: 2,
      maxRetryDelaySeconds: 3600,
      retryJitter: 0.5,
    });

    // 20 messages nacked at their first and then second delivery: holds in [0.5, 1] s, then [1, 2] s, not all equal.
    const ids: string[] = [];
    for (let i = 0; i < 20; i++) ids.push((await put(app, "jobs", i)).id);
    for (const round of [1, 2]) {
      const holds: number[] = [];
      for (let i = 0; i < 20; i++) {
        const m = await consume(app, "jobs");
        expect(m.deliveries).toBe(round);
        const before = Date.now();
        expect((await rest(app, "POST", "/v1/queues/_nack", { receipt: m.receipt })).body).toEqual({ nacked: true });
        const s = (await state(app, "jobs", m.id)).body;
        expect(s.status).toBe("delayed");
        holds.push(s.visibleAt! - before);
      }
      const base = 1000 * 2 ** (round - 1);
      // Clock slack: the server's clock is this machine's; the request takes some milliseconds.
      for (const h of holds) {
        expect(h).toBeGreaterThanOrEqual(base / 2 - 250);
        expect(h).toBeLessThanOrEqual(base + 250);
      }
      expect(new Set(holds.map((h) => Math.round(h / 10))).size).toBeGreaterThan(1);
      await lapse(app.id, "jobs");
    }

    // An explicit delay: exactly it, every time (no jitter unless asked for).
    const set = await rest(app, "PUT", "/v1/queues/exact/policy", { retryDelaySeconds: 30, retryBackoff: 1 });
    expect(set.body).toMatchObject({ retryDelaySeconds: 30, retryBackoff: 1, retryJitter: 0 });
    for (let i = 0; i < 5; i++) await put(app, "exact", i);
    for (let i = 0; i < 5; i++) {
      const m = await consume(app, "exact");
      const before = Date.now();
      await rest(app, "POST", "/v1/queues/_nack", { receipt: m.receipt });
      const after = Date.now();
      const s = (await state(app, "exact", m.id)).body;
      expect(s.visibleAt!).toBeGreaterThanOrEqual(before + 30_000 - 250);
      expect(s.visibleAt!).toBeLessThanOrEqual(after + 30_000 + 250);
    }
    // Jitter asked for, and bad values.
    expect((await rest(app, "PUT", "/v1/queues/exact/policy", { retryJitter: 1 })).body).toMatchObject({
      retryDelaySeconds: 30,
      retryJitter: 1,
    });
    const bad = await rest(app, "PUT", "/v1/queues/exact/policy", { retryJitter: 1.5 });
    expect(bad.status).toBe(400);
    expect(bad.body.error.message).toContain("retryJitter");
    const c = t.client(QueueService, app.token);
    const viaConnect = await c.getQueuePolicy({ queue: "jobs" });
    expect(viaConnect.policy?.retryJitter).toBe(0.5);
    await expect(c.updateQueuePolicy({ queue: "exact", retryJitter: -0.1 })).rejects.toMatchObject({
      code: Code.InvalidArgument,
    });
  });
});

describe("failure reasons", () => {
  it("a nack's reason is kept on the message and its dead letter, with its id (REST)", async () => {
    const app = await t.createApp();
    await rest(app, "PUT", "/v1/queues/mail/policy", { maxDeliveries: 2 });
    const { id } = await put(app, "mail", { to: "ada@example.com" });

    const first = await consume(app, "mail");
    const reason = "smtp: 421 try again later";
    expect(
      (await rest(app, "POST", "/v1/queues/_nack", { receipt: first.receipt, delaySeconds: 0, reason })).body,
    ).toEqual({ nacked: true });
    expect((await state(app, "mail", id)).body).toMatchObject({ status: "waiting", failureReason: reason });

    // The last delivery lapses: the dead letter says so, under the message's own id.
    await consume(app, "mail");
    await lapse(app.id, "mail");
    expect(await consume(app, "mail", { waitSeconds: 0 }).catch(() => null)).toBeNull();
    const dead = await rest(app, "GET", "/v1/queues/mail/dead-letters");
    expect(dead.body.deadLetters).toEqual([
      expect.objectContaining({ id, deliveries: 2, failureReason: "lease expired" }),
    ]);
    expect((await state(app, "mail", id)).body).toMatchObject({ id, status: "dead", failureReason: "lease expired" });
    const operator = await t.admin.listDeadLetters({ appId: app.id, queue: "mail" });
    expect(operator.deadLetters.map((d) => [d.id, d.failureReason])).toEqual([[id, "lease expired"]]);
  });

  it("a nacked last delivery dies with the nack's reason (Connect); a dead-letter queue keeps the id", async () => {
    const app = await t.createApp();
    const c = t.client(QueueService, app.token);
    await c.updateQueuePolicy({ queue: "in", maxDeliveries: 1 });
    await c.updateQueuePolicy({ queue: "moved", maxDeliveries: 1, deadLetterQueue: "moved-dead" });
    const kept = await c.putMessage({ queue: "in", payload: { kind: { case: "numberValue", value: 1 } } });
    const moved = await c.putMessage({ queue: "moved", payload: { kind: { case: "numberValue", value: 2 } } });

    const a = (await c.consumeMessage({ queue: "in", waitSeconds: 0 })).message!;
    expect((await c.nackMessage({ receipt: a.receipt, reason: "handler: TypeError: x is undefined" })).nacked).toBe(
      true,
    );
    const b = (await c.consumeMessage({ queue: "moved", waitSeconds: 0 })).message!;
    await c.nackMessage({ receipt: b.receipt, reason: "upstream 502" });
    // Dead at the next claim (or the sweep): a claim of each queue runs it now.
    expect((await c.consumeMessage({ queue: "in", waitSeconds: 0 })).message).toBeUndefined();
    expect((await c.consumeMessage({ queue: "moved", waitSeconds: 0 })).message).toBeUndefined();

    const dead = await c.listQueueDeadLetters({ queue: "in" });
    expect(dead.deadLetters.map((d) => [d.id, d.failureReason])).toEqual([
      [kept.id, "handler: TypeError: x is undefined"],
    ]);
    const there = await c.getMessage({ queue: "moved-dead", id: moved.id });
    expect(there).toMatchObject({ id: moved.id, status: MessageStatus.WAITING, failureReason: "upstream 502" });
    // Its earlier receipt acks nothing of its new life, even at the same lease count.
    const again = (await c.consumeMessage({ queue: "moved-dead", waitSeconds: 0 })).message!;
    expect(again.id).toBe(moved.id);
    expect((await c.ackMessage({ receipt: b.receipt })).acked).toBe(false);
    expect((await c.ackMessage({ receipt: again.receipt })).acked).toBe(true);
  });

  it("refuses a reason over 1,000 characters (400, InvalidArgument); 1,000 of any plane are fine", async () => {
    const app = await t.createApp();
    await put(app, "r", 1);
    const m = await consume(app, "r");
    const long = await rest(app, "POST", "/v1/queues/_nack", { receipt: m.receipt, reason: "x".repeat(1001) });
    expect(long.status).toBe(400);
    expect(long.body.error).toMatchObject({ code: "invalid_argument" });
    expect(long.body.error.message).toContain("reason");
    const notString = await rest(app, "POST", "/v1/queues/_nack", { receipt: m.receipt, reason: 5 });
    expect(notString.status).toBe(400);
    const c = t.client(QueueService, app.token);
    const err = await c.nackMessage({ receipt: m.receipt, reason: "y".repeat(1001) }).catch((e: unknown) => e);
    expect(ConnectError.from(err).code).toBe(Code.InvalidArgument);
    // 1,000 characters outside the BMP (2,000 UTF-16 units) are 1,000 characters.
    const emoji = "\u{1F600}".repeat(1000);
    expect((await rest(app, "POST", "/v1/queues/_nack", { receipt: m.receipt, reason: emoji })).body).toEqual({
      nacked: true,
    });
    expect((await state(app, "r", m.id)).body.failureReason).toBe(emoji);
  });
});

describe("the app's own controls", () => {
  it("a message's status: waiting, delayed, leased, dead, then 404 (REST and Connect)", async () => {
    const app = await t.createApp();
    await rest(app, "PUT", "/v1/queues/st/policy", { maxDeliveries: 1 });
    const waiting = await put(app, "st", 1);
    const delayed = await put(app, "st", 2, { delaySeconds: 600 });
    expect((await state(app, "st", waiting.id)).body).toMatchObject({
      status: "waiting",
      deliveries: 0,
      visibleAt: null,
      leaseExpiresAt: null,
      failureReason: null,
    });
    const d = (await state(app, "st", delayed.id)).body;
    expect(d.status).toBe("delayed");
    expect(d.visibleAt).toBeGreaterThan(Date.now() + 500_000);

    const m = await consume(app, "st", { leaseSeconds: 120 });
    expect(m.id).toBe(waiting.id);
    const leased = (await state(app, "st", m.id)).body;
    expect(leased).toMatchObject({ status: "leased", deliveries: 1, visibleAt: null });
    expect(leased.leaseExpiresAt).toBeGreaterThan(Date.now() + 60_000);

    const c = t.client(QueueService, app.token);
    expect(await c.getMessage({ queue: "st", id: m.id })).toMatchObject({
      status: MessageStatus.LEASED,
      deliveries: 1,
    });

    await rest(app, "POST", "/v1/queues/_nack", { receipt: m.receipt, reason: "gave up" });
    await consume(app, "st"); // buries it
    expect((await state(app, "st", m.id)).body).toMatchObject({ status: "dead", failureReason: "gave up" });
    expect((await state(app, "st", m.id)).body.diedAt).toBeGreaterThan(0);
    expect((await c.getMessage({ queue: "st", id: m.id })).status).toBe(MessageStatus.DEAD);

    // Acked, expired, unknown, another queue's, another app's: 404 / NotFound. Not an id: 400.
    await lapse(app.id, "st");
    const other = await put(app, "st2", 3);
    const took = await consume(app, "st2");
    await rest(app, "POST", "/v1/queues/_ack", { receipt: took.receipt });
    expect((await state(app, "st2", other.id)).status).toBe(404);
    const expiring = await put(app, "st2", 4);
    await sql`UPDATE queue_messages SET expires_at = now() - interval '1 second' WHERE id = ${expiring.id}`.execute(
      tables(t.server.deps.db),
    );
    expect((await state(app, "st2", expiring.id)).status).toBe(404);
    expect((await state(app, "st2", delayed.id)).status).toBe(404);
    const stranger = await t.createApp();
    expect((await state(stranger, "st", delayed.id)).status).toBe(404);
    const notFound = await c.getMessage({ queue: "st2", id: other.id }).catch((e: unknown) => e);
    expect(ConnectError.from(notFound).code).toBe(Code.NotFound);
    const bad = await state(app, "st", "not-a-uuid");
    expect(bad.status).toBe(400);
    expect((bad.body as unknown as { error: { message: string } }).error.message).toContain("id");
  });

  it("purge deletes the waiting (and delayed) messages, the leased ones only with the flag (REST and Connect)", async () => {
    const app = await t.createApp();
    for (let i = 0; i < 5; i++) await put(app, "pq", i);
    await put(app, "pq", "later", { delaySeconds: 600 });
    const held = await consume(app, "pq", { leaseSeconds: 300 });

    const first = await rest(app, "POST", "/v1/queues/pq/purge");
    expect(first.status).toBe(200);
    expect(first.body).toEqual({ purged: 5 });
    // Safe to repeat: nothing more to delete.
    expect((await rest(app, "POST", "/v1/queues/pq/purge", {})).body).toEqual({ purged: 0 });
    expect((await state(app, "pq", held.id)).body.status).toBe("leased");

    const c = t.client(QueueService, app.token);
    expect((await c.purgeQueue({ queue: "pq", includeLeased: true })).purged).toBe(1);
    expect((await state(app, "pq", held.id)).status).toBe(404);
    expect((await rest(app, "POST", "/v1/queues/_ack", { receipt: held.receipt })).body).toEqual({ acked: false });
    const listed = (await rest(app, "GET", "/v1/queues")).body.queues as { name: string }[];
    expect(listed.map((q) => q.name)).not.toContain("pq");

    const bad = await rest(app, "POST", "/v1/queues/pq/purge", { includeLeased: "yes" });
    expect(bad.status).toBe(400);
    expect(bad.body.error.message).toContain("includeLeased");
  });
});
