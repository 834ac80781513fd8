/**
 * The stored schedules of `queue_schedules` (migration 0033) and their ticks. `fireDue` is the ticker's
 * one pass: it claims due schedules with `FOR UPDATE SKIP LOCKED` and, in the same transaction, puts each
 * tick's message and moves `next_run_at` on (one statement for the whole batch), so a tick is put exactly
 * once whatever the number of instances (each row is claimed by one of them) and whatever is killed (the
 * put and the move commit together or not at all).
 */
import { sql } from "kysely";
import { effectiveLimits } from "../core/apps/apps.ts";
import { PlatformError } from "../core/errors.ts";
import { PREPARED, intArray, jsonTextArray, uuidArray, type Db } from "../core/database/index.ts";
import { nextRun } from "./schedule-cron.ts";
import { QUEUE_CHANNEL } from "./queue-store.ts";
import { toDate, toDateOrNull, type When } from "./store/row-values.ts";

export type CatchUp = "none" | "one";

export interface ScheduleInput {
  cron: string;
  timezone: string;
  /** The message's payload as JSON text. */
  payload: string;
  startAt: Date | null;
  endAt: Date | null;
  catchUp: CatchUp;
}

export interface StoredSchedule extends ScheduleInput {
  appId: string;
  queue: string;
  name: string;
  /** The next tick not yet put; null once past `endAt`. */
  nextRunAt: Date | null;
  lastRunAt: Date | null;
  /** Ticks put (a catch-up message counts once). */
  fired: number;
  /** Ticks not put because the queue was at its depth cap. */
  skippedFull: number;
  /** Ticks that passed while the app was stopped, or while no instance ran (more than `LATE_TICK_MS` late). */
  missed: number;
  createdAt: Date;
}

/**
 * The channel on which setting a schedule announces its first tick (epoch ms), so that every instance's
 * ticker sets its timer for it without waiting for its next look.
 */
export const SCHEDULE_CHANNEL = "pb_schedule_set";

/** A tick up to this late is still put on its own; older ones are missed, and `catchUp` decides. */
const LATE_TICK_MS = 30_000;
/** Ticks one schedule puts in one pass at most; the rest follow on the next pass. */
const TICKS_PER_PASS = 10;
/** Missed ticks counted one by one at most; past that the schedule jumps to now. */
const MISSED_COUNT_CAP = 10_000;

type Row = {
  app_id: string;
  queue: string;
  name: string;
  cron: string;
  timezone: string;
  payload: string;
  start_at: When | null;
  end_at: When | null;
  catch_up: CatchUp;
  next_run_at: When | null;
  last_run_at: When | null;
  fired: number | string;
  skipped_full: number | string;
  missed: number | string;
  created_at: When;
};

function fromRow(r: Row): StoredSchedule {
  return {
    appId: r.app_id,
    queue: r.queue,
    name: r.name,
    cron: r.cron,
    timezone: r.timezone,
    payload: r.payload,
    startAt: toDateOrNull(r.start_at),
    endAt: toDateOrNull(r.end_at),
    catchUp: r.catch_up,
    nextRunAt: toDateOrNull(r.next_run_at),
    lastRunAt: toDateOrNull(r.last_run_at),
    fired: Number(r.fired),
    skippedFull: Number(r.skipped_full),
    missed: Number(r.missed),
    createdAt: toDate(r.created_at),
  };
}

/** The first tick of a schedule set at `now`: not before `startAt`. */
export function firstRun(s: ScheduleInput, now: Date): Date | null {
  const from = s.startAt && s.startAt.getTime() > now.getTime() ? new Date(s.startAt.getTime() - 1) : now;
  return nextRun(s.cron, s.timezone, from, s.endAt);
}

/** The first tick strictly after a time, of a schedule's cron and zone (`nextRun` without `endAt`), or null. */
type After = (cron: string, timezone: string, from: Date) => Date | null;

/**
 * `nextRun` for one pass of the ticker, remembered by cron, zone and time: the schedules due together mostly
 * share their cron and their due time, and a cron's next tick in a zone costs far more than a lookup. A cron
 * the library no longer reads (checked when set, so only after an upgrade) gives null: it ends its schedule
 * instead of failing every pass, and with it every other schedule's ticks.
 */
function nextRunMemo(): After {
  const known = new Map<string, Date | null>();
  return (cron, timezone, from) => {
    const key = `${cron}\u0000${timezone}\u0000${from.getTime()}`;
    let next = known.get(key);
    if (next === undefined) {
      try {
        next = nextRun(cron, timezone, from);
      } catch {
        next = null;
      }
      known.set(key, next);
    }
    return next;
  };
}

