/**
 * The overview an operator opens first (AdminService GetOverview), against the
 * real server on both backends: apps by status; per facility the requests of
 * the last hour and day, by hour, with 4xx and 5xx, counted from REST and
 * Connect calls alike (refused ones too); the top apps of the day; queue
 * backlog and dead letters; mail sent and failed today; tokens spent today;
 * every dependency with its state. Then the same call over 1,000 apps, whose
 * answer is asserted (its time is measured by `npm run bench:overview`, not
 * judged here: a busy machine would break a timing assertion).
 */
import { describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { fromJson } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { sql } from "kysely";
import { QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import { useTestServer } from "../support/harness.ts";

const t = useTestServer();

async function overview() {
  await t.server.requestCounts.flush();
  return t.admin.getOverview({});
}

const facility = (o: Awaited<ReturnType<typeof overview>>, name: string) => {
  const f = o.facilities.find((x) => x.facility === name)!;
  return {
    lastHour: Number(f.requestsLastHour),
    lastDay: Number(f.requestsLastDay),
    clientErrors: Number(f.clientErrorsLastDay),
    serverErrors: Number(f.serverErrorsLastDay),
    hourly: f.hourly.map(Number),
  };
};

describe("GetOverview", () => {
  it("counts what happened: requests per facility and app, errors, queues, mail, tokens, apps, dependencies", async () => {
    const before = await overview();
    const busy = await t.createApp();
    const quiet = await t.createApp();
    const stopped = await t.createApp();
    await stopped.stop();
    await t.admin.updateApp({ appId: busy.id, mailFrom: `${busy.name}@example.com` });

    // queues over REST: 3 puts, one refused (400); over Connect: one put, one refused (401, no app).
    for (let i = 0; i < 3; i++)
      expect((await t.request("POST", "/v1/queues/jobs", { token: busy.token, body: { payload: i } })).status).toBe(
        200,
      );
    expect((await t.request("POST", "/v1/queues/jobs", { token: busy.token, body: { nope: 1 } })).status).toBe(400);
    await t.client(QueueService, busy.token).putMessage({ queue: "jobs", payload: fromJson(ValueSchema, 4) });
    const refused = await t
      .client(QueueService, "pbt_not-a-token")
      .putMessage({ queue: "jobs", payload: fromJson(ValueSchema, 5) })
      .catch((err: unknown) => ConnectError.from(err));
    expect((refused as ConnectError).code).toBe(Code.Unauthenticated);
    // mail: two sent (kept by the outbox); inference: tokens spent; analytics: one request of the quiet app.
    for (const subject of ["a", "b"])
      expect(
        (
          await t.request("POST", "/v1/mail/send", {
            token: busy.token,
            body: { to: "x@example.com", subject, text: "hi" },
          })
        ).status,
      ).toBe(200);
    expect(
      (await t.request("POST", "/v1/inference/generate", { token: busy.token, body: { prompt: "Say hello" } })).status,
    ).toBe(200);
    expect(
      (await t.request("POST", "/v1/inference/embed", { token: busy.token, body: { input: ["hello", "world"] } }))
        .status,
    ).toBe(200);
    expect((await t.request("GET", "/v1/analytics/types", { token: quiet.token })).status).toBe(200);
    // A stopped app's refused call counts as its 403.
    expect((await t.request("POST", "/v1/queues/jobs", { token: stopped.token, body: { payload: 1 } })).status).toBe(
      403,
    );
    // One mail that failed, as a provider's refusal is logged (the trigger counts it, whoever wrote it).
    await sql`INSERT INTO mail_log (app_id, to_address, from_address, subject, status, provider)
      VALUES (${busy.id}, 'y@example.com', 'z@example.com', 'refused', 'failed', 'ses')`.execute(t.server.deps.db);
    // A dead letter: one delivery allowed, nacked.
    await t.admin.setQueuePolicy({ appId: busy.id, queue: "once", maxDeliveries: 1 });
    await t.request("POST", "/v1/queues/once", { token: busy.token, body: { payload: 1 } });
    const consumed = await t.request("POST", "/v1/queues/once/consume", {
      token: busy.token,
      body: { waitSeconds: 0 },
    });
    await t.request("POST", "/v1/queues/_nack", {
      token: busy.token,
      body: { receipt: consumed.body.message.receipt },
    });
    await expect
      .poll(async () => (await t.admin.listDeadLetters({ appId: busy.id, queue: "once" })).deadLetters.length, {
        timeout: 20_000,
      })
      .toBe(1);

    const o = await overview();
    expect(o.day).toBe(new Date().toISOString().slice(0, 10));
    expect(o.appsRunning - before.appsRunning).toBe(2);
    expect(o.appsStopped - before.appsStopped).toBe(1);
    const queues = facility(o, "queues");
    const queuesBefore = facility(before, "queues");
    // REST: 3 puts, 1 refused, 1 of the stopped app, the dead letter's put, consume and nack; Connect: 1 put and
    // 1 refused at its head (a bad token).
    expect(queues.lastDay - queuesBefore.lastDay).toBe(10);
    expect(queues.lastHour - queuesBefore.lastHour).toBe(10);
    expect(queues.clientErrors - queuesBefore.clientErrors).toBe(3); // the 400, the 401, the 403
    expect(queues.serverErrors - queuesBefore.serverErrors).toBe(0);
    expect(queues.hourly).toHaveLength(24);
    expect(queues.hourly.reduce((a, b) => a + b, 0)).toBe(queues.lastDay);
    expect(facility(o, "mail").lastDay - facility(before, "mail").lastDay).toBe(2);
    expect(facility(o, "inference").lastDay - facility(before, "inference").lastDay).toBe(2);
    expect(facility(o, "analytics").lastDay - facility(before, "analytics").lastDay).toBe(1);
    expect(o.facilities.map((f) => f.facility)).toEqual(["analytics", "inference", "mail", "queues", "secrets"]);

    // The busy app leads the day; the quiet one has its one request.
    const top = o.topApps.map((a) => [a.appName, Number(a.requests)] as const);
    expect(top[0][0]).toBe(busy.name);
    expect(top.find(([name]) => name === quiet.name)?.[1]).toBe(1);
    expect(Number(o.topApps[0].clientErrors)).toBe(1);

    expect(Number(o.queueBacklog) - Number(before.queueBacklog)).toBe(4);
    expect(Number(o.deadLetters) - Number(before.deadLetters)).toBe(1);
    expect(Number(o.mailSentToday) - Number(before.mailSentToday)).toBe(2);
    expect(Number(o.mailFailedToday) - Number(before.mailFailedToday)).toBe(1);
    const usage = await t.admin.getUsage({ appId: busy.id });
    expect(Number(usage.fastTokens!.used)).toBeGreaterThan(0);
    expect(Number(o.fastTokensToday) - Number(before.fastTokensToday)).toBe(Number(usage.fastTokens!.used));
    expect(Number(o.embedTokensToday) - Number(before.embedTokensToday)).toBe(Number(usage.embedTokens!.used));

    expect(o.dependencies.map((d) => [d.name, d.state])).toEqual([
      ["database", "ok"],
      ["analytics", "embedded"],
      ["mail", "embedded"],
      ["inference", "embedded"],
    ]);
    expect(o.dependencies[0].provider).toBe(process.env.DATABASE_URL ? "PostgreSQL" : "PGlite (embedded)");
    expect(o.dependencies.every((d) => d.ok)).toBe(true);

    // The dead letters are counted by the rows that go too: purged, the count and the attention item go.
    expect(o.attention.some((a) => a.kind === "dead_letters" && a.appId === busy.id)).toBe(true);
    await t.admin.purgeDeadLetters({ appId: busy.id, queue: "once", all: true });
    const after = await overview();
    expect(Number(after.deadLetters)).toBe(Number(before.deadLetters));
    expect(after.attention.some((a) => a.kind === "dead_letters" && a.appId === busy.id)).toBe(false);
  });

  it("answers over 1,000 apps from the rollups: counts, the top apps in order, totals", async () => {
    const db = t.server.deps.db;
    const before = await overview();
    const prefix = `bulk${Date.now().toString(36)}`;
    await sql`INSERT INTO apps (name, status)
      SELECT ${prefix} || '-' || g, CASE WHEN g % 10 = 0 THEN 'stopped' ELSE 'running' END
      FROM generate_series(1, 1000) g`.execute(db);
    const { rows } = await sql<{ id: string; name: string }>`
      SELECT id, name FROM apps WHERE name LIKE ${prefix + "-%"} ORDER BY name`.execute(db);
    expect(rows).toHaveLength(1000);
    // Requests as the server counts them (the recorder REST and Connect use): app i made i % 50 + 1 requests.
    const byName = new Map(rows.map((r) => [r.name, r.id]));
    for (let i = 1; i <= 1000; i++) {
      const id = byName.get(`${prefix}-${i}`)!;
      for (let n = 0; n < (i % 50) + 1; n++) t.server.requestCounts.record("analytics", id, n === 0 ? 429 : 200);
    }
    // The most active app of all, by far.
    const leader = byName.get(`${prefix}-7`)!;
    for (let n = 0; n < 10_000; n++) t.server.requestCounts.record("queues", leader, n % 100 === 0 ? 503 : 200);

    const started = performance.now();
    const o = await overview();
    const ms = performance.now() - started;
    expect(o.appsRunning - before.appsRunning).toBe(900);
    expect(o.appsStopped - before.appsStopped).toBe(100);
    const analytics = facility(o, "analytics");
    // 20 rounds of 1 + 2 + ... + 50 requests.
    expect(analytics.lastDay - facility(before, "analytics").lastDay).toBe(20 * ((50 * 51) / 2));
    expect(analytics.clientErrors - facility(before, "analytics").clientErrors).toBe(1000);
    expect(facility(o, "queues").serverErrors - facility(before, "queues").serverErrors).toBe(100);
    expect(o.topApps).toHaveLength(5);
    expect(o.topApps[0]).toMatchObject({ appId: leader, appName: `${prefix}-7`, requests: 10_000n + 8n });
    expect(Number(o.topApps[0].serverErrors)).toBe(100);
    // Then the apps with 50 requests (i % 50 = 49), by id.
    expect(o.topApps.slice(1).map((a) => Number(a.requests))).toEqual([50, 50, 50, 50]);
    // Measured, not judged (see bench/overview.ts for the figure that is).
    expect(ms).toBeGreaterThan(0);
  });
});
