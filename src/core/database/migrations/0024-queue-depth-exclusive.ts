/**
 * `queue_depth(app, queue)` takes the queue's lock exclusively, so that the
 * depth cap holds whatever the number of instances.
 *
 * 0020 took it in shared mode: batched puts (`putMany`) waited for a
 * serialised one but ran beside each other, each counting with a snapshot
 * that could not see the others' uncommitted rows. Each instance sends at most
 * one batch per queue at a time, so the cap was kept by refusing batches
 * within a slack of it, which holds only while few enough instances send a
 * full batch at the same moment (three, with a slack of 64 and batches of 32);
 * a fourth could add up to 32 past the cap.
 *
 * Taken exclusively, a batch counts with a snapshot taken after every put
 * before it on the queue committed, on any instance: the count is exact, the
 * slack is gone, and batches go up to the cap itself. What it costs is that
 * the batches of one queue from several instances run one after the other
 * (each instance still sends up to 32 puts in one statement); puts on
 * different queues do not wait for each other.
 */
import { sql, type Kysely } from "kysely";

/**
 * 0020's function text, copied here rather than imported so that this
 * migration stays as it was applied whatever becomes of 0020's file: only the
 * lock differs (exclusive here, shared in 0020 and in `down`).
 */
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
  await queueDepthFunction("pg_advisory_xact_lock").execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await queueDepthFunction("pg_advisory_xact_lock_shared").execute(db);
}