/** What one tick pass does to one due schedule: messages to put, ticks missed, and its next run. */
interface TickPlan {
  /** Messages to put: the due ticks (at most `TICKS_PER_PASS`), plus one for `catchUp: "one"` after missed ticks. */
  puts: number;
  missed: number;
  next: Date | null;
}

/**
 * The ticks of one due schedule at `now` (ms): a stopped app's pass unput and count as missed, and `catchUp`
 * does not bring them back; ticks more than `LATE_TICK_MS` late were missed (no instance ran), and `catchUp`
 * decides whether one message stands for them; the others are put, `TICKS_PER_PASS` at most.
 */
export function planTicks(
  s: Pick<ScheduleInput, "cron" | "timezone" | "endAt" | "catchUp"> & { nextRunAt: Date | null },
  running: boolean,
  now: number,
  afterTick: After = nextRunMemo(),
): TickPlan {
  const after = (from: Date): Date | null => {
    const next = afterTick(s.cron, s.timezone, from);
    return next && s.endAt && next.getTime() > s.endAt.getTime() ? null : next;
  };
  let due = s.nextRunAt;
  let puts = 0;
  let missed = 0;
  if (!running) {
    while (due && due.getTime() <= now && missed < MISSED_COUNT_CAP) {
      missed++;
      due = after(due);
    }
    if (due && due.getTime() <= now) due = after(new Date(now));
  }
  if (due && now - due.getTime() > LATE_TICK_MS) {
    const lateBefore = now - LATE_TICK_MS;
    while (due && due.getTime() < lateBefore && missed < MISSED_COUNT_CAP) {
      missed++;
      due = after(due);
    }
    if (due && due.getTime() < lateBefore) due = after(new Date(lateBefore - 1));
    if (s.catchUp === "one") puts++;
  }
  for (let n = 0; due && due.getTime() <= now && n < TICKS_PER_PASS; n++) {
    puts++;
    due = after(due);
  }
  return { puts, missed, next: due };
}

/** What one pass of the ticker did. */
interface TickReport {
  /** Schedules claimed: a full batch means more may be due. */
  claimed: number;
  fired: number;
  skippedFull: number;
  missed: number;
  /** The queues put on, to wake their local consumers once committed. */
  queues: { appId: string; queue: string }[];
  /** When the next tick not yet put is due (ms), as this pass saw the schedules; null when none is. */
  upcoming: number | null;
}

/** A claimed schedule, or (the columns null) none, with when the next one not due yet is. */
type ClaimRow = {
  app_id: string | null;
  queue: string;
  name: string;
  cron: string;
  timezone: string;
  payload: string;
  end_at: When | null;
  catch_up: CatchUp;
  next_run_at: When | null;
  limits: Record<string, number> | null;
  status: string;
  now: When;
  upcoming: When | null;
};

/**
 * Names, queue names and times as `text[]`, parted by U+001E as `jsonTextArray` parts JSON: none of them can
 * hold a control character.
 */
const textArray = (texts: readonly string[]) => jsonTextArray(texts);

export interface ScheduleStore {
  /** Creates or replaces one schedule; refused past `maxPerApp` schedules of the app. */
  put(appId: string, queue: string, name: string, input: ScheduleInput, maxPerApp: number): Promise<StoredSchedule>;
  list(appId: string, queue?: string): Promise<StoredSchedule[]>;
  delete(appId: string, queue: string, name: string): Promise<boolean>;
  /**
   * One pass over at most `limit` due schedules (see the file's comment); `notify` makes a put's wake-up.
   * Of the schedules due at one time, it takes those of the first apps and queues, or with `fromEnd` those of
   * the last: two passes run at once then claim schedules of different queues, and so do not wait for each
   * other's queue locks.
   */
  fireDue(limit: number, notify: (appId: string, queue: string) => string, fromEnd?: boolean): Promise<TickReport>;
}

