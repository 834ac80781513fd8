/**
 * Dead letters: a message that had its app's `maxDeliveries` deliveries and
 * whose last lease lapsed is never leased again; it moves to its queue's
 * dead-letter list, which the operator lists, replays and purges through
 * AdminService. Consumers race over REST, Connect unary and streams; replay
 * and purge run while consumers take messages.
 */
import { Code, ConnectError, type Client } from "@connectrpc/connect";
import { sql } from "kysely";
import { describe, expect, it, vi } from "vitest";
import { QueueService, type Message } from "../../gen/platform/queues/v1/queues_pb.js";
import { useTestServer, type TestApp } from "../support/harness.ts";
import { tables } from "../support/tables.ts";

const t = useTestServer();

const err = (p: Promise<unknown>) =>
  p.then(
    () => undefined,
    (e: unknown) => ConnectError.from(e),
  );
const num = (v: number) => ({ kind: { case: "numberValue" as const, value: v } });
const payloads = (n: number, from = 0) => Array.from({ length: n }, (_, i) => ({ payload: num(from + i) }));

async function appWith(maxDeliveries: number): Promise<TestApp & { c: Client<typeof QueueService> }> {
  const app = await t.createApp();
  await t.admin.updateApp({ appId: app.id, limits: { maxDeliveries } });
  return { ...app, c: t.client(QueueService, app.token) };
}

async function waitingConsumers(): Promise<number> {
  const m = t.server.deps.metrics.registry.getSingleMetric("queue_waiting_consumers");
  return m ? (await m.get()).values.reduce((sum, v) => sum + v.value, 0) : 0;
}

/** Time passing, without sleeping: every lease of the app's queue lapses now. */
async function lapse(appId: string, queue: string) {
  await sql`UPDATE queue_messages SET visible_at = now() - interval '1 millisecond'
            WHERE app_id = ${appId} AND queue = ${queue} AND deliveries > 0`.execute(tables(t.server.deps.db));
}

async function restQueue(app: TestApp, queue: string) {
  const res = await t.request("GET", "/v1/queues", { token: app.token });
  expect(res.status).toBe(200);
  return (res.body.queues as { name: string; depth: number; inFlight: number; deadLetters: number }[]).find(
    (q) => q.name === queue,
  );
}

async function allDeadLetters(appId: string, queue: string, pageSize = 100) {
  const out = [];
  let pageToken = "";
  do {
    const page = await t.admin.listDeadLetters({ appId, queue, pageSize, pageToken });
    out.push(...page.deadLetters);
    pageToken = page.nextPageToken;
  } while (pageToken);
  return out;
}

/** `n` dead letters on `queue` of an app whose maxDeliveries is 1: put, leased once, lapsed, buried by the next claim. */
async function makeDead(app: TestApp & { c: Client<typeof QueueService> }, queue: string, n: number, from = 0) {
  const put = await app.c.putMessages({ queue, messages: payloads(n, from) });
  for (let i = 0; i < n; i++) expect((await app.c.consumeMessage({ queue, waitSeconds: 0 })).message).toBeDefined();
  await lapse(app.id, queue);
  expect((await app.c.consumeMessage({ queue, waitSeconds: 0 })).message).toBeUndefined();
  return put.messages.map((m) => m.id);
}

