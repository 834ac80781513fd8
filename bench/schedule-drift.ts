/**
 * Part 7 of `bench:queues`: schedules firing 1,000 ticks a second (docs/queues.md "Schedules"), and how late
 * each tick's message is put. 10 apps × 100 schedules (the most an app may have), each `* * * * * *` (every
 * second), all starting at the same whole second a few seconds after they are made (`startAt`) and ending
 * `seconds` later (`endAt`). Once the last tick is due and put, the messages are read from the database: the
 * k-th message of a schedule (in put order) is its k-th tick, due at `startAt + k s`, and its drift is when
 * it was put minus that. "Put" is when a consumer could first have it: the commit of its transaction, which
 * PostgreSQL does not record (no `track_commit_timestamp`) but announces: the put's NOTIFY is delivered at
 * the commit, so this listens on the queues' channel and takes, for each message, the first notification of
 * its queue that arrived after its `visible_at` (the put statement's time; a queue's puts go one after the
 * other under its lock, so that notification is its own transaction's). The drift by `visible_at` alone is
 * printed beside it: the gap between the two is the time from the put statement to the commit. A tick not put at all
 * (missed: more than the ticker's lateness bound late; or skipped at the depth cap) is counted apart, and the
 * drifts are those of the schedules that put every tick (for the others the k-th message is not known to be
 * the k-th tick).
 */
import pg from "pg";
import { QUEUE_CHANNEL } from "../src/queues/queue-store.ts";
import { adminCall, jsonClient, log, NO_RATE_LIMITS } from "./support.ts";

const APPS = 10;
const SCHEDULES_PER_APP = 100;

