/**
 * Data lifecycle: mail log and analytics events are kept for the app's
 * `retentionDays` and then deleted by housekeeping (rollups with their
 * events, so counts stay exact); used and expired secret links are swept for
 * every app, by any instance, each row once; deleting an app removes its
 * analytics events in every store (MongoDB included: the filter is checked
 * with mingo) or fails whole when that store cannot be reached, and what a
 * store outside the database still holds of deleted apps is swept.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Query } from "mingo";
import { sql } from "kysely";
import { Code, ConnectError } from "@connectrpc/connect";
import { eventsFilter } from "../../src/analytics/mongo-event-store.ts";
import { retentionCutoff } from "../../src/core/apps/apps.ts";
import pino from "pino";
import { createDatabaseHealth } from "../../src/core/database/health.ts";
import { createHousekeeping, inBatches, orphanSweepTask, retentionTask } from "../../src/core/housekeeping.ts";
import { startInstances, startServer, useTestServer, type Instances, type TestApp } from "../support/harness.ts";
import { tables } from "../support/tables.ts";

const DAY = 86_400_000;
const t = useTestServer({ env: { MAIL_DOMAIN: "apps.example.net" } });

async function logAt(app: TestApp, ats: number[]) {
  const res = await t.request("POST", "/v1/analytics/events", {
    token: app.token,
    body: { events: ats.map((at) => ({ type: "visit", at, properties: { page: "home" } })) },
  });
  expect(res.status).toBe(200);
}
const total = async (app: TestApp, since: number) =>
  (
    await t.request("POST", "/v1/analytics/query", {
      token: app.token,
      body: { type: "visit", since, interval: "day" },
    })
  ).body.total as number;

describe("retentionCutoff (src/core/apps/apps.ts)", () => {
  it("is the start of the UTC day so many days back", () => {
    expect(retentionCutoff(90, new Date("2026-11-23T17:45:00Z")).toISOString()).toBe("2026-08-25T00:00:00.000Z");
    expect(retentionCutoff(1, new Date("2026-03-01T00:00:00Z")).toISOString()).toBe("2026-02-28T00:00:00.000Z");
  });
});

describe("housekeeping (src/core/housekeeping.ts)", () => {
  it("deletes mail and analytics events past the app's retention, and only those; counts stay exact", async () => {
    const short = await t.createApp();
    const normal = await t.createApp();
    await t.admin.updateApp({ appId: short.id, limits: { retentionDays: 2 } });
    const now = Date.now();
    const old = now - 5 * DAY;
    for (const app of [short, normal]) {
      expect(
        (
          await t.request("POST", "/v1/analytics/types", {
            token: app.token,
            body: { name: "visit", properties: { page: "string" } },
          })
        ).status,
      ).toBe(200);
      await logAt(app, [old, old + 1000, now - 1000, now - 2000, now - 3000]);
      for (const subject of ["old", "new"]) {
        expect(
          (
            await t.request("POST", "/v1/mail/send", {
              token: app.token,
              body: { to: "a@example.com", subject, text: "x" },
            })
          ).status,
        ).toBe(200);
      }
    }
    // The "old" mails as if sent five days ago.
    await tables(t.server.deps.db)
      .updateTable("mail_log")
      .set({ created_at: new Date(old) })
      .where("subject", "=", "old")
      .execute();

    const removed = await t.server.housekeeping.runAll();
    expect(removed["analytics retention"]).toBe(2);
    expect(removed["mail retention"]).toBe(1);

    expect(await total(short, old - DAY)).toBe(3);
    expect(await total(normal, old - DAY)).toBe(5);
    const mails = async (app: TestApp) =>
      (await t.admin.listMail({ appId: app.id })).mails.map((m) => m.subject).sort();
    expect(await mails(short)).toEqual(["new"]);
    expect(await mails(normal)).toEqual(["new", "old"]);
    // The rollups went with their events: the grouped query over the rollups agrees with the raw rows.
    const raw = await tables(t.server.deps.db)
      .selectFrom("analytics_events")
      .select((eb) => eb.fn.countAll<number>().as("n"))
      .where("app_id", "=", short.id)
      .executeTakeFirstOrThrow();
    expect(Number(raw.n)).toBe(3);
    const grouped = await t.request("POST", "/v1/analytics/query", {
      token: short.token,
      body: { type: "visit", since: old - DAY, interval: "hour", groupBy: "page" },
    });
    expect(grouped.body.total).toBe(3);

    expect(Object.values(await t.server.housekeeping.runAll()).every((n) => n === 0)).toBe(true);
  });

  it("retentionDays is a limit like the others: at least 1, at most 3650", async () => {
    const app = await t.createApp();
    for (const bad of [0, 3651]) {
      const err = await t.admin
        .updateApp({ appId: app.id, limits: { retentionDays: bad } })
        .catch((e: unknown) => ConnectError.from(e));
      expect(err).toBeInstanceOf(ConnectError);
      expect((err as ConnectError).code).toBe(Code.InvalidArgument);
      expect((err as ConnectError).rawMessage).toMatch(/^limits\.retentionDays: /);
    }
    expect((await t.admin.getApp({ appId: app.id })).app!.limits!.retentionDays).toBe(90);
  });
});

describe("secret link sweep (src/secrets/secret-store.ts deleteDeadLinks)", () => {
  let instances: Instances;
  beforeAll(async () => {
    instances = await startInstances(2);
  });
  afterAll(() => instances?.close());

  it("removes used and expired links of every app once, with two instances sweeping at the same time", async () => {
    const [a, b] = instances.servers;
    const links = tables(a.server.deps.db);
    const outstanding: string[] = [];
    for (let i = 0; i < 3; i++) {
      const app = await a.createApp();
      await a.admin.declareSecrets({ appId: app.id, names: ["KEY"] });
      // Four links (creating one removes the app's dead ones, so they all exist before any is used).
      const paths: string[] = [];
      for (let j = 0; j < 4; j++) {
        const created = await a.request("POST", "/v1/secrets/KEY/link", { token: app.token });
        expect(created.status).toBe(200);
        paths.push(new URL(created.body.url as string).pathname);
      }
      // One used, two expired, one outstanding.
      expect((await a.request("PUT", paths[0], { body: { value: `v${i}` } })).status).toBe(200);
      outstanding.push(app.id);
      const expire = await links
        .selectFrom("secret_links")
        .select("token_hash")
        .where("app_id", "=", app.id)
        .where("used_at", "is", null)
        .limit(2)
        .execute();
      await links
        .updateTable("secret_links")
        .set({ expires_at: new Date(Date.now() - 1000) })
        .where(
          "token_hash",
          "in",
          expire.map((r) => r.token_hash),
        )
        .execute();
    }
    expect(
      Number(
        (
          await links
            .selectFrom("secret_links")
            .select((eb) => eb.fn.countAll<number>().as("n"))
            .executeTakeFirstOrThrow()
        ).n,
      ),
    ).toBe(12);

    const [ra, rb] = await Promise.all([a.server.housekeeping.runAll(), b.server.housekeeping.runAll()]);
    expect(ra["secret links"] + rb["secret links"]).toBe(9);
    const left = await links.selectFrom("secret_links").select(["app_id", "used_at", "expires_at"]).execute();
    expect(left.map((r) => r.app_id).sort()).toEqual(outstanding.sort());
    expect(left.every((r) => r.used_at === null && new Date(r.expires_at).getTime() > Date.now())).toBe(true);
  });
});

describe("createHousekeeping: stop", () => {
  it("ends a run under way after its current batch and resolves once it has, with nothing logged as failed", async () => {
    const lines: string[] = [];
    const logger = pino({ level: "debug" }, { write: (line: string) => void lines.push(line) });
    let batches = 0;
    let inBatch!: () => void;
    const entered = new Promise<void>((resolve) => (inBatch = resolve));
    let finishBatch!: () => void;
    const finished = new Promise<void>((resolve) => (finishBatch = resolve));
    const housekeeping = createHousekeeping(
      [
        {
          name: "test sweep",
          intervalMs: 60_000,
          // Always a full batch: without the stop it would go on for ever.
          run: (signal) =>
            inBatches(signal, async (batch) => {
              batches++;
              inBatch();
              await finished;
              return batch;
            }),
        },
      ],
      { logger, health: createDatabaseHealth() },
    );
    const running = housekeeping.runAll();
    await entered;
    let stopped = false;
    const stopping = housekeeping.stop().then(() => (stopped = true));
    // The batch under way is not cut: stop waits for it.
    await new Promise((resolve) => setImmediate(resolve));
    expect(stopped).toBe(false);
    finishBatch();
    await stopping;
    expect(await running).toEqual({ "test sweep": 1000 });
    expect(batches).toBe(1);
    expect(lines.filter((l) => l.includes("failed"))).toEqual([]);
    // Stopped: no run starts any more.
    expect(await housekeeping.runAll()).toEqual({ "test sweep": 0 });
    expect(batches).toBe(1);
  });
});

describe("retention (src/core/housekeeping.ts retentionTask)", () => {
  it("an app whose deletion fails does not stop the others; the failure is told after all were tried", async () => {
    const apps = ["a", "b", "c"].map((id) => ({ id, limits: { retentionDays: 30 } }));
    const swept: string[] = [];
    const timeout = new Error("canceling statement due to statement timeout");
    const task = retentionTask("test retention", { list: async () => apps }, async (appId, _before, batch) => {
      if (appId === "a") throw timeout;
      swept.push(appId);
      return batch - 1;
    });
    await expect(task.run(new AbortController().signal)).rejects.toBe(timeout);
    expect(swept).toEqual(["b", "c"]);
  });
});

describe("orphan sweep (src/core/housekeeping.ts orphanSweepTask)", () => {
  it("removes what a store outside the database holds of deleted apps, never of an app created while it runs", async () => {
    const kept = await t.createApp();
    const gone = await t.createApp();
    await t.admin.deleteApp({ appId: gone.id });
    // What such a store holds (MongoDB events of the apps, as counts): here, every app's data by its id.
    const held = new Map<string, number>([
      [kept.id, 3],
      [gone.id, 2],
    ]);
    const apps = t.server.deps.apps;
    let fresh: TestApp | undefined;
    const task = orphanSweepTask(
      "test sweep",
      async () => [...held.keys()],
      {
        // An app created, and given data, right after the apps were listed.
        async list() {
          const listed = await apps.list();
          fresh = await t.createApp();
          held.set(fresh.id, 1);
          return listed;
        },
      },
      async (appId) => {
        const n = held.get(appId) ?? 0;
        held.delete(appId);
        return n;
      },
    );
    expect(await task.run(new AbortController().signal)).toBe(2);
    expect([...held.keys()].sort()).toEqual([kept.id, fresh!.id].sort());
  });

  it("sweeps the analytics events a batch in flight stored after its app was deleted (the SQL store)", async () => {
    const kept = await t.createApp();
    const gone = await t.createApp();
    for (const app of [kept, gone]) {
      await t.request("POST", "/v1/analytics/types", {
        token: app.token,
        body: { name: "visit", properties: { page: "string" } },
      });
      await logAt(app, [Date.now() - 1000, Date.now()]);
    }
    const db = tables(t.server.deps.db);
    const rowsOf = async (appId: string) => ({
      events: (
        await sql<{ n: number }>`SELECT count(*)::int AS n FROM analytics_events WHERE app_id = ${appId}`.execute(db)
      ).rows[0].n,
      daily: (
        await sql<{ n: number }>`SELECT count(*)::int AS n FROM analytics_daily WHERE app_id = ${appId}`.execute(db)
      ).rows[0].n,
    });
    // The rows a logEvents batch writes; deleting the app deletes them (a trigger, in its transaction)...
    const events = await sql<{
      r: unknown;
    }>`SELECT to_json(e) AS r FROM analytics_events e WHERE app_id = ${gone.id}`.execute(db);
    const daily = await sql<{
      r: unknown;
    }>`SELECT to_json(d) AS r FROM analytics_daily d WHERE app_id = ${gone.id}`.execute(db);
    expect(events.rows.length).toBe(2);
    await t.admin.deleteApp({ appId: gone.id });
    expect(await rowsOf(gone.id)).toEqual({ events: 0, daily: 0 });
    // ...but a batch that was in flight commits after the deletion: its rows land for an app that is gone.
    await sql`INSERT INTO analytics_events SELECT * FROM json_populate_recordset(null::analytics_events, ${JSON.stringify(events.rows.map((r) => r.r))}::json)`.execute(
      db,
    );
    await sql`INSERT INTO analytics_daily SELECT * FROM json_populate_recordset(null::analytics_daily, ${JSON.stringify(daily.rows.map((r) => r.r))}::json)`.execute(
      db,
    );
    const keptBefore = await rowsOf(kept.id);
    const removed = await t.server.housekeeping.runAll();
    expect(removed["analytics of deleted apps"]).toBe(2);
    expect(await rowsOf(gone.id)).toEqual({ events: 0, daily: 0 });
    expect(await rowsOf(kept.id)).toEqual(keptBefore);
  });

  it("runs for MongoDB too, whose events do not go with the app's row at all", async () => {
    const onMongo = await startServer({
      env: { MONGODB_URL: "mongodb://127.0.0.1:9/?serverSelectionTimeoutMS=300&connectTimeoutMS=300" },
    });
    try {
      // Run (and failed, the server being unreachable: a failed pass removes nothing and is tried again).
      expect(await onMongo.server.housekeeping.runAll()).toMatchObject({ "analytics of deleted apps": 0 });
    } finally {
      await onMongo.close();
    }
  });
});

describe("app deletion and analytics events (src/admin/admin-service.ts deleteApp)", () => {
  it("the MongoDB filter of an app's events selects exactly that app's, and its old ones for retention", () => {
    const cutoff = new Date("2026-11-01T00:00:00Z");
    const docs = [
      { meta: { app: "a", type: "x" }, at: new Date("2026-10-31T23:59:59Z"), p: {}, b: "1" },
      { meta: { app: "a", type: "y" }, at: new Date("2026-11-01T00:00:00Z"), p: {}, b: "1" },
      { meta: { app: "b", type: "x" }, at: new Date("2026-10-01T00:00:00Z"), p: {}, b: "2" },
    ];
    const pick = (filter: object) =>
      docs.filter((d) => new Query(filter as never).test(d)).map((d) => `${d.meta.app}/${d.meta.type}`);
    expect(pick(eventsFilter("a", cutoff))).toEqual(["a/x"]);
    expect(pick(eventsFilter("a"))).toEqual(["a/x", "a/y"]);
  });

  it("deletes the app while the analytics store cannot be reached, leaving its events there to the hourly sweep", async () => {
    // Its MongoDB events are deleted after the app's row (a deletion refused after deleting them first
    // left a live app without them); when MongoDB cannot be reached then, the sweep of deleted apps' events does it.
    const down = await startServer({
      env: { MONGODB_URL: "mongodb://127.0.0.1:9/?serverSelectionTimeoutMS=300&connectTimeoutMS=300" },
    });
    try {
      const app = await down.createApp();
      await down.admin.deleteApp({ appId: app.id });
      const err = await down.admin.getApp({ appId: app.id }).catch((e: unknown) => ConnectError.from(e));
      expect((err as ConnectError).code).toBe(Code.NotFound);
    } finally {
      await down.close();
    }
  });

  it("removes the app's rows from every table of the platform database", async () => {
    const app = await t.createApp();
    expect(
      (
        await t.request("POST", "/v1/analytics/types", {
          token: app.token,
          body: { name: "visit", properties: { page: "string" } },
        })
      ).status,
    ).toBe(200);
    await logAt(app, [Date.now() - 1000]);
    expect(
      (
        await t.request("POST", "/v1/mail/send", {
          token: app.token,
          body: { to: "a@example.com", subject: "s", text: "x" },
        })
      ).status,
    ).toBe(200);
    await t.admin.declareSecrets({ appId: app.id, names: ["KEY"] });
    await t.admin.setSecret({ appId: app.id, name: "KEY", value: "v" });
    expect((await t.request("POST", "/v1/queues/jobs", { token: app.token, body: { payload: 1 } })).status).toBe(200);
    await t.admin.deleteApp({ appId: app.id });
    // Queue rows have no foreign key (puts must not lock the app's row): the same housekeeping removes them:
    // the two messages (the put, and the `secret.set` platform event on `_events`) and the queues' counters
    // and policies (deleting the messages itself adds counter rows, also removed).
    const rowsLeft = async () =>
      Number(
        (
          await sql<{ n: string }>`
            SELECT (SELECT count(*) FROM queue_counts WHERE app_id = ${app.id})
                 + (SELECT count(*) FROM queue_policies WHERE app_id = ${app.id})
                 + (SELECT count(*) FROM queue_dedup WHERE app_id = ${app.id}) AS n`.execute(t.server.deps.db)
        ).rows[0].n,
      );
    expect(await rowsLeft()).toBeGreaterThan(0);
    expect((await t.server.housekeeping.runAll())["queue messages of deleted apps"]).toBeGreaterThanOrEqual(2);
    expect(await rowsLeft()).toBe(0);
    const db = tables(t.server.deps.db);
    for (const table of [
      "mail_log",
      "analytics_events",
      "analytics_daily",
      "analytics_event_types",
      "secrets",
      "app_tokens",
      "quota_usage",
      "queue_messages",
    ] as const) {
      const row = await db
        .selectFrom(table)
        .select((eb) => eb.fn.countAll<number>().as("n"))
        .where("app_id", "=", app.id)
        .executeTakeFirstOrThrow();
      expect([table, Number(row.n)]).toEqual([table, 0]);
    }
  });
});
