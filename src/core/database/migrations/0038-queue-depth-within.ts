/**
 * `queue_depth_within(app, queue, room)`: what a put asks of the depth, which
 * is only whether it leaves `room`. It takes the queue's lock as
 * `queue_depth` (0024) does, then reads the queue's row count
 * (`queue_counts`, 0012): the depth is that count less the leased and the
 * expired messages, so a count within `room` is an upper bound of the depth
 * that answers the put, and is returned without counting those. Only a queue
 * whose rows exceed `room` is counted exactly (`queue_depth`), so a refusal
 * still says the exact depth.
 *
 * Counting the leased messages is a range scan of the line index over every
 * message in flight, with a visit to each row: with 4,000 leased (as in
 * bench:queues part 5) `queue_depth` took about 1.3 ms, the row count alone
 * 0.14 ms, and its cost grew with the messages in flight rather than with the
 * put.
 */
import { sql, type Kysely } from "kysely";

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE FUNCTION queue_depth_within(p_app_id uuid, p_queue text, p_room int) RETURNS int
    LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
      total bigint;
    BEGIN
      PERFORM pg_advisory_xact_lock(hashtextextended('queue:' || p_app_id || ':' || p_queue, 0));
      SELECT coalesce(sum(n), 0) INTO total FROM queue_counts WHERE app_id = p_app_id AND queue = p_queue;
      IF total <= p_room THEN
        RETURN greatest(total, 0)::int;
      END IF;
      RETURN queue_depth(p_app_id, p_queue);
    END $$`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP FUNCTION queue_depth_within(uuid, text, int)`.execute(db);
}
