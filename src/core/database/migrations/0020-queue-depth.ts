/**
 * `queue_depth(app, queue)`: how many messages wait on one queue, counted the
 * way every put counts before it inserts, so that the depth cap holds between
 * the two kinds of put:
 * - Serialised puts (`putSerialized`, `putAll`) hold the queue's advisory lock
 *   (`queue:<app>:<queue>`) and count in the next statement, so they see every
 *   put that committed before them.
 * - Batched puts (`putMany`, far below the cap) are one statement without a
 *   transaction of their own. Counting with the statement's own snapshot, they
 *   missed a serialised put still open (a batch filling the queue), and when
 *   they had waited for one, its rows: single puts then went past the cap.
 *
 * The function first takes the same lock in shared mode, so batched puts never
 * run beside a serialised one (they wait for its commit, and it waits for
 * theirs) while they still run beside each other; then, being VOLATILE, it
 * counts with a snapshot of its own taken after the lock, at the clock's time
 * (not the transaction's start, which is before the wait): a lease that lapsed
 * during the wait counts as waiting again. In a serialised put, which already
 * holds the lock exclusively, taking it shared is a no-op.
 *
 * The count itself is 0012's: the queue's row count (`queue_counts`) less its
 * leased or held-back rows and its expired rows not yet swept (among the
 * oldest 10,000 of all apps, as the listing counts them).
 */
import { sql, type Kysely } from "kysely";

/** The function's text, with the lock it takes: shared here (0024 takes it exclusively, with its own copy). */
const queueDepthFunction = (lock: "pg_advisory_xact_lock" | "pg_advisory_xact_lock_shared") => sql`
  CREATE OR REPLACE FUNCTION queue_depth(p_app_id uuid, p_queue text) RETURNS int
  LANGUAGE plpgsql VOLATILE AS $$
  DECLARE
    t timestamptz;
  BEGIN
    PERFORM ${sql.raw(lock)}(hashtextextended('queue:' || p_app_id || ':' || p_queue, 0));
    t := clock_timestamp();
    RETURN greatest(0,
      (SELECT coalesce(sum(n), 0) FROM queue_counts WHERE app_id = p_app_id AND queue = p_queue)
      - (SELECT count(*) FROM queue_messages
         WHERE app_id = p_app_id AND queue = p_queue AND visible_at > t AND lease_until > t)
      - (SELECT count(*) FROM (
           SELECT app_id, queue FROM queue_messages
           WHERE expires_at <= t AND NOT coalesce(lease_until > t AND visible_at > t, false)
           ORDER BY expires_at LIMIT 10000
         ) e WHERE e.app_id = p_app_id AND e.queue = p_queue)
    )::int;
  END $$`;

export async function up(db: Kysely<unknown>): Promise<void> {
  await queueDepthFunction("pg_advisory_xact_lock_shared").execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP FUNCTION queue_depth(uuid, text)`.execute(db);
}