describe("the rule", () => {
  it("by default (maxDeliveries 0) a message comes back as often as its lease lapses; nothing is dead", async () => {
    const app = await appWith(0);
    await app.c.putMessage({ queue: "q", payload: num(1) });
    for (let i = 1; i <= 5; i++) {
      const { message } = await app.c.consumeMessage({ queue: "q", waitSeconds: 0 });
      expect(message?.deliveries).toBe(i);
      await lapse(app.id, "q");
    }
    expect(await restQueue(app, "q")).toMatchObject({ depth: 1, inFlight: 0, deadLetters: 0 });
    expect(await allDeadLetters(app.id, "q")).toEqual([]);
  });

  it("a message is delivered maxDeliveries times, then dead (REST, Connect, the listing, the admin view)", async () => {
    const app = await appWith(2);
    const { id } = await app.c.putMessage({ queue: "work", payload: num(7) });
    const first = await t.request("POST", "/v1/queues/work/consume", { token: app.token, body: { waitSeconds: 0 } });
    expect(first.body.message.deliveries).toBe(1);
    await lapse(app.id, "work");
    const second = await app.c.consumeMessage({ queue: "work", waitSeconds: 0 });
    expect(second.message?.deliveries).toBe(2);
    // Still leased: neither waiting nor dead.
    expect(await restQueue(app, "work")).toMatchObject({ depth: 0, inFlight: 1, deadLetters: 0 });
    await lapse(app.id, "work");
    // The lease lapsed after the last delivery: the next consume buries it instead of leasing it.
    expect(
      (await t.request("POST", "/v1/queues/work/consume", { token: app.token, body: { waitSeconds: 0 } })).body,
    ).toEqual({ message: null });
    expect(
      (await t.request("POST", "/v1/queues/_ack", { token: app.token, body: { receipt: second.message!.receipt } }))
        .body,
    ).toEqual({ acked: false });
    // A queue that holds only dead letters is listed, with depth 0 (dead letters do not count toward maxDepth).
    expect(await restQueue(app, "work")).toEqual({
      name: "work",
      depth: 0,
      inFlight: 0,
      maxDepth: 10000,
      oldestAt: null,
      deadLetters: 1,
    });
    const admin = await t.admin.listQueues({ appId: app.id });
    expect(admin.queues.map((q) => [q.name, Number(q.depth), Number(q.deadLetters)])).toEqual([["work", 0, 1]]);
    const [dead] = await allDeadLetters(app.id, "work");
    expect(dead).toMatchObject({ id, payload: "7", truncated: false, deliveries: 2 });
    expect(Number(dead.sizeBytes)).toBe(1);
    expect(dead.diedAt).toBeDefined();
    // The default lifetime of a dead letter: the app's messageTtlSeconds from its death.
    const keptMs = Number(dead.expiresAt!.seconds - dead.diedAt!.seconds) * 1000;
    expect(keptMs).toBe(4 * 24 * 3600 * 1000);
  });

  it("the app's listing answers a letter longer than the app's payload limit now, whole (the limit lowered since)", async () => {
    const app = await appWith(1);
    const big = "x".repeat(5000);
    await app.c.putMessage({ queue: "big", payload: { kind: { case: "stringValue", value: big } } });
    await app.c.consumeMessage({ queue: "big", waitSeconds: 0 });
    await lapse(app.id, "big");
    expect((await app.c.consumeMessage({ queue: "big", waitSeconds: 0 })).message).toBeUndefined();
    await t.admin.updateApp({ appId: app.id, limits: { maxPayloadBytes: 1024 } });
    const rest = await t.request("GET", "/v1/queues/big/dead-letters", { token: app.token });
    expect(rest.status, JSON.stringify(rest.body)).toBe(200);
    expect(rest.body.deadLetters.map((d: { payload: unknown }) => d.payload)).toEqual([big]);
    const { deadLetters } = await app.c.listQueueDeadLetters({ queue: "big" });
    expect(deadLetters.map((d) => d.payload?.kind.value)).toEqual([big]);
  });

  it("an ack within the last lease deletes the message as before", async () => {
    const app = await appWith(1);
    await app.c.putMessage({ queue: "q", payload: num(1) });
    const { message } = await app.c.consumeMessage({ queue: "q", waitSeconds: 0 });
    expect((await app.c.ackMessage({ receipt: message!.receipt })).acked).toBe(true);
    await lapse(app.id, "q");
    expect((await app.c.consumeMessage({ queue: "q", waitSeconds: 0 })).message).toBeUndefined();
    expect(await restQueue(app, "q")).toBeUndefined();
  });

  it("a replayed message's delivery has a receipt no earlier lease had: an old receipt neither acks, nacks nor extends it", async () => {
    const app = await appWith(1);
    await app.c.putMessage({ queue: "r", payload: num(1) });
    const before = (await app.c.consumeMessage({ queue: "r", waitSeconds: 0 })).message!;
    await lapse(app.id, "r");
    expect((await app.c.consumeMessage({ queue: "r", waitSeconds: 0 })).message).toBeUndefined();
    expect((await app.c.replayQueueDeadLetters({ queue: "r" })).replayed).toBe(1);
    const after = (await app.c.consumeMessage({ queue: "r", waitSeconds: 0 })).message!;
    // Counted from 0 again toward maxDeliveries, but the lease is a new one.
    expect(after).toMatchObject({ id: before.id, deliveries: 1 });
    expect(after.receipt).not.toBe(before.receipt);
    // The consumer whose lease lapsed before the death cannot touch the lease now held.
    expect((await app.c.extendLease({ receipt: before.receipt, leaseSeconds: 60 })).extended).toBe(false);
    expect((await app.c.nackMessage({ receipt: before.receipt })).nacked).toBe(false);
    expect((await app.c.ackMessage({ receipt: before.receipt })).acked).toBe(false);
    expect(await restQueue(app, "r")).toMatchObject({ depth: 0, inFlight: 1 });
    expect((await app.c.ackMessage({ receipt: after.receipt })).acked).toBe(true);
    expect(await restQueue(app, "r")).toBeUndefined();
  });

  it("the platform's _events queue obeys it too", async () => {
    const app = await appWith(1);
    await t.admin.publishEvent({ appId: app.id, kind: "deploy.done", data: num(1) });
    const { message } = await app.c.consumeMessage({ queue: "_events", waitSeconds: 0 });
    expect(message?.deliveries).toBe(1);
    await lapse(app.id, "_events");
    expect((await app.c.consumeMessage({ queue: "_events", waitSeconds: 0 })).message).toBeUndefined();
    const [dead] = await allDeadLetters(app.id, "_events");
    expect(JSON.parse(dead.payload)).toMatchObject({ kind: "deploy.done", data: 1 });
  });

  it("a released stream lease does not count: a stream cancelled between claim and send leaves the message its deliveries", async () => {
    const app = await appWith(1);
    await app.c.putMessage({ queue: "s", payload: num(1) });
    const stop = new AbortController();
    for await (const res of app.c.streamMessages(
      { queue: "s", window: 1, leaseSeconds: 120 },
      { signal: stop.signal },
    )) {
      expect(res.messages[0].deliveries).toBe(1);
      break;
    }
    stop.abort();
    await lapse(app.id, "s");
    expect((await app.c.consumeMessage({ queue: "s", waitSeconds: 0 })).message).toBeUndefined();
    expect((await allDeadLetters(app.id, "s")).map((d) => d.deliveries)).toEqual([1]);
  });
});