interface ScheduleDrift {
  /** Ticks put a second over the run (the goal is 1,000). */
  ticksPerS: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  /** Ticks due that were not put (missed or skipped), and as the schedules counted them. */
  unput: number;
  missed: number;
  skipped: number;
  /** Schedules that put every tick (the drifts are theirs). */
  complete: number;
  /** The drift by the put statement's time alone (`visible_at`), before the commit. */
  statementP50Ms: number;
  statementP99Ms: number;
  /** Messages whose commit was not seen (no notification after them): their drift is their `visible_at`'s. */
  unseenCommits: number;
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

/** Runs the schedules for `seconds` on the service at `url` (database `databaseUrl`) and measures their drift. */
export async function scheduleDrift(
  url: string,
  adminToken: string,
  databaseUrl: string,
  seconds: number,
): Promise<ScheduleDrift> {
  const apps: { id: string; token: string }[] = [];
  for (let i = 0; i < APPS; i++) {
    const { app } = await adminCall(url, adminToken, "CreateApp", { name: `bench-ticks-${i}` });
    await adminCall(url, adminToken, "UpdateApp", {
      appId: app.id,
      limits: { maxQueueDepth: 1_000_000, ...NO_RATE_LIMITS },
    });
    const { token } = await adminCall(url, adminToken, "IssueToken", { appId: app.id });
    apps.push({ id: app.id, token });
  }
  // Every schedule starts at the same whole second, after all of them are made (an app's schedules are made one
  // at a time under its lock: the apps in parallel).
  const startAt = Math.ceil((Date.now() + 30_000) / 1000) * 1000;
  const endAt = startAt + seconds * 1000 - 1;
  // The commits, as the puts' notifications arrive (`instance|app|queue|visibleAtMs|count`): their times by app.
  const listener = new pg.Client({ connectionString: databaseUrl });
  await listener.connect();
  const commits = new Map<string, number[]>(apps.map((a) => [a.id, []]));
  listener.on("notification", (n) => {
    const at = Date.now();
    const [, appId, queue] = (n.payload ?? "").split("|");
    if (queue === "ticks") commits.get(appId)?.push(at);
  });
  await listener.query(`LISTEN ${QUEUE_CHANNEL}`);
  const made = performance.now();
  await Promise.all(
    apps.map(async (app) => {
      const client = jsonClient(url, app.token, 2);
      for (let s = 0; s < SCHEDULES_PER_APP; s++) {
        const res = await client.request("PUT", `/v1/queues/ticks/schedules/s${s}`, {
          cron: "* * * * * *",
          payload: { s },
          startAt,
          endAt,
        });
        if (res.status !== 200) throw new Error(`schedule: ${res.status} ${JSON.stringify(res.body)}`);
      }
      client.agent.destroy();
    }),
  );
  log(`    made ${APPS * SCHEDULES_PER_APP} schedules in ${((performance.now() - made) / 1000).toFixed(1)} s`);
  if (Date.now() >= startAt) log("    (the schedules were made after their start: the first ticks are late)");
  await new Promise((r) => setTimeout(r, Math.max(0, endAt - Date.now()) + 1000));
  const db = new pg.Client({ connectionString: databaseUrl });
  await db.connect();
  try {
    // Past the last tick: until every schedule has ended (its last tick put, skipped or missed), at most 60 s.
    const ids = apps.map((a) => a.id);
    const running = async () =>
      Number(
        (
          await db.query<{ n: string }>(
            `SELECT count(*) AS n FROM queue_schedules WHERE app_id = ANY($1::uuid[]) AND next_run_at IS NOT NULL`,
            [ids],
          )
        ).rows[0].n,
      );
    for (let waited = 0; (await running()) > 0 && waited < 60_000; waited += 500)
      await new Promise((r) => setTimeout(r, 500));
    const counts = (
      await db.query<{ missed: string; skipped: string }>(
        `SELECT coalesce(sum(missed), 0) AS missed, coalesce(sum(skipped_full), 0) AS skipped
         FROM queue_schedules WHERE app_id = ANY($1::uuid[])`,
        [ids],
      )
    ).rows[0];
    const { rows } = await db.query<{ app_id: string; payload: string; at_ms: string }>(
      `SELECT app_id, payload, (extract(epoch FROM visible_at) * 1000)::float8 AS at_ms
       FROM queue_messages WHERE app_id = ANY($1::uuid[]) AND queue = 'ticks'
       ORDER BY app_id, payload, visible_at, id`,
      [ids],
    );
    const drifts: number[] = [];
    const statementDrifts: number[] = [];
    let unseenCommits = 0;
    /** The first commit of `appId`'s queue at or after `atMs` (arrival times are in order). */
    const committedAt = (appId: string, atMs: number): number => {
      const times = commits.get(appId) ?? [];
      let lo = 0;
      let hi = times.length;
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (times[mid] < Math.floor(atMs)) lo = mid + 1;
        else hi = mid;
      }
      if (lo < times.length) return times[lo];
      unseenCommits++;
      return atMs;
    };
    const bySchedule = new Map<string, { at: number; committed: number }[]>();
    for (const r of rows) {
      const key = `${r.app_id}|${r.payload}`;
      let list = bySchedule.get(key);
      if (!list) bySchedule.set(key, (list = []));
      list.push({ at: Number(r.at_ms), committed: committedAt(r.app_id, Number(r.at_ms)) });
    }
    const due = APPS * SCHEDULES_PER_APP * seconds;
    for (const times of bySchedule.values())
      if (times.length === seconds)
        times.forEach(({ at, committed }, k) => {
          drifts.push(committed - (startAt + k * 1000));
          statementDrifts.push(at - (startAt + k * 1000));
        });
    drifts.sort((a, b) => a - b);
    statementDrifts.sort((a, b) => a - b);
    const put = rows.length;
    return {
      ticksPerS: put / seconds,
      p50Ms: percentile(drifts, 50),
      p99Ms: percentile(drifts, 99),
      maxMs: drifts.at(-1) ?? NaN,
      unput: Math.max(0, due - put),
      missed: Number(counts.missed),
      skipped: Number(counts.skipped),
      complete: drifts.length / seconds,
      statementP50Ms: percentile(statementDrifts, 50),
      statementP99Ms: percentile(statementDrifts, 99),
      unseenCommits,
    };
  } finally {
    await db.end();
    await listener.end();
  }
}
