/**
 * Hourly put and ack counts per queue, for the dashboard's activity table and
 * chart (AdminService `GetQueueActivity`), kept exactly and cheaply the way
 * `queue_counts` (0012) is:
 * - `queue_activity` holds, per app, queue, UTC hour and slot
 *   (`pg_backend_pid() % 16`, so concurrent statements on one queue seldom
 *   wait on one row), how many messages arrived (`puts`) and were acked
 *   (`acks`). An hour's figure is the sum of its slots.
 * - Puts: a statement-level trigger on `queue_messages` inserts, one upsert per
 *   statement and queue whatever the rows, in the statement's own transaction,
 *   so a batch put of 1,000 counts 1,000 and a put that rolls back counts none.
 *   Every row that arrives on a queue counts: single and batch puts, messages
 *   moved to a dead-letter queue and dead letters replayed.
 * - Acks: a DELETE cannot tell an ack from an expiry, a purge or a move to the
 *   dead letters, so the ack statement itself adds its deleted rows (a CTE over
 *   its RETURNING, same statement, same transaction): a receipt acked by two
 *   racing calls deletes one row, counted once.
 * - Rows of hours older than two days are pruned by the queues' housekeeping.
 */
import { sql, type Kysely } from "kysely";

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE TABLE queue_activity (
      app_id uuid NOT NULL,
      queue text NOT NULL,
      hour timestamptz NOT NULL,
      slot smallint NOT NULL,
      puts bigint NOT NULL DEFAULT 0,
      acks bigint NOT NULL DEFAULT 0,
      PRIMARY KEY (app_id, queue, hour, slot)
    )`.execute(db);
  await sql`CREATE INDEX queue_activity_hour ON queue_activity (hour)`.execute(db);
  await sql`
    CREATE FUNCTION queue_activity_put() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO queue_activity (app_id, queue, hour, slot, puts)
      SELECT app_id, queue, date_trunc('hour', now(), 'UTC'), (pg_backend_pid() % 16)::smallint, count(*)
      FROM added_rows
      GROUP BY app_id, queue ORDER BY app_id, queue
      ON CONFLICT (app_id, queue, hour, slot) DO UPDATE SET puts = queue_activity.puts + excluded.puts;
      RETURN NULL;
    END $$`.execute(db);
  // Named to fire before `queue_counts_insert` (triggers fire in name order),
  // as the ack statement also touches `queue_activity` before `queue_counts`:
  // one lock order for both tables.
  await sql`
    CREATE TRIGGER queue_activity_insert AFTER INSERT ON queue_messages
    REFERENCING NEW TABLE AS added_rows FOR EACH STATEMENT EXECUTE FUNCTION queue_activity_put()`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TRIGGER queue_activity_insert ON queue_messages`.execute(db);
  await sql`DROP FUNCTION queue_activity_put()`.execute(db);
  await sql`DROP TABLE queue_activity`.execute(db);
}
