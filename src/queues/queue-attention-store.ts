/**
 * The cross-app reads of the queue tables, for /metrics and the operator's
 * overview (`queue-overview-store.ts`): totals, and each app's figures. Apart
 * from the queue store (`store/`) because they serve no app: every other statement on
 * these tables is scoped by one app.
 */
import { sql } from "kysely";
import type { Db } from "../core/database/index.ts";
import { EVENTS_QUEUE } from "./queue-limits.ts";
import type { QueueTables } from "./queue-store.ts";

export interface QueueAttentionRow {
  appId: string;
  queue: string;
  deadLetters: number;
  /** Age in seconds of the oldest waiting message, when it is older than the bound; else 0. */
  oldestAgeSeconds: number;
}

/** Cross-app figures of the queue tables for /metrics, each read in bounded time. */
export interface QueueTotals {
  /** Messages stored (waiting, leased or held back), from the per-queue counts. */
  messages: number;
  /** Dead letters stored, counted up to `DEAD_LETTERS_COUNTED`. */
  deadLetters: number;
  /** Seconds the longest-waiting message of any queue (the platform's `_events` aside) has been consumable; 0 when none waits. */
  oldestWaitingSeconds: number;
}

/** Dead letters beyond this many are not counted (the count would cost a scan of them all). */
export const DEAD_LETTERS_COUNTED = 100_000;
/** Queues whose head of line is read, at most (one index probe each). */
export const QUEUES_PROBED = 10_000;

/**
 * The consumable heads of at most `QUEUES_PROBED` queues' lines (`q` the queue, `head` its earliest unexpired
 * `visible_at`, one index probe each), `_events` left out: what both reads take the oldest waiting age from.
 */
const PROBED_HEADS = sql`
  FROM (SELECT DISTINCT app_id, queue FROM queue_counts WHERE queue <> ${EVENTS_QUEUE} LIMIT ${QUEUES_PROBED}) q
  CROSS JOIN LATERAL (
    SELECT visible_at FROM queue_messages m
    WHERE m.app_id = q.app_id AND m.queue = q.queue AND m.expires_at > now()
    ORDER BY visible_at LIMIT 1
  ) head
  WHERE head.visible_at <= now()`;

/**
 * One statement, bounded whatever the backlog: the message count sums the
 * small `queue_counts` table; the dead letters are counted up to a cap; and
 * the oldest waiting message is the earliest `visible_at` at the head of each
 * queue's line (the line index's first row per queue, skipping the expired
 * rows the next sweep removes), so a message taken back after a lapsed lease
 * counts from when it could be consumed again. `_events`, which apps need
 * not read, is left out of the age.
 */
export async function queueTotals(database: Db): Promise<QueueTotals> {
  const db = database.withTables<QueueTables>();
  const { rows } = await sql<{ messages: string | number; dead: string | number; oldest: string | number }>`
    SELECT
      (SELECT coalesce(sum(n), 0) FROM queue_counts) AS messages,
      (SELECT count(*) FROM (SELECT 1 FROM queue_dead_letters LIMIT ${DEAD_LETTERS_COUNTED}) d) AS dead,
      (SELECT coalesce(max(extract(epoch FROM now() - head.visible_at)), 0) ${PROBED_HEADS}) AS oldest`.execute(db);
  const row = rows[0];
  return {
    messages: Number(row.messages),
    deadLetters: Number(row.dead),
    oldestWaitingSeconds: Math.max(0, Number(row.oldest)),
  };
}

/** One app's figures of the queue tables for /metrics' per-app series. */
export interface AppQueueFigures {
  app: string;
  messages: number;
  deadLetters: number;
  oldestWaitingSeconds: number;
}

/**
 * Every app's queue figures in one statement, with the bounds of `queueTotals`: messages from the small
 * `queue_counts` table, dead letters counted up to `DEAD_LETTERS_COUNTED` in all, the head of at most
 * `QUEUES_PROBED` queues' lines read (one index probe each). One row per app that has any; the caller
 * keeps the top ones (`foldTopApps`).
 */
export async function appQueueFigures(database: Db): Promise<AppQueueFigures[]> {
  const db = database.withTables<QueueTables>();
  const { rows } = await sql<{
    app: string;
    messages: string | number;
    dead: string | number;
    oldest: string | number;
  }>`
    SELECT a.name AS app, sum(f.messages) AS messages, sum(f.dead) AS dead, max(f.oldest) AS oldest FROM (
      SELECT app_id, sum(n) AS messages, 0::bigint AS dead, 0::float8 AS oldest FROM queue_counts GROUP BY app_id
      UNION ALL
      SELECT app_id, 0, count(*), 0
        FROM (SELECT app_id FROM queue_dead_letters LIMIT ${DEAD_LETTERS_COUNTED}) d GROUP BY app_id
      UNION ALL
      SELECT q.app_id, 0, 0, max(extract(epoch FROM now() - head.visible_at))::float8 ${PROBED_HEADS}
        GROUP BY q.app_id
    ) f
    JOIN apps a ON a.id = f.app_id
    GROUP BY a.name`.execute(db);
  return rows.map((r) => ({
    app: r.app,
    messages: Number(r.messages),
    deadLetters: Number(r.dead),
    oldestWaitingSeconds: Math.max(0, Number(r.oldest)),
  }));
}