describe("under concurrency", () => {
  it("consumers racing (REST, Connect, streams): each message delivered exactly maxDeliveries times, then dead; none lost; replay while consuming", async () => {
    const max = 3;
    const app = await appWith(max);
    const queue = "race";
    const total = 120;
    /** Every delivery seen, by message id: the delivery numbers in the order they arrived. */
    const seen = new Map<string, number[]>();
    const acked = new Set<string>();
    const valueOf = new Map<string, number>();
    type Mode = { leaseSeconds: number; ack: (m: Message) => boolean; phase: number };
    const replaySeen = new Map<string, number[]>();
    /** Claims answered to the REST and unary consumers so far (each a chance to deliver what should not be). */
    let claims = 0;

    function consumers(mode: Mode, stop: AbortSignal) {
      const record = (m: Message) => {
        const log = mode.phase === 1 ? seen : replaySeen;
        log.set(m.id, [...(log.get(m.id) ?? []), m.deliveries]);
        valueOf.set(m.id, m.payload!.kind.value as number);
      };
      const settle = async (messages: Message[]) => {
        const mine = messages.filter(mode.ack);
        if (mine.length === 0) return;
        const answers = (await app.c.ackMessages({ receipts: mine.map((m) => m.receipt) })).acked;
        answers.forEach((ok, i) => ok && acked.add(`${mode.phase}|${mine[i].id}`));
      };
      const rest = Array.from({ length: 4 }, async () => {
        while (!stop.aborted) {
          const res = await t.request("POST", `/v1/queues/${queue}/consume`, {
            token: app.token,
            body: { waitSeconds: 1, leaseSeconds: mode.leaseSeconds },
          });
          claims++;
          const m = res.body.message as { id: string; deliveries: number; receipt: string; payload: number } | null;
          if (!m) continue;
          const msg = {
            id: m.id,
            deliveries: m.deliveries,
            receipt: m.receipt,
            payload: num(m.payload),
          } as unknown as Message;
          record(msg);
          await settle([msg]);
        }
      });
      const unary = Array.from({ length: 4 }, async () => {
        while (!stop.aborted) {
          const { message } = await app.c.consumeMessage({ queue, waitSeconds: 1, leaseSeconds: mode.leaseSeconds });
          claims++;
          if (!message) continue;
          record(message);
          await settle([message]);
        }
      });
      const streams = Array.from({ length: 2 }, async () => {
        try {
          for await (const res of app.c.streamMessages(
            { queue, window: 16, leaseSeconds: mode.leaseSeconds },
            { signal: stop },
          )) {
            res.messages.forEach(record);
            await settle(res.messages);
          }
        } catch (e) {
          if (ConnectError.from(e).code !== Code.Canceled) throw e;
        }
      });
      return Promise.all([...rest, ...unary, ...streams]);
    }

    // Phase 1: nobody acks, except multiples of 4 from their second delivery on. Leases of 1 s lapse for real,
    // so on a slow machine an ack may come too late (acked: false) and that message dies too: which messages
    // end acked and which dead is read from the answers, and each must be one or the other.
    const stop1 = new AbortController();
    const acked1 = () => [...acked].filter((k) => k.startsWith("1|")).length;
    const running1 = consumers(
      { leaseSeconds: 1, ack: (m) => (m.payload!.kind.value as number) % 4 === 0 && m.deliveries >= 2, phase: 1 },
      stop1.signal,
    );
    try {
      await Promise.all(
        Array.from({ length: 4 }, (_, p) => app.c.putMessages({ queue, messages: payloads(total / 4, p * 1000) })),
      );
      await vi.waitFor(
        async () => {
          const entry = await restQueue(app, queue);
          expect(entry).toMatchObject({ depth: 0, inFlight: 0 });
          expect(entry!.deadLetters + acked1()).toBe(total);
        },
        { timeout: 45_000, interval: 200 },
      );
      // Consumers keep racing a little longer, two more claims each: nothing more may be delivered.
      const mark = claims;
      await vi.waitFor(() => expect(claims).toBeGreaterThanOrEqual(mark + 16), { timeout: 20_000, interval: 50 });
    } finally {
      stop1.abort();
      await running1;
    }

    expect(seen.size).toBe(total);
    const dead = await allDeadLetters(app.id, queue, 37);
    const expectedDead = total - acked1();
    expect(dead).toHaveLength(expectedDead);
    const notAckable = [...valueOf.values()].filter((v) => v % 4 !== 0).length;
    expect(expectedDead).toBeGreaterThanOrEqual(notAckable);
    expect(acked1()).toBeGreaterThan(0);
    const deadIds = new Set(dead.map((d) => d.id));
    expect(deadIds.size).toBe(expectedDead);
    for (const [id, deliveries] of seen) {
      const value = valueOf.get(id)!;
      if (acked.has(`1|${id}`)) {
        // Acked at its last delivery seen (2 or 3), never delivered after that, never dead.
        expect(value % 4).toBe(0);
        expect([value, deliveries]).toEqual([value, deliveries.length === 2 ? [1, 2] : [1, 2, 3]]);
        expect(deadIds.has(id)).toBe(false);
      } else {
        // Every delivery from 1 to maxDeliveries exactly once, then dead.
        expect([value, deliveries]).toEqual([value, [1, 2, 3]]);
        expect(deadIds.has(id)).toBe(true);
      }
    }
    expect(dead.every((d) => d.deliveries === max)).toBe(true);

    // Phase 2: consumers that ack everything run while the operator replays all: each comes back once, deliveries reset.
    const stop2 = new AbortController();
    const running2 = consumers({ leaseSeconds: 60, ack: () => true, phase: 2 }, stop2.signal);
    try {
      const replayed = await t.admin.replayDeadLetters({ appId: app.id, queue, all: true });
      expect(Number(replayed.replayed)).toBe(expectedDead);
      await vi.waitFor(() => expect(replaySeen.size).toBe(expectedDead), { timeout: 20_000, interval: 100 });
      await vi.waitFor(async () => expect(await restQueue(app, queue)).toBeUndefined(), {
        timeout: 10_000,
        interval: 100,
      });
    } finally {
      stop2.abort();
      await running2;
    }
    for (const [id, deliveries] of replaySeen) {
      expect(deadIds.has(id)).toBe(true);
      expect(deliveries).toEqual([1]);
      expect(acked.has(`2|${id}`)).toBe(true);
    }
  }, 60_000);

  it("concurrent replay and purge of the same dead letters: each goes one way, none both, none lost", async () => {
    const app = await appWith(1);
    const ids = await makeDead(app, "rp", 60);
    const calls = await Promise.all([
      t.admin.replayDeadLetters({ appId: app.id, queue: "rp", ids: ids.slice(0, 40) }),
      t.admin.purgeDeadLetters({ appId: app.id, queue: "rp", ids: ids.slice(20) }),
      t.admin.replayDeadLetters({ appId: app.id, queue: "rp", all: true }),
    ]);
    const replayed = Number(calls[0].replayed) + Number(calls[2].replayed);
    const purged = Number(calls[1].purged);
    expect(replayed + purged).toBe(60);
    const q = await restQueue(app, "rp");
    expect(q).toMatchObject({ depth: replayed, inFlight: 0, deadLetters: 0 });
    const back = new Set<string>();
    for (;;) {
      const { message } = await app.c.consumeMessage({ queue: "rp", waitSeconds: 0 });
      if (!message) break;
      expect(message.deliveries).toBe(1);
      back.add(message.id);
    }
    expect(back.size).toBe(replayed);
  });

  it("replay wakes a consume waiting on the queue", async () => {
    const app = await appWith(1);
    const [id] = await makeDead(app, "wake", 1);
    const waiting = app.c.consumeMessage({ queue: "wake", waitSeconds: 20 });
    // Waiting: its first claim found nothing.
    await vi.waitFor(async () => expect(await waitingConsumers()).toBeGreaterThanOrEqual(1), { interval: 10 });
    const started = Date.now();
    await t.admin.replayDeadLetters({ appId: app.id, queue: "wake", ids: [id] });
    const { message } = await waiting;
    expect(message?.id).toBe(id);
    expect(message?.deliveries).toBe(1);
    // Woken by the replay itself, not by the 5 s re-check.
    expect(Date.now() - started).toBeLessThan(2000);
  });
});

