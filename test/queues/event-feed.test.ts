/**
 * The platform-event feed (`GET /v1/queues/_events/feed`, `ReadEventFeed`):
 * every reader, standing for one replica of an app, sees every platform event
 * after its own cursor, promptly (a waiting read wakes at the event, on any
 * instance), without consuming it; `_events` stays a queue.
 */
import { fromJson, type JsonValue } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { sql } from "kysely";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import {
  backend,
  createTestDatabase,
  startInstances,
  startServer,
  useTestServer,
  type Instances,
  type TestApp,
  type TestDatabase,
  type TestServer,
  describeOnPostgres,
} from "../support/harness.ts";
import { createQueueStore } from "../../src/queues/queue-store.ts";
import { transactionAsDb } from "../../src/core/database/index.ts";
import { refuseInserts } from "../support/refuse-writes.ts";
import { tables } from "../support/tables.ts";

const t = useTestServer();
const json = (v: JsonValue) => fromJson(ValueSchema, v);

interface FeedAnswer {
  events: { cursor: string; kind: string; at: number; data: unknown }[];
  cursor: string;
}

async function feed(s: TestServer, app: TestApp, query = ""): Promise<FeedAnswer> {
  const res = await s.request("GET", `/v1/queues/_events/feed${query}`, { token: app.token });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body as FeedAnswer;
}

async function waitingReaders(s: TestServer): Promise<number> {
  const m = s.server.deps.metrics.registry.getSingleMetric("queue_feed_waiting_readers");
  return m ? (await m.get()).values.reduce((sum, v) => sum + v.value, 0) : 0;
}

async function declared(s: TestServer, app: TestApp, name = "API_KEY") {
  await s.admin.declareSecrets({ appId: app.id, names: [name] });
}

it("server shutdown ends waiting reads at once, each with an empty answer at its cursor", async () => {
  const server = await startServer();
  const own = await server.createApp();
  const { cursor } = await feed(server, own);
  // Many at once: the shutdown reaches each of them through one listener of the instance's shutdown signal.
  const reading = Array.from({ length: 10 }, () =>
    server.request("GET", `/v1/queues/_events/feed?after=${cursor}&waitSeconds=20`, { token: own.token }),
  );
  await vi.waitFor(async () => expect(await waitingReaders(server)).toBe(10), { timeout: 15_000 });
  const started = Date.now();
  await server.close();
  const answers = await Promise.all(reading);
  // Well before the 20 s wait would have run out.
  expect(Date.now() - started).toBeLessThan(15_000);
  expect(answers.map((a) => [a.status, a.body])).toEqual(
    Array.from({ length: 10 }, () => [200, { events: [], cursor }]),
  );
}, 30_000);

