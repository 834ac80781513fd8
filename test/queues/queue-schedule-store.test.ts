/**
 * The ticker's pass over due schedules (docs/queues.md "Schedules"), at the store: one statement puts the
 * ticks of many schedules on several queues and moves every schedule on, so a queue's depth cap is shared
 * by the ticks of one pass in their order (those past it are skipped and counted), a schedule late by a few
 * seconds puts each tick once and in order, and one whose ticks were all missed moves on in the same
 * statement without a message. `planTicks`, the arithmetic of one schedule, is checked on a fixed clock.
 */
import { sql } from "kysely";
import { describe, expect, it } from "vitest";
import { createScheduleStore, planTicks } from "../../src/queues/queue-schedule-store.ts";
import { useTestServer } from "../support/harness.ts";

const t = useTestServer();

describe("planTicks", () => {
  const now = Date.parse("2026-05-01T12:00:00Z");
  const everySecond = { cron: "* * * * * *", timezone: "UTC", endAt: null };
  const at = (ms: number) => new Date(now + ms);

  it("puts the due ticks, ten a pass at most, and names the next", () => {
    expect(planTicks({ ...everySecond, catchUp: "none", nextRunAt: at(-2000) }, true, now)).toEqual({
      puts: 3,
      missed: 0,
      next: at(1000),
    });
    expect(planTicks({ ...everySecond, catchUp: "none", nextRunAt: at(-15_000) }, true, now)).toEqual({
      puts: 10,
      missed: 0,
      next: at(-5000),
    });
  });

  it("counts ticks more than 30 s late as missed; catchUp one puts one message for them", () => {
    const late = { ...everySecond, nextRunAt: at(-60_000) };
    expect(planTicks({ ...late, catchUp: "none" }, true, now)).toEqual({ puts: 10, missed: 30, next: at(-20_000) });
    expect(planTicks({ ...late, catchUp: "one" }, true, now)).toEqual({ puts: 11, missed: 30, next: at(-20_000) });
  });

  it("puts nothing for a stopped app: its due ticks are missed, whatever catchUp says", () => {
    expect(planTicks({ ...everySecond, catchUp: "one", nextRunAt: at(-4000) }, false, now)).toEqual({
      puts: 0,
      missed: 5,
      next: at(1000),
    });
  });

  it("ends at endAt", () => {
    expect(planTicks({ ...everySecond, endAt: at(0), catchUp: "none", nextRunAt: at(-1000) }, true, now)).toEqual({
      puts: 2,
      missed: 0,
      next: null,
    });
  });
});

