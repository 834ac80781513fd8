/**
 * Wake-ups across instances: two servers on one database, a consumer
 * waiting on B, a put on A (on PostgreSQL two real instances; on PGlite two
 * servers sharing the one in-process database, its NOTIFY reaching the other
 * server's listener). And the LISTEN connection cut under a waiting consumer
 * (`pg_terminate_backend`, as a database restart looks to the client): it
 * reconnects, re-LISTENs and re-checks, without a restart. That one needs a
 * PostgreSQL server (DATABASE_URL): PGlite has no connection to cut.
 */
import { afterAll, beforeAll, expect, it, vi } from "vitest";
import pg from "pg";
import {
  describeEachBackend,
  createTestDatabase,
  startInstances,
  startServer,
  type Instances,
  type TestApp,
  type TestDatabase,
  type TestServer,
  describeOnPostgres,
} from "../support/harness.ts";
import { RECHECK_MS } from "../../src/queues/wake-hub.ts";
import { QueueService } from "../../gen/platform/queues/v1/queues_pb.js";

const waiting = async (s: TestServer) => {
  const text = await (await fetch(`${s.url}/metrics`)).text();
  return Number(/^queue_waiting_consumers (\S+)$/m.exec(text)?.[1] ?? 0);
};

describeEachBackend("wake-up across instances", () => {
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

  it("a put on instance A wakes a consumer waiting on instance B at once (well before any re-check)", async () => {
    for (let round = 0; round < 5; round++) {
      const consume = b.request("POST", "/v1/queues/cross/consume", { token: app.token, body: { waitSeconds: 20 } });
      await vi.waitFor(async () => expect(await waiting(b)).toBe(1));
      const putAt = Date.now();
      const put = await a.request("POST", "/v1/queues/cross", { token: app.token, body: { payload: round } });
      expect(put.status).toBe(200);
      const res = await consume;
      expect(res.body.message.payload).toBe(round);
      expect(Date.now() - putAt).toBeLessThan(Math.min(1000, RECHECK_MS / 2));
      await b.request("POST", "/v1/queues/_ack", { token: app.token, body: { receipt: res.body.message.receipt } });
    }
  });

  it("concurrent puts on A that share one statement (one notification with a count) wake as many consumers on B", async () => {
    const consumers = Array.from({ length: 6 }, () =>
      b.request("POST", "/v1/queues/many/consume", { token: app.token, body: { waitSeconds: 20 } }),
    );
    await vi.waitFor(async () => expect(await waiting(b)).toBe(6));
    const putAt = Date.now();
    const puts = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        a.request("POST", "/v1/queues/many", { token: app.token, body: { payload: i } }),
      ),
    );
    expect(puts.map((p) => p.status)).toEqual([200, 200, 200, 200, 200, 200]);
    const got = await Promise.all(consumers);
    expect(Date.now() - putAt).toBeLessThan(Math.min(1000, RECHECK_MS / 2));
    expect(got.map((r) => r.body.message.payload as number).sort()).toEqual([0, 1, 2, 3, 4, 5]);
  });

  it("one PutMessages batch on A (one notification with its count) wakes as many consumers on B; a delayed part wakes none early", async () => {
    const consumers = Array.from({ length: 4 }, () =>
      b.request("POST", "/v1/queues/batch/consume", { token: app.token, body: { waitSeconds: 20 } }),
    );
    await vi.waitFor(async () => expect(await waiting(b)).toBe(4));
    const number = (value: number) => ({ payload: { kind: { case: "numberValue" as const, value } } });
    await a.client(QueueService, app.token, "grpc").putMessages({
      queue: "batch",
      messages: [number(0), number(1), { ...number(9), delaySeconds: 60 }, number(2), number(3)],
    });
    // From the batch's commit (the call's answer) on: the notification, not a re-check, wakes them.
    const storedAt = Date.now();
    const got = await Promise.all(consumers);
    expect(Date.now() - storedAt).toBeLessThan(Math.min(1000, RECHECK_MS / 2));
    expect(got.map((r) => r.body.message.payload as number).sort()).toEqual([0, 1, 2, 3]);
  });
});

describeOnPostgres("LISTEN connection lost under a waiting consumer", "PGlite has no connection to cut", () => {
  let database: TestDatabase;
  let a: TestServer;
  let b: TestServer;
  let app: TestApp;
  let sql: pg.Client;

  beforeAll(async () => {
    database = await createTestDatabase();
    a = await startServer({ database });
    b = await startServer({ database });
    app = await a.createApp();
    sql = new pg.Client({ connectionString: database.url });
    await sql.connect();
  });
  afterAll(async () => {
    await sql?.end();
    await a?.close();
    await b?.close();
    await database?.drop();
  });

  const listeners = async () =>
    (
      await sql.query(`SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query ILIKE 'LISTEN%'`)
    ).rows.map((r) => r.pid as number);

  it("after the LISTEN connection is killed under a waiting consumer, it reconnects and the consumer is still woken", async () => {
    const consume = b.request("POST", "/v1/queues/restart/consume", { token: app.token, body: { waitSeconds: 20 } });
    await vi.waitFor(async () => expect(await waiting(b)).toBe(1));
    const before = await listeners();
    expect(before.length).toBe(2); // one per instance
    await sql.query(`SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid`, [before]);
    // A put while the connections are down: its notification is lost, the re-check on reconnect finds it.
    const put = await a.request("POST", "/v1/queues/restart", { token: app.token, body: { payload: "while down" } });
    expect(put.status).toBe(200);
    const res = await consume;
    expect(res.body.message.payload).toBe("while down");
    await vi.waitFor(async () => {
      const now = await listeners();
      expect(now.length).toBe(2);
      expect(now.filter((pid) => before.includes(pid))).toEqual([]);
    });
    // And notifications flow again over the new connections.
    const again = b.request("POST", "/v1/queues/restart/consume", { token: app.token, body: { waitSeconds: 20 } });
    await vi.waitFor(async () => expect(await waiting(b)).toBe(1));
    const putAt = Date.now();
    await a.request("POST", "/v1/queues/restart", { token: app.token, body: { payload: "after" } });
    expect((await again).body.message.payload).toBe("after");
    expect(Date.now() - putAt).toBeLessThan(1000);
  });
});
