/**
 * The stored schedules of `queue_schedules` (migration 0033) and their ticks. `fireDue` is the ticker's
 * one pass: it claims due schedules with `FOR UPDATE SKIP LOCKED` and, in the same transaction, puts each
 * tick's message and moves `next_run_at` on, so a tick is put exactly once whatever the number of
 * instances (each row is claimed by one of them) and whatever is killed (the put and the move commit
 * together or not at all).
 */
import { sql } from "kysely";
import { effectiveLimits } from "../core/apps/apps.ts";
import { PlatformError } from "../core/errors.ts";
import { transactionAsDb, type Db } from "../core/database/index.ts";
import { nextRun } from "./schedule-cron.ts";
import { createQueueStore } from "./queue-store.ts";
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

/** What one pass of the ticker did. */
interface TickReport {
  /** Schedules claimed: a full batch means more may be due. */
  claimed: number;
  fired: number;
  skippedFull: number;
  missed: number;
  /** The queues put on, to wake their local consumers once committed. */
  queues: { appId: string; queue: string }[];
}

export interface ScheduleStore {
  /** Creates or replaces one schedule; refused past `maxPerApp` schedules of the app. */
  put(appId: string, queue: string, name: string, input: ScheduleInput, maxPerApp: number): Promise<StoredSchedule>;
  list(appId: string, queue?: string): Promise<StoredSchedule[]>;
  delete(appId: string, queue: string, name: string): Promise<boolean>;
  /** One pass over at most `limit` due schedules (see the file's comment); `notify` makes a put's wake-up. */
  fireDue(limit: number, notify: (appId: string, queue: string) => string): Promise<TickReport>;
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

    async fireDue(limit, notify) {
      const report: TickReport = { claimed: 0, fired: 0, skippedFull: 0, missed: 0, queues: [] };
      await database.transaction().execute(async (trx) => {
        const { rows } = await sql<Row & { limits: Record<string, number> | null; status: string; now: When }>`
          SELECT s.*, a.limits, a.status, statement_timestamp() AS now
          FROM queue_schedules s JOIN apps a ON a.id = s.app_id
          WHERE s.next_run_at <= statement_timestamp()
          ORDER BY s.next_run_at
          LIMIT ${limit}
          FOR UPDATE OF s SKIP LOCKED`.execute(trx);
        report.claimed = rows.length;
        const queues = createQueueStore(transactionAsDb(trx));
        for (const row of rows) {
          const s = fromRow(row);
          const limits = effectiveLimits(row.limits);
          const now = toDate(row.now).getTime();
          // A cron the library no longer reads (checked when set, so only after an upgrade) ends its schedule
          // (no next run) instead of failing every pass, and with it every other schedule's ticks.
          const after = (from: Date): Date | null => {
            try {
              return nextRun(s.cron, s.timezone, from, s.endAt);
            } catch {
              return null;
            }
          };
          let due = s.nextRunAt;
          let fired = 0;
          let skippedFull = 0;
          let missed = 0;
          const putOne = async () => {
            const result = await queues.putHere({
              appId: s.appId,
              queue: s.queue,
              payload: s.payload,
              delaySeconds: 0,
              ttlSeconds: limits.messageTtlSeconds,
              depthBelow: limits.maxQueueDepth,
              notify: notify(s.appId, s.queue),
            });
            if (result.inserted) fired++;
            else skippedFull++;
          };
          if (row.status !== "running") {
            // A stopped app's ticks pass unput, counted as missed; `catchUp` does not bring them back.
            while (due && due.getTime() <= now && missed < MISSED_COUNT_CAP) {
              missed++;
              due = after(due);
            }
            if (due && due.getTime() <= now) due = after(new Date(now));
          }
          // Ticks older than LATE_TICK_MS were missed (no instance ran).
          if (due && now - due.getTime() > LATE_TICK_MS) {
            const lateBefore = new Date(now - LATE_TICK_MS);
            while (due && due.getTime() < lateBefore.getTime() && missed < MISSED_COUNT_CAP) {
              missed++;
              due = after(due);
            }
            if (due && due.getTime() < lateBefore.getTime()) {
              due = after(new Date(lateBefore.getTime() - 1));
            }
            if (s.catchUp === "one") await putOne();
          }
          for (let n = 0; due && due.getTime() <= now && n < TICKS_PER_PASS; n++) {
            await putOne();
            due = after(due);
          }
          await sql`
            UPDATE queue_schedules SET next_run_at = ${due},
              last_run_at = CASE WHEN ${fired}::int > 0 THEN statement_timestamp() ELSE last_run_at END,
              fired = fired + ${fired}::int, skipped_full = skipped_full + ${skippedFull}::int,
              missed = missed + ${missed}::int
            WHERE app_id = ${s.appId} AND queue = ${s.queue} AND name = ${s.name}`.execute(trx);
          report.fired += fired;
          report.skippedFull += skippedFull;
          report.missed += missed;
          if (fired > 0) report.queues.push({ appId: s.appId, queue: s.queue });
        }
      });
      return report;
    },
  };
}
