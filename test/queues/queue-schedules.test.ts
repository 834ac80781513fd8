/**
 * Queue schedules over the real server (docs/queues.md "Schedules"): set, list and delete over REST and
 * Connect; bad input refused with the envelope naming the field; a schedule ticking every second puts one
 * message a tick (counted against the ticks between its first run and its `endAt`); a tick that finds the
 * queue at its depth cap is skipped and counted; a stopped app's ticks are not put.
 */
import { sql } from "kysely";
import { describe, expect, it } from "vitest";
import { QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import { useTestServer, type TestApp } from "../support/harness.ts";
import { drain } from "../support/drain-queue.ts";

const t = useTestServer();

const rest = (app: TestApp, method: string, path: string, body?: unknown) =>
  t.request(method, path, { token: app.token, body });

interface ScheduleJson {
  name: string;
  nextRunAt: number | null;
  fired: number;
  skippedFull: number;
  missed: number;
}

async function schedules(app: TestApp, queue: string): Promise<ScheduleJson[]> {
  const res = await rest(app, "GET", `/v1/queues/${queue}/schedules`);
  expect(res.status).toBe(200);
  return res.body.schedules as ScheduleJson[];
}

/** Resolves once the schedule has no next run (past its `endAt`): polled through the API. */
async function ended(app: TestApp, queue: string, name: string, ms = 30_000): Promise<ScheduleJson> {
  const until = Date.now() + ms;
  for (;;) {
    const s = (await schedules(app, queue)).find((x) => x.name === name)!;
    if (s.nextRunAt === null) return s;
    if (Date.now() > until) throw new Error(`schedule ${name} still has a next run`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe("schedules", () => {
  it("are set, listed with their next run, replaced and deleted (REST and Connect)", async () => {
    const app = await t.createApp();
    const put = await rest(app, "PUT", "/v1/queues/reports/schedules/nightly", {
      cron: "30 2 * * *",
      timezone: "Europe/Berlin",
      payload: { kind: "nightly" },
      catchUp: "one",
    });
    expect(put.status, JSON.stringify(put.body)).toBe(200);
    expect(put.body).toMatchObject({
      queue: "reports",
      name: "nightly",
      cron: "30 2 * * *",
      timezone: "Europe/Berlin",
      payload: { kind: "nightly" },
      catchUp: "one",
      fired: 0,
    });
    expect(put.body.nextRunAt).toBeGreaterThan(Date.now());
    expect(put.body.nextRunAt - Date.now()).toBeLessThanOrEqual(25 * 3600_000);

    const replaced = await rest(app, "PUT", "/v1/queues/reports/schedules/nightly", {
      cron: "0 0 1 1 *",
      payload: 2,
    });
    expect(replaced.body).toMatchObject({ timezone: "UTC", catchUp: "none", payload: 2 });
    await rest(app, "PUT", "/v1/queues/reports/schedules/hourly", { cron: "0 * * * *", payload: 1 });
    await rest(app, "PUT", "/v1/queues/other/schedules/hourly", { cron: "0 * * * *", payload: 1 });

    expect((await schedules(app, "reports")).map((s) => s.name)).toEqual(["hourly", "nightly"]);
    const c = t.client(QueueService, app.token);
    const listed = await c.listQueueSchedules({ queue: "reports" });
    expect(listed.schedules.map((s) => [s.name, s.cron])).toEqual([
      ["hourly", "0 * * * *"],
      ["nightly", "0 0 1 1 *"],
    ]);
    expect(listed.schedules.every((s) => s.nextRunAt !== undefined)).toBe(true);

    expect((await rest(app, "DELETE", "/v1/queues/reports/schedules/nightly")).status).toBe(200);
    const again = await rest(app, "DELETE", "/v1/queues/reports/schedules/nightly");
    expect(again.status).toBe(404);
    expect(again.body.error.code).toBe("not_found");
    await c.deleteQueueSchedule({ queue: "reports", name: "hourly" });
    expect(await schedules(app, "reports")).toEqual([]);
    expect((await schedules(app, "other")).length).toBe(1);
  });

  it("refuses bad input naming the field", async () => {
    const app = await t.createApp();
    const cases: [unknown, string][] = [
      [{ cron: "every minute", payload: 1 }, "cron"],
      [{ cron: "* * *", payload: 1 }, "cron"],
      [{ cron: "61 * * * *", payload: 1 }, "cron"],
      [{ cron: "* * * * *", timezone: "Mars/Olympus", payload: 1 }, "timezone"],
      [{ cron: "* * * * *", payload: 1, catchUp: "all" }, "catchUp"],
      [{ cron: "* * * * *" }, "payload"],
      [{ cron: "* * * * *", payload: 1, startAt: 2000, endAt: 1000 }, "endAt"],
      [{ cron: "* * * * *", payload: 1, every: 5 }, "every"],
      [{ payload: 1 }, "cron"],
    ];
    for (const [body, field] of cases) {
      const res = await rest(app, "PUT", "/v1/queues/q/schedules/s", body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.error.code).toBe("invalid_argument");
      expect(res.body.error.message, JSON.stringify(body)).toContain(field);
    }
    const badName = await rest(app, "PUT", "/v1/queues/q/schedules/-x", { cron: "* * * * *", payload: 1 });
    expect(badName.status).toBe(400);
    expect(badName.body.error.message).toContain("name");
    const events = await rest(app, "PUT", "/v1/queues/_events/schedules/s", { cron: "* * * * *", payload: 1 });
    expect(events.status).toBe(403);
    const c = t.client(QueueService, app.token);
    await expect(c.putQueueSchedule({ queue: "q", name: "s", cron: "nope", payload: undefined })).rejects.toThrow(
      /cron/,
    );
    expect(await schedules(app, "q")).toEqual([]);
  });

  it("puts one message a tick for a schedule ticking every second", async () => {
    const app = await t.createApp();
    const endAt = Date.now() + 4000;
    const put = await rest(app, "PUT", "/v1/queues/ticks/schedules/every-second", {
      cron: "* * * * * *",
      payload: { tick: true },
      endAt,
    });
    expect(put.status, JSON.stringify(put.body)).toBe(200);
    const first = put.body.nextRunAt as number;
    const expected = Math.floor(endAt / 1000) - first / 1000 + 1;
    expect(expected).toBeGreaterThanOrEqual(3);
    const got = await drain(t, app, "ticks", expected);
    const done = await ended(app, "ticks", "every-second");
    expect(done).toMatchObject({ fired: expected, skippedFull: 0, missed: 0 });
    // Nothing more came after the last tick.
    got.push(...(await drain(t, app, "ticks", 1, 1500)));
    expect(got.length).toBe(expected);
    expect(new Set(got.map((m) => m.id)).size).toBe(expected);
    expect(got.every((m) => JSON.stringify(m.payload) === '{"tick":true}')).toBe(true);
  }, 60_000);

  it("skips and counts a tick that finds the queue at its depth cap", async () => {
    const app = await t.createApp();
    await t.admin.updateApp({ appId: app.id, limits: { maxQueueDepth: 1 } });
    const put = await rest(app, "PUT", "/v1/queues/capped/schedules/s", {
      cron: "* * * * * *",
      payload: 1,
      endAt: Date.now() + 3000,
    });
    expect(put.status).toBe(200);
    const done = await ended(app, "capped", "s");
    expect(done.fired).toBe(1);
    expect(done.skippedFull).toBeGreaterThanOrEqual(1);
    expect((await rest(app, "GET", "/v1/queues")).body.queues[0]).toMatchObject({ name: "capped", depth: 1 });
  }, 60_000);

  it("puts no tick of a stopped app; they count as missed, and catchUp does not bring them back", async () => {
    const app = await t.createApp();
    const endAt = Date.now() + 6000;
    const put = await rest(app, "PUT", "/v1/queues/paused/schedules/s", {
      cron: "* * * * * *",
      payload: 1,
      catchUp: "one",
      endAt,
    });
    const expected = Math.floor(endAt / 1000) - (put.body.nextRunAt as number) / 1000 + 1;
    await app.stop();
    // An absence cannot be awaited: the app stays stopped for a few ticks.
    await new Promise((r) => setTimeout(r, 3000));
    await app.start();
    const done = await ended(app, "paused", "s");
    expect(done.missed).toBeGreaterThanOrEqual(2);
    expect(done.fired + done.missed).toBe(expected);
    const got = await drain(t, app, "paused", done.fired);
    got.push(...(await drain(t, app, "paused", 1, 1500)));
    expect(got.length).toBe(done.fired);
  }, 60_000);

  it("after downtime, catchUp none skips the missed ticks and catchUp one puts one message for them", async () => {
    const app = await t.createApp();
    for (const catchUp of ["none", "one"]) {
      const res = await rest(app, "PUT", `/v1/queues/cu-${catchUp}/schedules/yearly`, {
        cron: "0 0 1 1 *",
        payload: catchUp,
        catchUp,
      });
      expect(res.status).toBe(200);
    }
    // Downtime, as the ticker finds it: the next run left at 2023-01-01, years of ticks unput since.
    await sql`UPDATE queue_schedules SET next_run_at = '2023-01-01T00:00:00Z'
              WHERE app_id = ${app.id}`.execute(t.server.deps.db);
    const missedTicks = new Date().getUTCFullYear() - 2023 + 1;
    const caughtUp = async (queue: string) => {
      for (const until = Date.now() + 30_000; ;) {
        const s = (await schedules(app, queue))[0];
        if (s.nextRunAt! > Date.now()) return s;
        if (Date.now() > until) throw new Error(`${queue} not caught up`);
        await new Promise((r) => setTimeout(r, 100));
      }
    };
    expect(await caughtUp("cu-none")).toMatchObject({ fired: 0, missed: missedTicks });
    expect(await caughtUp("cu-one")).toMatchObject({ fired: 1, missed: missedTicks });
    expect((await drain(t, app, "cu-one", 2, 2500)).map((m) => m.payload)).toEqual(["one"]);
    expect(await drain(t, app, "cu-none", 1, 1500)).toEqual([]);
  }, 60_000);

  it("refuses the 101st schedule of an app (over all its queues), not the replacement of one it has", async () => {
    const app = await t.createApp();
    const body = { cron: "0 0 1 1 *", payload: 1 };
    for (let i = 0; i < 100; i += 10) {
      const puts = await Promise.all(
        Array.from({ length: 10 }, (_, j) => rest(app, "PUT", `/v1/queues/q${(i + j) % 3}/schedules/s${i + j}`, body)),
      );
      expect(puts.map((r) => r.status)).toEqual(Array(10).fill(200));
    }
    const refused = await rest(app, "PUT", "/v1/queues/q0/schedules/one-more", body);
    expect(refused.status).toBe(409);
    expect(refused.body.error.code).toBe("failed_precondition");
    expect(refused.body.error.message).toContain("100 schedules");
    expect((await rest(app, "PUT", "/v1/queues/q0/schedules/s0", { ...body, payload: 2 })).status).toBe(200);
    expect((await rest(app, "DELETE", "/v1/queues/q0/schedules/s0")).status).toBe(200);
    expect((await rest(app, "PUT", "/v1/queues/q0/schedules/one-more", body)).status).toBe(200);
  }, 60_000);
});