describe("the event feed", () => {
  it("starts from now, then gives every reader every event after its cursor, consuming nothing", async () => {
    const app = await t.createApp();
    await declared(t, app);
    await t.admin.setSecret({ appId: app.id, name: "API_KEY", value: "before" });
    const start = await feed(t, app);
    expect(start.events).toEqual([]);
    expect(start.cursor).toMatch(/^[0-9]+$/);

    await t.admin.setSecret({ appId: app.id, name: "API_KEY", value: "one" });
    await t.admin.publishEvent({
      appId: app.id,
      kind: "deploy.done",
      data: { kind: { case: "numberValue", value: 7 } },
    });
    await t.admin.setSecret({ appId: app.id, name: "API_KEY", value: "two" });

    const all = await feed(t, app, `?after=${start.cursor}`);
    expect(all.events.map((e) => [e.kind, e.data])).toEqual([
      ["secret.set", { name: "API_KEY", version: 2 }],
      ["deploy.done", 7],
      ["secret.set", { name: "API_KEY", version: 3 }],
    ]);
    expect(all.cursor).toBe(all.events[2].cursor);
    const cursors = all.events.map((e) => BigInt(e.cursor));
    expect(cursors[0] < cursors[1] && cursors[1] < cursors[2]).toBe(true);
    for (const e of all.events) expect(Math.abs(e.at - Date.now())).toBeLessThan(60_000);

    // A second reader from the same cursor sees the same: reading consumed nothing.
    expect(await feed(t, app, `?after=${start.cursor}`)).toEqual(all);
    // From the middle: the rest only.
    const rest = await feed(t, app, `?after=${all.events[0].cursor}`);
    expect(rest.events.map((e) => e.cursor)).toEqual([all.events[1].cursor, all.events[2].cursor]);
    // At the end: nothing, and the same cursor back.
    expect(await feed(t, app, `?after=${all.cursor}&waitSeconds=0`)).toEqual({ events: [], cursor: all.cursor });

    // `_events` is still a queue (docs/queues.md#platform-events): each of the four events is consumed once.
    const kinds: string[] = [];
    for (;;) {
      const res = await t.request("POST", "/v1/queues/_events/consume", { token: app.token, body: { waitSeconds: 0 } });
      const message = res.body.message as { payload: { kind: string }; receipt: string } | null;
      if (!message) break;
      kinds.push(message.payload.kind);
      await t.request("POST", "/v1/queues/_ack", { token: app.token, body: { receipt: message.receipt } });
    }
    expect(kinds).toEqual(["secret.set", "secret.set", "deploy.done", "secret.set"]);
    expect((await feed(t, app, `?after=${start.cursor}`)).events).toHaveLength(3);
  });

  it("wakes two waiting readers at a secret.set, long before their wait ends", async () => {
    const app = await t.createApp();
    await declared(t, app);
    const { cursor } = await feed(t, app);
    const before = await waitingReaders(t);
    const started = Date.now();
    const readers = [
      feed(t, app, `?after=${cursor}&waitSeconds=25`),
      t.client(QueueService, app.token).readEventFeed({ after: cursor, waitSeconds: 25 }),
    ];
    await vi.waitFor(async () => expect(await waitingReaders(t)).toBe(before + 2), { timeout: 10_000 });
    await t.admin.setSecret({ appId: app.id, name: "API_KEY", value: "v1" });
    const [rest, rpc] = await Promise.all(readers);
    expect(Date.now() - started).toBeLessThan(20_000);
    expect((rest as FeedAnswer).events.map((e) => e.kind)).toEqual(["secret.set"]);
    const answer = rpc as Awaited<ReturnType<ReturnType<typeof t.client<typeof QueueService>>["readEventFeed"]>>;
    expect(answer.events.map((e) => e.kind)).toEqual(["secret.set"]);
    expect(answer.events[0].cursor).toBe((rest as FeedAnswer).cursor);
    expect(answer.cursor).toBe((rest as FeedAnswer).cursor);
  });

  it("without `after`, a waiting read returns the first event after it began", async () => {
    const app = await t.createApp();
    await declared(t, app);
    await t.admin.setSecret({ appId: app.id, name: "API_KEY", value: "old" });
    const before = await waitingReaders(t);
    const reading = feed(t, app, "?waitSeconds=25");
    await vi.waitFor(async () => expect(await waitingReaders(t)).toBe(before + 1), { timeout: 10_000 });
    await t.admin.setSecret({ appId: app.id, name: "API_KEY", value: "new" });
    const answer = await reading;
    expect(answer.events.map((e) => e.data)).toEqual([{ name: "API_KEY", version: 2 }]);
  });

  it("gives each of two readers every one of 40 concurrently published events once, in cursor order", async () => {
    const app = await t.createApp();
    const { cursor: start } = await feed(t, app);
    const total = 40;
    const readAll = async () => {
      const seen: { cursor: string; n: number }[] = [];
      let cursor = start;
      while (seen.length < total) {
        const answer = await feed(t, app, `?after=${cursor}&waitSeconds=10`);
        for (const e of answer.events) seen.push({ cursor: e.cursor, n: e.data as number });
        cursor = answer.cursor;
      }
      return seen;
    };
    const readers = [readAll(), readAll()];
    await Promise.all(
      Array.from({ length: total }, (_, n) =>
        t.admin.publishEvent({ appId: app.id, kind: "tick", data: { kind: { case: "numberValue", value: n } } }),
      ),
    );
    const [one, two] = await Promise.all(readers);
    for (const seen of [one, two]) {
      expect(seen.map((e) => e.n).sort((x, y) => x - y)).toEqual(Array.from({ length: total }, (_, n) => n));
      const cursors = seen.map((e) => BigInt(e.cursor));
      expect(cursors.every((c, i) => i === 0 || c > cursors[i - 1])).toBe(true);
    }
    expect(one).toEqual(two);
  });

  it("keeps apps apart", async () => {
    const a = await t.createApp();
    const b = await t.createApp();
    await declared(t, a);
    const startA = await feed(t, a);
    const startB = await feed(t, b);
    await t.admin.setSecret({ appId: a.id, name: "API_KEY", value: "a" });
    expect((await feed(t, a, `?after=${startA.cursor}`)).events).toHaveLength(1);
    expect((await feed(t, b, `?after=${startB.cursor}`)).events).toEqual([]);
    // A's cursor read by B shows nothing of A either.
    expect((await feed(t, b, "?after=0")).events).toEqual([]);
  });

  it("commits an event on `_events`, in the feed and in the audit log together, or not at all", async () => {
    const app = await t.createApp();
    const db = t.server.deps.db;
    const counts = async () => {
      const { rows } = await sql<{ queued: number; fed: number; audited: number }>`
        SELECT (SELECT count(*)::int FROM queue_messages WHERE app_id = ${app.id} AND queue = '_events') AS queued,
               (SELECT count(*)::int FROM queue_event_feed WHERE app_id = ${app.id}) AS fed,
               (SELECT count(*)::int FROM audit_log WHERE app_id = ${app.id}
                  AND action = 'event.publish' AND outcome = 'ok') AS audited`.execute(db);
      return rows[0];
    };
    const allow = await refuseInserts(db, "queue_event_feed");
    try {
      // The feed's append fails after the `_events` put and the audit entry, in their transaction.
      const err = await t.admin
        .publishEvent({ appId: app.id, kind: "deploy.done" })
        .catch((e: unknown) => ConnectError.from(e));
      expect(err).toBeInstanceOf(ConnectError);
      expect(await counts()).toEqual({ queued: 0, fed: 0, audited: 0 });
    } finally {
      await allow();
    }
    await t.admin.publishEvent({ appId: app.id, kind: "deploy.done" });
    expect(await counts()).toEqual({ queued: 1, fed: 1, audited: 1 });
  });

  it("refuses a bad cursor or wait with a 400 naming the field, over REST and Connect", async () => {
    const app = await t.createApp();
    for (const query of ["?after=abc", "?after=-1", "?after=1.5", "?after=99999999999999999999", "?after=01"]) {
      const res = await t.request("GET", `/v1/queues/_events/feed${query}`, { token: app.token });
      expect(res.status, query).toBe(400);
      expect(res.body.error.code).toBe("invalid_argument");
      expect(res.body.error.message).toMatch(/^after: must be a cursor returned by the feed/);
    }
    for (const query of ["?waitSeconds=26", "?waitSeconds=x"]) {
      const res = await t.request("GET", `/v1/queues/_events/feed${query}`, { token: app.token });
      expect(res.status, query).toBe(400);
      expect(res.body.error.message).toMatch(/^(query\.)?waitSeconds: must be an integer from 0 to 25/);
    }
    const err = await t
      .client(QueueService, app.token, "grpc")
      .readEventFeed({ after: "x" })
      .catch((e: unknown) => ConnectError.from(e));
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.InvalidArgument);
    expect((await t.request("GET", "/v1/queues/_events/feed")).status).toBe(401);
  });

  it("is swept by housekeeping once expired", async () => {
    const app = await t.createApp();
    await t.admin.publishEvent({ appId: app.id, kind: "deploy.done" });
    const db = tables(t.server.deps.db);
    const count = async () =>
      (await sql<{ n: number }>`SELECT count(*)::int AS n FROM queue_event_feed WHERE app_id = ${app.id}`.execute(db))
        .rows[0].n;
    expect(await count()).toBe(1);
    await sql`UPDATE queue_event_feed SET expires_at = now() - interval '1 second' WHERE app_id = ${app.id}`.execute(
      db,
    );
    expect((await feed(t, app, "?after=0")).events).toEqual([]);
    await t.server.housekeeping.runAll();
    expect(await count()).toBe(0);
  });

  it("of a deleted app is swept by housekeeping within the hour, not kept until it expires", async () => {
    const app = await t.createApp();
    const other = await t.createApp();
    await t.admin.publishEvent({ appId: app.id, kind: "deploy.done" });
    await t.admin.publishEvent({ appId: other.id, kind: "deploy.done" });
    await t.admin.deleteApp({ appId: app.id });
    const db = tables(t.server.deps.db);
    const count = async (appId: string) =>
      (await sql<{ n: number }>`SELECT count(*)::int AS n FROM queue_event_feed WHERE app_id = ${appId}`.execute(db))
        .rows[0].n;
    expect(await count(app.id)).toBe(1);
    expect((await t.server.housekeeping.runAll())["queue event feed of deleted apps"]).toBe(1);
    expect([await count(app.id), await count(other.id)]).toEqual([0, 1]);
  });
});