describe("the operator's calls", () => {
  it("ListDeadLetters pages in the order they died; purge by ids, then all", async () => {
    const app = await appWith(1);
    const ids = await makeDead(app, "pages", 25);
    const pages: string[][] = [];
    let pageToken = "";
    do {
      const page = await t.admin.listDeadLetters({ appId: app.id, queue: "pages", pageSize: 10, pageToken });
      pages.push(page.deadLetters.map((d) => d.id));
      pageToken = page.nextPageToken;
    } while (pageToken);
    expect(pages.map((p) => p.length)).toEqual([10, 10, 5]);
    expect(new Set(pages.flat())).toEqual(new Set(ids));
    expect(
      Number((await t.admin.purgeDeadLetters({ appId: app.id, queue: "pages", ids: ids.slice(0, 5) })).purged),
    ).toBe(5);
    expect(
      Number((await t.admin.purgeDeadLetters({ appId: app.id, queue: "pages", ids: ids.slice(0, 5) })).purged),
    ).toBe(0);
    expect((await restQueue(app, "pages"))?.deadLetters).toBe(20);
    expect(Number((await t.admin.purgeDeadLetters({ appId: app.id, queue: "pages", all: true })).purged)).toBe(20);
    expect(await restQueue(app, "pages")).toBeUndefined();
  });

  it("tenant isolation: one app's call never sees, replays or purges another's dead letters", async () => {
    const a = await appWith(1);
    const b = await appWith(1);
    const bIds = await makeDead(b, "shared", 3);
    await makeDead(a, "shared", 1);
    expect(Number((await t.admin.replayDeadLetters({ appId: a.id, queue: "shared", ids: bIds })).replayed)).toBe(0);
    expect(Number((await t.admin.purgeDeadLetters({ appId: a.id, queue: "shared", ids: bIds })).purged)).toBe(0);
    expect((await allDeadLetters(a.id, "shared")).some((d) => bIds.includes(d.id))).toBe(false);
    expect((await restQueue(a, "shared"))?.deadLetters).toBe(1);
    expect((await restQueue(b, "shared"))?.deadLetters).toBe(3);
    // Another queue of the same app does not match either.
    expect(Number((await t.admin.replayDeadLetters({ appId: b.id, queue: "other", ids: bIds })).replayed)).toBe(0);
    expect((await restQueue(b, "shared"))?.deadLetters).toBe(3);
    // A service token is refused on AdminService.
    const asApp = await err(
      t
        .client((await import("../../gen/platform/admin/v1/admin_pb.js")).AdminService, a.token)
        .listDeadLetters({ appId: b.id, queue: "shared" }),
    );
    expect(asApp?.code).toBe(Code.Unauthenticated);
  });

  it("expired dead letters and those of deleted apps are removed by housekeeping", async () => {
    const app = await appWith(1);
    const [id] = await makeDead(app, "old", 2);
    const db = tables(t.server.deps.db);
    await db
      .updateTable("queue_dead_letters")
      .set({ expires_at: sql`now() - interval '1 second'` as never })
      .where("id", "=", id)
      .execute();
    expect((await t.server.housekeeping.runAll())["queue dead-letter expiry"]).toBeGreaterThanOrEqual(1);
    expect((await allDeadLetters(app.id, "old")).map((d) => d.id)).not.toContain(id);
    await t.admin.deleteApp({ appId: app.id });
    await t.server.housekeeping.runAll();
    const left = await db.selectFrom("queue_dead_letters").select("id").where("app_id", "=", app.id).execute();
    expect(left).toEqual([]);
  });

  it("bad input is refused naming the field", async () => {
    const app = await appWith(0);
    for (const bad of [-1, 1001]) {
      const e = await err(t.admin.updateApp({ appId: app.id, limits: { maxDeliveries: bad } }));
      expect(e?.code).toBe(Code.InvalidArgument);
      expect(e?.rawMessage).toBe("limits.maxDeliveries: must be an integer from 0 to 1000");
    }
    // Over plain HTTP (Connect JSON): 400 with the error body.
    const res = await fetch(`${t.url}/platform.admin.v1.AdminService/UpdateApp`, {
      method: "POST",
      headers: { authorization: `Bearer ${t.adminToken}`, "content-type": "application/json" },
      body: JSON.stringify({ appId: app.id, limits: { maxDeliveries: -3 } }),
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({
      code: "invalid_argument",
      message: "limits.maxDeliveries: must be an integer from 0 to 1000",
    });
    expect((await t.admin.getApp({ appId: app.id })).app!.limits!.maxDeliveries).toBe(0);
    expect((await t.admin.updateApp({ appId: app.id, limits: { maxDeliveries: 5 } })).app!.limits!.maxDeliveries).toBe(
      5,
    );

    const cases: [() => Promise<unknown>, string][] = [
      [() => t.admin.listDeadLetters({ appId: app.id, queue: "Bad!" }), "queue: "],
      [() => t.admin.listDeadLetters({ appId: app.id, queue: "q", pageSize: 0 }), "page_size: must be from 1 to 100"],
      [
        () => t.admin.listDeadLetters({ appId: app.id, queue: "q", pageToken: "nope" }),
        "page_token: is not a page token of ListDeadLetters",
      ],
      [
        () => t.admin.replayDeadLetters({ appId: app.id, queue: "q" }),
        "ids: must name 1 to 1000 dead letters, or set all",
      ],
      [
        () => t.admin.replayDeadLetters({ appId: app.id, queue: "q", all: true, ids: [crypto.randomUUID()] }),
        "ids: must be empty when all is true",
      ],
      [
        () => t.admin.purgeDeadLetters({ appId: app.id, queue: "q", ids: [crypto.randomUUID(), "x"] }),
        "ids[1]: must be a dead letter id (a UUID)",
      ],
      [
        () =>
          t.admin.purgeDeadLetters({
            appId: app.id,
            queue: "q",
            ids: Array.from({ length: 1001 }, () => crypto.randomUUID()),
          }),
        "ids: must name at most 1000",
      ],
    ];
    for (const [call, message] of cases) {
      const e = await err(call());
      expect(e?.code).toBe(Code.InvalidArgument);
      expect(e?.rawMessage).toContain(message);
    }
    expect((await err(t.admin.listDeadLetters({ appId: crypto.randomUUID(), queue: "q" })))?.code).toBe(Code.NotFound);
  });
});

describe("dead letters on time, whether or not anyone consumes", () => {
  /** The dead letters of the queue as the app sees them (the listing's count). */
  const deadCount = async (app: TestApp, queue: string) => (await restQueue(app, queue))?.deadLetters ?? 0;

  it("a message whose last lease lapsed moves to its dead letters within the sweep period, with no consumer", async () => {
    const app = await appWith(1);
    const { id } = await app.c.putMessage({ queue: "idle", payload: num(1) });
    const leased = await app.c.consumeMessage({ queue: "idle", waitSeconds: 0, leaseSeconds: 1 });
    expect(leased.message?.deliveries).toBe(1);
    // Nobody consumes again; the sweep (every 5 s) moves it once its lease lapsed.
    await vi.waitFor(async () => expect(await deadCount(app, "idle")).toBe(1), { timeout: 9_000, interval: 100 });
    expect(await restQueue(app, "idle")).toMatchObject({ depth: 0, inFlight: 0, deadLetters: 1 });
    expect((await allDeadLetters(app.id, "idle")).map((d) => d.id)).toEqual([id]);
  });

  it("a message nacked on its last delivery moves to the policy's dead-letter queue within the sweep period", async () => {
    const app = await t.createApp();
    const c = t.client(QueueService, app.token);
    await c.updateQueuePolicy({
      queue: "retry",
      maxDeliveries: 1,
      deadLetterQueue: "retry-failed",
      retryDelaySeconds: 60,
    });
    await c.putMessage({ queue: "retry", payload: num(1) });
    const { message } = await c.consumeMessage({ queue: "retry", waitSeconds: 0 });
    expect((await c.nackMessage({ receipt: message!.receipt })).nacked).toBe(true);
    await vi.waitFor(async () => expect((await restQueue(app, "retry-failed"))?.depth).toBe(1), {
      timeout: 9_000,
      interval: 100,
    });
    expect((await restQueue(app, "retry"))?.depth ?? 0).toBe(0);
  });
});
