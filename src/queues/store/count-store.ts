/**
 * Counters and what is read from them: the app's queues with their depth, in flight and dead letters
 * (from `queue_counts`, migration 0012, not from the messages); when each queue's next message becomes
 * visible; the hourly activity (migration 0019); and the compaction of count rows (the dead-letter counts'
 * of migration 0028 too).
 */
import { sql } from "kysely";
import { PREPARED } from "../../core/database/index.ts";
import type { QueueDbs } from "./queue-tables.ts";
import { HEAD_OF_GROUP } from "./sql-fragments.ts";
import { toDate, toDateOrNull, type Count, type When } from "./row-values.ts";
import type { QueueActivityHour, QueueStats } from "./queue-types.ts";

/**
 * The expired waiting messages not yet deleted by the expiry sweep (which runs
 * every 15 s), of every app: read through the expiry index (the ORDER BY makes
 * it the plan), at most 10,000 of them, so the counts below can leave
 * them out at the cost of the few that expired since the last sweep.
 */
const EXPIRED = sql`(
  SELECT app_id, queue FROM queue_messages
  WHERE expires_at <= now() AND NOT coalesce(lease_until > now() AND visible_at > now(), false)
  ORDER BY expires_at LIMIT ${sql.lit(10_000)}
)`;

/** Waiting messages at the head of a line among which the listing looks for the oldest. */
const OLDEST_SCAN = 16;

/** One slot of a queue's count or dead-letter count (`n` an int8: its text). */
type SlotRow = { app_id: string; queue: string; slot: number; n: Count };

/** One queue of an app's listing (`in_flight` and `dead_letters` are int4 counts, `total` an int8 sum). */
type ListedRow = {
  queue: string;
  total: Count | null;
  in_flight: number | null;
  oldest_at: When | null;
  dead_letters: number;
};

/** When one queue's next message is visible. */
type NextVisibleRow = { app_id: string; queue: string; at: When };

/** One hour of a queue's activity (sums of int8: their text). */
type ActivityRow = { at: When; puts: Count; acks: Count };

/** Counts, the listing, next visibility and activity. */
export interface CountStore {
  /**
   * Folds the count slots (`queue_counts`) of up to `limit` queues into their lowest slot, and deletes
   * those of queues whose slots sum to 0; how many queues. Locked as `compactDeadLetterCounts` locks, so
   * a put or ack meanwhile waits for the fold (or lands beside it) and its count is kept.
   */
  compactCounts(limit: number): Promise<number>;
  /**
   * Folds the dead-letter count slots (`dead_letter_counts`, migration 0028) of up to `limit` queues into
   * their lowest slot, and deletes those of queues whose slots sum to 0; how many queues. The slots are
   * locked first and only rows already locked change, so a dead letter added or removed meanwhile waits
   * for the fold (or, into a slot not yet there, lands beside it) and its count is kept.
   */
  compactDeadLetterCounts(limit: number): Promise<number>;
  /** The app's queues with something on them: waiting, in flight, or dead letters. */
  list(appId: string): Promise<QueueStats[]>;
  /** For the wake-up safety net: of the given queues, the earliest time each has a message visible (past or future). */
  nextVisible(keys: { appId: string; queue: string }[]): Promise<{ appId: string; queue: string; at: Date }[]>;
  /** One queue's puts and acks per UTC hour, the last `hours` hours (this one last), hours without any as zeros. */
  activity(appId: string, queue: string, hours: number): Promise<QueueActivityHour[]>;
}

/**
 * Folds the count slots of up to `limit` queues of a slotted count table (the queue counts or the
 * dead-letter counts) into their lowest slot, and deletes those of queues whose slots sum to 0; how
 * many queues.
 *
 * The slots are locked in (app, queue, slot) order, the order of the triggers' upserts, and then
 * nothing else is locked: folding into a slot of its own (slot 0, as the queue counts once did) could
 * wait for a slot a concurrent trigger inserted while that trigger waits for a slot locked here, and
 * PostgreSQL would abort one of the two. Only rows already locked change, so an upsert meanwhile waits
 * for the fold (or, into a slot not yet there, lands beside it) and its count is kept.
 */
async function compactSlots(
  db: QueueDbs["db"],
  table: "queue_counts" | "dead_letter_counts",
  limit: number,
): Promise<number> {
  return db.transaction().execute(async (trx) => {
    const counts = sql.table(table);
    const { rows } = await sql<SlotRow>`
      SELECT app_id, queue, slot, n FROM ${counts}
      WHERE (app_id, queue) IN (
        SELECT app_id, queue FROM ${counts} GROUP BY app_id, queue HAVING count(*) > 1 OR sum(n) = 0 LIMIT ${limit}
      )
      ORDER BY app_id, queue, slot
      FOR UPDATE`.execute(trx);
    const queues = new Map<string, { appId: string; queue: string; slots: number[]; sum: bigint }>();
    for (const r of rows) {
      const key = `${r.app_id}\u0000${r.queue}`;
      const q = queues.get(key) ?? { appId: r.app_id, queue: r.queue, slots: [], sum: 0n };
      q.slots.push(r.slot);
      q.sum += BigInt(r.n);
      queues.set(key, q);
    }
    // The rows read are the locked ones' current values; the sums cannot change before the commit.
    const gone = [...queues.values()].flatMap((q) =>
      (q.sum === 0n ? q.slots : q.slots.slice(1)).map((slot) => ({ ...q, slot })),
    );
    const kept = [...queues.values()].filter((q) => q.sum !== 0n);
    if (gone.length > 0)
      await sql`
        DELETE FROM ${counts} c
        USING unnest(${gone.map((g) => g.appId)}::uuid[], ${gone.map((g) => g.queue)}::text[],
                     ${gone.map((g) => g.slot)}::smallint[]) AS g (app_id, queue, slot)
        WHERE c.app_id = g.app_id AND c.queue = g.queue AND c.slot = g.slot`.execute(trx);
    if (kept.length > 0)
      await sql`
        UPDATE ${counts} c SET n = k.n
        FROM unnest(${kept.map((k) => k.appId)}::uuid[], ${kept.map((k) => k.queue)}::text[],
                    ${kept.map((k) => k.slots[0])}::smallint[], ${kept.map((k) => String(k.sum))}::bigint[])
             AS k (app_id, queue, slot, n)
        WHERE c.app_id = k.app_id AND c.queue = k.queue AND c.slot = k.slot`.execute(trx);
    return queues.size;
  });
}