describe("the event feed across two instances on one database", () => {
  let pair: Instances;
  beforeAll(async () => {
    pair = await startInstances(2);
  });
  afterAll(() => pair.close());

  it("wakes a reader on each instance at a secret.set made on one of them", async () => {
    const [one, two] = pair.servers as [TestServer, TestServer];
    const app = await one.createApp();
    await declared(one, app);
    const { cursor } = await feed(one, app);
    const waitingBefore = [await waitingReaders(one), await waitingReaders(two)];
    const started = Date.now();
    const readers = [
      feed(one, app, `?after=${cursor}&waitSeconds=25`),
      feed(two, app, `?after=${cursor}&waitSeconds=25`),
    ];
    await vi.waitFor(
      async () => {
        expect(await waitingReaders(one)).toBe(waitingBefore[0] + 1);
        expect(await waitingReaders(two)).toBe(waitingBefore[1] + 1);
      },
      { timeout: 10_000 },
    );
    await one.admin.setSecret({ appId: app.id, name: "API_KEY", value: "rotated" });
    const answers = await Promise.all(readers);
    expect(Date.now() - started).toBeLessThan(20_000);
    for (const answer of answers)
      expect(answer.events.map((e) => [e.kind, e.data])).toEqual([["secret.set", { name: "API_KEY", version: 1 }]]);
    expect(answers[0].cursor).toBe(answers[1].cursor);
  });

  it("refuses a waiting read whose token was revoked on the other instance, instead of handing it the next event", async () => {
    const [one, two] = pair.servers as [TestServer, TestServer];
    const app = await one.createApp();
    await declared(one, app);
    const { cursor } = await feed(one, app);
    const waitingBefore = await waitingReaders(two);
    const reader = two.request("GET", `/v1/queues/_events/feed?after=${cursor}&waitSeconds=25`, { token: app.token });
    await vi.waitFor(async () => expect(await waitingReaders(two)).toBe(waitingBefore + 1), { timeout: 10_000 });
    const { tokens } = await one.admin.listTokens({ appId: app.id });
    await one.admin.revokeToken({ tokenId: tokens[0].id });
    // An event for the app wakes the reader: it reads for the token as it is now.
    await one.admin.setSecret({ appId: app.id, name: "API_KEY", value: "after the revocation" });
    const answer = await reader;
    expect([answer.status, (answer.body as { error: { code: string } }).error?.code]).toEqual([401, "unauthenticated"]);
  });
});