export function createScheduleStore(database: Db): ScheduleStore {
  return {
    async put(appId, queue, name, input, maxPerApp) {
      return database.transaction().execute(async (trx) => {
        // Serialises the app's schedule changes, so two creates cannot both pass the count.
        await sql`SELECT pg_advisory_xact_lock(hashtextextended(${`schedules:${appId}`}, 0))`.execute(trx);
        const { rows: counted } = await sql<{ n: number | string; mine: number | string }>`
          SELECT count(*) AS n,
                 count(*) FILTER (WHERE queue = ${queue} AND name = ${name}) AS mine
          FROM queue_schedules WHERE app_id = ${appId}`.execute(trx);
        if (Number(counted[0].mine) === 0 && Number(counted[0].n) >= maxPerApp) {
          throw new PlatformError("failed_precondition", `the app has ${maxPerApp} schedules, its limit`, {
            details: [`schedules: ${counted[0].n} of ${maxPerApp}`],
          });
        }
        const next = firstRun(input, new Date());
        const { rows } = await sql<Row>`
          INSERT INTO queue_schedules (app_id, queue, name, cron, timezone, payload, start_at, end_at, catch_up, next_run_at)
          VALUES (${appId}, ${queue}, ${name}, ${input.cron}, ${input.timezone}, ${input.payload}, ${input.startAt},
                  ${input.endAt}, ${input.catchUp}, ${next})
          ON CONFLICT (app_id, queue, name) DO UPDATE SET
            cron = excluded.cron, timezone = excluded.timezone, payload = excluded.payload,
            start_at = excluded.start_at, end_at = excluded.end_at, catch_up = excluded.catch_up,
            next_run_at = excluded.next_run_at, updated_at = now()
          RETURNING *`.execute(trx);
        // Every instance's ticker learns the first tick at the commit (see `SCHEDULE_CHANNEL`).
        if (next) await sql`SELECT pg_notify(${SCHEDULE_CHANNEL}, ${String(next.getTime())})`.execute(trx);
        return fromRow(rows[0]);
      });
    },

    async list(appId, queue) {
      const { rows } = await sql<Row>`
        SELECT * FROM queue_schedules
        WHERE app_id = ${appId} AND (${queue ?? null}::text IS NULL OR queue = ${queue ?? null})
        ORDER BY queue, name`.execute(database);
      return rows.map(fromRow);
    },

    async delete(appId, queue, name) {
      const { numAffectedRows } = await sql`
        DELETE FROM queue_schedules WHERE app_id = ${appId} AND queue = ${queue} AND name = ${name}`.execute(database);
      return Number(numAffectedRows ?? 0) > 0;
    },

    async fireDue(limit, notify, fromEnd = false) {
      const report: TickReport = { claimed: 0, fired: 0, skippedFull: 0, missed: 0, queues: [], upcoming: null };
      await database.transaction().execute(async (trx) => {
        // The due schedules, claimed; and, claimed or not, when the next one not yet due is, for the ticker's
        // timer. The claim is the outer join's right side so that the statement answers even when none is due.
        const { rows } = await sql<ClaimRow>`${PREPARED}
          WITH claimed AS (
            SELECT s.app_id, s.queue, s.name, s.cron, s.timezone, s.payload, s.end_at, s.catch_up, s.next_run_at,
                   a.limits, a.status
            FROM queue_schedules s JOIN apps a ON a.id = s.app_id
            WHERE s.next_run_at <= statement_timestamp()
            ORDER BY s.next_run_at, ${fromEnd ? sql`s.app_id DESC, s.queue DESC` : sql`s.app_id, s.queue`}
            LIMIT ${limit}
            FOR UPDATE OF s SKIP LOCKED
          )
          SELECT claimed.*, statement_timestamp() AS now,
                 (SELECT min(next_run_at) FROM queue_schedules WHERE next_run_at > statement_timestamp()) AS upcoming
          FROM (SELECT 1) one LEFT JOIN claimed ON true`.execute(trx);
        const upcoming = rows[0]?.upcoming == null ? null : toDate(rows[0].upcoming).getTime();
        const claimed = rows.filter((r): r is ClaimRow & { app_id: string } => r.app_id !== null);
        report.claimed = claimed.length;
        if (claimed.length === 0) {
          report.upcoming = upcoming;
          return;
        }
        const now = toDate(claimed[0].now).getTime();
        const after = nextRunMemo();
        const plans = claimed.map((row) => {
          const limits = effectiveLimits(row.limits);
          return {
            row,
            ttl: limits.messageTtlSeconds,
            depthBelow: limits.maxQueueDepth,
            ...planTicks(
              {
                cron: row.cron,
                timezone: row.timezone,
                endAt: toDateOrNull(row.end_at),
                catchUp: row.catch_up,
                nextRunAt: toDateOrNull(row.next_run_at),
              },
              row.status === "running",
              now,
              after,
            ),
          };
        });
        // The rows of \`msgs\` below: each schedule's ord (from 1) once per message it puts, or once if none.
        const rowOrd: number[] = [];
        const rowReal: number[] = [];
        plans.forEach((p, j) => {
          for (let i = 0; i < Math.max(p.puts, 1); i++) {
            rowOrd.push(j + 1);
            rowReal.push(i < p.puts ? 1 : 0);
          }
        });
        // Every tick of the batch put and every schedule moved on in one statement, then the commit: the puts and
        // the moves commit together or not at all.
        const { rows: counted } = await sql<{
          app_id: string | null;
          queue: string;
          fired: number;
          skipped: number;
        }>`${PREPARED}
          WITH src AS (
            SELECT k.* FROM unnest(
              ${uuidArray(plans.map((p) => p.row.app_id))}, ${textArray(plans.map((p) => p.row.queue))},
              ${textArray(plans.map((p) => p.row.name))}, ${jsonTextArray(plans.map((p) => p.row.payload))},
              ${intArray(plans.map((p) => p.puts))}, ${intArray(plans.map((p) => p.ttl))},
              ${intArray(plans.map((p) => p.depthBelow))}, ${intArray(plans.map((p) => p.missed))},
              ${textArray(plans.map((p) => (p.next ? p.next.toISOString() : "")))},
              ${textArray(plans.map((p) => notify(p.row.app_id, p.row.queue)))}
            ) WITH ORDINALITY AS k (app_id, queue, name, payload, puts, ttl, depth_below, missed, next_run, notify, ord)
          ), depth AS (
            -- Each queue's lock (queue_depth_within takes it, as every put does) in one order, the same on
            -- every instance, so two tickers never wait on each other in a circle; its count after the lock,
            -- exact only when the row count leaves no room for all of the batch's ticks (as a put's: the
            -- leased messages are not counted on every tick).
            SELECT l.app_id, l.queue, queue_depth_within(l.app_id, l.queue, l.room) AS n, clock_timestamp() AS t
            FROM (SELECT app_id, queue, (min(depth_below) - sum(puts))::int AS room FROM src WHERE puts > 0
                  GROUP BY app_id, queue ORDER BY app_id, queue OFFSET 0) l
          ), msgs AS (
            -- A row per message, and one for a schedule that puts none (its row of the update below); rn,
            -- the message's place among those of its queue in this batch, says whether it fits under the cap.
            -- (The rows are listed, not made by generate_series, whose estimate of a thousand rows a call made
            -- the planner compile the statement, costing more than running it.)
            SELECT s.ord, s.app_id, s.queue, s.name, s.payload, s.ttl, s.notify, s.next_run, s.missed, d.t,
                   m.real = 1 AS real,
                   sum(m.real) OVER (PARTITION BY s.app_id, s.queue ORDER BY m.i) AS rn,
                   s.depth_below - d.n AS room
            FROM unnest(${intArray(rowOrd)}, ${intArray(rowReal)}) WITH ORDINALITY AS m (ord, real, i)
            JOIN src s ON s.ord = m.ord
            LEFT JOIN depth d ON d.app_id = s.app_id AND d.queue = s.queue
          ), lined AS (
            SELECT *, real AND rn <= room AS fits FROM msgs
          ), ins AS (
            -- One microsecond apart, in the batch's order: a schedule's catch-up comes before its tick.
            INSERT INTO queue_messages (app_id, queue, payload, visible_at, expires_at)
            SELECT app_id, queue, payload, t + (rn - 1) * interval '1 microsecond', t + make_interval(secs => ttl)
            FROM lined WHERE fits
            RETURNING 1
          ), counted AS (
            SELECT app_id, queue, name, next_run, missed, (count(*) FILTER (WHERE fits))::int AS fired,
                   (count(*) FILTER (WHERE real AND NOT fits))::int AS skipped
            FROM lined GROUP BY ord, app_id, queue, name, next_run, missed
          ), moved AS (
            UPDATE queue_schedules s SET next_run_at = nullif(c.next_run, '')::timestamptz,
              last_run_at = CASE WHEN c.fired > 0 THEN statement_timestamp() ELSE s.last_run_at END,
              fired = s.fired + c.fired, skipped_full = s.skipped_full + c.skipped, missed = s.missed + c.missed
            FROM counted c
            WHERE s.app_id = c.app_id AND s.queue = c.queue AND s.name = c.name
            RETURNING 1
          ), notified AS (
            SELECT pg_notify(${QUEUE_CHANNEL}, min(notify) || '|' || count(*)) FROM lined WHERE fits
            GROUP BY app_id, queue
          )
          SELECT c.app_id, c.queue, c.fired, c.skipped,
                 (SELECT count(*) FROM ins) AS inserted, (SELECT count(*) FROM moved) AS moved,
                 (SELECT count(*) FROM notified) AS notified
          FROM (SELECT 1) one LEFT JOIN counted c ON true`.execute(trx);
        const woken = new Set<string>();
        for (const c of counted) {
          if (c.app_id === null) continue;
          report.fired += Number(c.fired);
          report.skippedFull += Number(c.skipped);
          const key = `${c.app_id}|${c.queue}`;
          if (Number(c.fired) > 0 && !woken.has(key)) {
            woken.add(key);
            report.queues.push({ appId: c.app_id, queue: c.queue });
          }
        }
        for (const p of plans) {
          report.missed += p.missed;
          if (p.next && (report.upcoming === null || p.next.getTime() < report.upcoming))
            report.upcoming = p.next.getTime();
        }
        if (upcoming !== null && (report.upcoming === null || upcoming < report.upcoming)) report.upcoming = upcoming;
      });
      return report;
    },
  };
}