/**
 * Counters and what is read from them: the app's queues with their depth, in flight and dead
 * letters; when each queue's next message becomes visible; the hourly activity; and the compaction
 * of count rows.
 */
export function createCountStore({ db }: QueueDbs): CountStore {
  return {
    compactCounts: (limit) => compactSlots(db, "queue_counts", limit),
    compactDeadLetterCounts: (limit) => compactSlots(db, "dead_letter_counts", limit),
    async list(appId) {
      // From the counts (one row per queue and slot), not the messages: each
      // queue then costs a few index probes, whatever its backlog. `oldestAt`
      // is the oldest among the first `OLDEST_SCAN` waiting messages of the
      // line (the oldest of all, unless leases lapsed behind younger puts). A
      // queue holding only dead letters is listed too (FULL JOIN), so the
      // operator sees it.
      const { rows } = await sql<ListedRow>`${PREPARED}
        WITH c AS (
          SELECT queue, sum(n) AS total FROM queue_counts WHERE app_id = ${appId} GROUP BY queue HAVING sum(n) > 0
        ), m AS (
          SELECT c.queue, c.total,
                 (SELECT count(*)::int FROM queue_messages q
                  WHERE q.app_id = ${appId} AND q.queue = c.queue AND q.visible_at > now() AND q.lease_until > now()) AS in_flight,
                 (SELECT min(h.enqueued_at) FROM (
                    SELECT q.enqueued_at FROM queue_messages q
                    WHERE q.app_id = ${appId} AND q.queue = c.queue AND q.expires_at > now()
                      AND NOT coalesce(q.lease_until > now() AND q.visible_at > now(), false)
                    ORDER BY q.visible_at LIMIT ${OLDEST_SCAN}) h) AS oldest_at
          FROM c
        ), e AS (
          SELECT queue, count(*)::int AS n FROM ${EXPIRED} x WHERE x.app_id = ${appId} GROUP BY queue
        ), d AS (
          SELECT queue, count(*)::int AS n FROM queue_dead_letters WHERE app_id = ${appId} GROUP BY queue
        )
        SELECT coalesce(m.queue, d.queue) AS queue, m.total - coalesce(e.n, 0) AS total, m.in_flight, m.oldest_at,
               coalesce(d.n, 0) AS dead_letters
        FROM m LEFT JOIN e ON e.queue = m.queue FULL JOIN d ON d.queue = m.queue
        ORDER BY 1`.execute(db);
      return rows
        .map((r) => {
          const inFlight = Number(r.in_flight ?? 0);
          const depth = Number(r.total ?? 0) - inFlight;
          return {
            name: r.queue,
            depth,
            inFlight,
            oldestAt: depth > 0 ? toDateOrNull(r.oldest_at) : null,
            deadLetters: Number(r.dead_letters),
          };
        })
        .filter((q) => q.depth > 0 || q.inFlight > 0 || q.deadLetters > 0);
    },
    async nextVisible(keys) {
      if (keys.length === 0) return [];
      const { rows } = await sql<NextVisibleRow>`
        SELECT k.app_id, k.queue, v.at
        FROM unnest(${keys.map((k) => k.appId)}::uuid[], ${keys.map((k) => k.queue)}::text[]) AS k (app_id, queue)
        CROSS JOIN LATERAL (
          SELECT visible_at AS at FROM queue_messages q
          WHERE app_id = k.app_id AND queue = k.queue AND expires_at > now() AND ${HEAD_OF_GROUP}
          ORDER BY visible_at LIMIT 1
        ) v`.execute(db);
      return rows.map((r) => ({ appId: r.app_id, queue: r.queue, at: toDate(r.at) }));
    },
    async activity(appId, queue, hours) {
      // The hours come from the database's clock, as the counts' hours do.
      const { rows } = await sql<ActivityRow>`${PREPARED}
        WITH h AS (
          SELECT generate_series(date_trunc('hour', now(), 'UTC') - make_interval(hours => ${hours - 1}),
                                 date_trunc('hour', now(), 'UTC'), interval '1 hour') AS at
        )
        SELECT h.at, coalesce(sum(a.puts), 0) AS puts, coalesce(sum(a.acks), 0) AS acks
        FROM h LEFT JOIN queue_activity a ON a.app_id = ${appId} AND a.queue = ${queue} AND a.hour = h.at
        GROUP BY h.at ORDER BY h.at`.execute(db);
      return rows.map((r) => ({ at: toDate(r.at), puts: Number(r.puts), acks: Number(r.acks) }));
    },
  };
}