describe.skipIf(backend !== "postgres")(
  `_events while a publish is still open (${backend === "postgres" ? "PostgreSQL" : "skipped: needs a PostgreSQL server (DATABASE_URL); holding a transaction open takes a second connection, and PGlite has one"})`,
  () => {
    it("consumers still get the waiting events: the publish locks only the events it drops", async () => {
      const app = await t.createApp();
      for (let i = 0; i < 5; i++) await t.admin.publishEvent({ appId: app.id, kind: "tick", data: json(i) });
      // A publish as a secret set makes one, in a transaction that is still open.
      let release!: () => void;
      const held = new Promise<void>((resolve) => (release = resolve));
      let inside!: () => void;
      const published = new Promise<void>((resolve) => (inside = resolve));
      const open = t.server.deps.db.transaction().execute(async (trx) => {
        await createQueueStore(transactionAsDb(trx)).putDroppingOldest({
          appId: app.id,
          queue: "_events",
          payload: JSON.stringify({ kind: "open", at: Date.now(), data: null }),
          delaySeconds: 0,
          ttlSeconds: 3600,
          keep: 100,
          notify: undefined,
        });
        inside();
        await held;
      });
      try {
        await published;
        const got = await t.request("POST", "/v1/queues/_events/consume", {
          token: app.token,
          body: { waitSeconds: 0 },
        });
        expect(got.status).toBe(200);
        expect(got.body.message?.payload).toMatchObject({ kind: "tick", data: 0 });
      } finally {
        release();
        await open;
      }
    });

    it("keeps only the newest event when the depth cap is 1", async () => {
      const app = await t.createApp();
      await t.admin.updateApp({ appId: app.id, limits: { maxQueueDepth: 1 } });
      for (let i = 0; i < 3; i++) await t.admin.publishEvent({ appId: app.id, kind: "tick", data: json(i) });
      const got = await t.request("POST", "/v1/queues/_events/consume", { token: app.token, body: { max: 10 } });
      expect(got.body.messages.map((m: { payload: { data: number } }) => m.payload.data)).toEqual([2]);
    });
  },
);