describe("fireDue", () => {
  it("shares a queue's cap (6) among the ticks of one pass, puts a late schedule's ticks in order, moves every schedule on", async () => {
    const app = await t.createApp();
    await t.admin.updateApp({ appId: app.id, limits: { maxQueueDepth: 6 } });
    const db = t.server.deps.db;
    const yearly = { cron: "0 0 1 1 *", payload: "x" };
    const names: [string, string][] = [
      ["full", "a0"],
      ["full", "a1"],
      ["full", "a2"],
      ["full", "seconds"],
      ["free", "seconds"],
      ["gone", "minutes"],
    ];
    for (const [queue, name] of names) {
      const res = await t.request("PUT", `/v1/queues/${queue}/schedules/${name}`, {
        token: app.token,
        body: { ...yearly, payload: `${queue}/${name}` },
      });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
    }
    // Due now, as after a pause of the tickers: three one-tick schedules and a per-second one six ticks late on
    // `full` (cap 6), the same per-second one alone on `free`, and on `gone` a per-minute one whose hour of ticks
    // was missed (catchUp none: nothing to put).
    await sql`
      UPDATE queue_schedules SET
        next_run_at = CASE WHEN name = 'seconds' THEN date_trunc('second', now()) - interval '5 seconds'
                           WHEN name = 'minutes' THEN date_trunc('minute', now()) - interval '1 hour'
                           ELSE now() - interval '1 second' END,
        cron = CASE name WHEN 'seconds' THEN '* * * * * *' WHEN 'minutes' THEN '0 * * * * *' ELSE cron END,
        end_at = CASE WHEN name = 'seconds' THEN date_trunc('second', now()) END
      WHERE app_id = ${app.id}`.execute(db);
    // This test's passes race the server's own ticker: whichever claims a schedule, each tick is put once.
    const store = createScheduleStore(db);
    for (let pass = 0; pass < 50; pass++) {
      await store.fireDue(100, () => `test|${app.id}|x|0`, pass % 2 === 1);
      const { rows } = await sql<{ n: number }>`
        SELECT count(*)::int AS n FROM queue_schedules WHERE app_id = ${app.id} AND next_run_at <= now()`.execute(db);
      if (rows[0].n === 0) break;
    }
    const { rows: schedules } = await sql<{
      queue: string;
      name: string;
      fired: number;
      skipped_full: number;
      missed: number;
      next_run_at: Date | null;
    }>`SELECT queue, name, fired::int, skipped_full::int, missed::int, next_run_at
       FROM queue_schedules WHERE app_id = ${app.id} ORDER BY queue, name`.execute(db);
    const byName = Object.fromEntries(schedules.map((s) => [`${s.queue}/${s.name}`, s]));
    const { rows: messages } = await sql<{ queue: string; payload: string }>`
      SELECT queue, payload FROM queue_messages WHERE app_id = ${app.id} ORDER BY queue, visible_at, id`.execute(db);
    const on = (queue: string) => messages.filter((m) => m.queue === queue).map((m) => JSON.parse(m.payload));

    // `free`: six ticks, six messages, the schedule ended.
    expect(byName["free/seconds"]).toMatchObject({ fired: 6, skipped_full: 0, missed: 0, next_run_at: null });
    expect(on("free")).toEqual(Array(6).fill("free/seconds"));
    // `full`: nine ticks due, six put (the cap), three skipped; every message counted by its schedule.
    const full = ["a0", "a1", "a2", "seconds"].map((n) => byName[`full/${n}`]);
    expect(full.reduce((sum, s) => sum + s.fired, 0)).toBe(6);
    expect(full.reduce((sum, s) => sum + s.fired + s.skipped_full, 0)).toBe(9);
    expect(on("full").length).toBe(6);
    for (const s of full) expect(on("full").filter((p) => p === `full/${s.name}`).length).toBe(s.fired);
    expect(byName["full/seconds"].next_run_at).toBeNull();
    for (const n of ["a0", "a1", "a2"]) expect(byName[`full/${n}`].next_run_at!.getTime()).toBeGreaterThan(Date.now());
    // `gone`: the hour's ticks missed (the last 30 s of them still put on their own), moved on to the next minute.
    const gone = byName["gone/minutes"];
    // From an hour before this minute's start to it: 61 ticks (62 if a minute began during the test).
    expect(gone.fired + gone.missed).toBeGreaterThanOrEqual(61);
    expect(gone.fired + gone.missed).toBeLessThanOrEqual(62);
    expect(gone.missed).toBeGreaterThanOrEqual(60);
    expect(on("gone").length).toBe(gone.fired);
    expect(gone.next_run_at!.getTime()).toBeGreaterThan(Date.now() - 1000);
  }, 60_000);

  it("counts a queue's leased messages out of its cap, as a put does: a tick fits beside them", async () => {
    const app = await t.createApp();
    await t.admin.updateApp({ appId: app.id, limits: { maxQueueDepth: 3 } });
    const db = t.server.deps.db;
    // Three messages, all leased: the queue's row count (3) leaves no room for a tick, its depth (0) does.
    for (let i = 0; i < 3; i++) {
      const put = await t.request("POST", "/v1/queues/held", { token: app.token, body: { payload: i } });
      expect(put.status).toBe(200);
      const got = await t.request("POST", "/v1/queues/held/consume", { token: app.token, body: { leaseSeconds: 300 } });
      expect(got.body.message.payload).toBe(i);
    }
    const res = await t.request("PUT", "/v1/queues/held/schedules/tick", {
      token: app.token,
      body: { cron: "0 0 1 1 *", payload: "tick" },
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    // Two ticks due (a per-second schedule two seconds late, ending then).
    await sql`
      UPDATE queue_schedules SET cron = '* * * * * *', next_run_at = date_trunc('second', now()) - interval '1 second',
        end_at = date_trunc('second', now())
      WHERE app_id = ${app.id}`.execute(db);
    const store = createScheduleStore(db);
    for (let pass = 0; pass < 20; pass++) {
      await store.fireDue(100, () => `test|${app.id}|x|0`);
      const { rows } = await sql<{ n: number }>`
        SELECT count(*)::int AS n FROM queue_schedules WHERE app_id = ${app.id} AND next_run_at IS NOT NULL`.execute(
        db,
      );
      if (rows[0].n === 0) break;
    }
    const { rows } = await sql<{ fired: number; skipped_full: number }>`
      SELECT fired::int, skipped_full::int FROM queue_schedules WHERE app_id = ${app.id}`.execute(db);
    expect(rows).toEqual([{ fired: 2, skipped_full: 0 }]);
    const { rows: stored } = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM queue_messages WHERE app_id = ${app.id} AND queue = 'held'`.execute(db);
    expect(stored[0].n).toBe(5);
  }, 60_000);
});