describeOnPostgres("the event feed when the LISTEN connection is lost", "PGlite has no connection to cut", () => {
  let database: TestDatabase;
  let a: TestServer;
  let b: TestServer;
  let client: pg.Client;
  beforeAll(async () => {
    database = await createTestDatabase();
    a = await startServer({ database });
    b = await startServer({ database });
    client = new pg.Client({ connectionString: database.url });
    await client.connect();
  });
  afterAll(async () => {
    await client?.end();
    await a?.close();
    await b?.close();
    await database?.drop();
  });

  it("wakes a waiting reader to read again once the connection is back, so an event published meanwhile is seen", async () => {
    const app = await a.createApp();
    const { cursor } = await feed(b, app);
    const reading = feed(b, app, `?after=${cursor}&waitSeconds=25`);
    await vi.waitFor(async () => expect(await waitingReaders(b)).toBe(1), { timeout: 10_000 });
    const { rows } = await client.query<{ pid: number }>(
      `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query ILIKE 'LISTEN%'`,
    );
    expect(rows.length).toBe(2); // one per instance
    await client.query(`SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid`, [rows.map((r) => r.pid)]);
    // Published while the connections are down: its notification is lost; the reconnect wakes the reader.
    const publishedAt = Date.now();
    await a.admin.publishEvent({ appId: app.id, kind: "deploy.done" });
    const answer = await reading;
    expect(answer.events.map((e) => e.kind)).toEqual(["deploy.done"]);
    // Woken by the reconnect, not by the end of its 25 s wait.
    expect(Date.now() - publishedAt).toBeLessThan(15_000);
  });
});
