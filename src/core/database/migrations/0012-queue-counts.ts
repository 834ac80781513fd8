/**
 * Per-queue message counts kept beside the messages, so that a put's depth
 * check and the queue listing cost the same with 50 or 50,000 messages
 * waiting (they counted the waiting rows, a scan that grew with the backlog):
 * - `queue_counts` holds, per app and queue, how many rows `queue_messages`
 *   has (waiting, leased or held back alike), in slots: a statement adds to the
 *   slot of its connection (`pg_backend_pid() % 16`), so concurrent puts and
 *   acks on one queue seldom wait on one counter row. A queue's count is the
 *   sum of its slots.
 * - Statement-level triggers with transition tables keep it: one upsert per
 *   statement and queue, whatever the rows, in the statement's own transaction,
 *   so the count is exactly the rows committed, through concurrency, aborts and
 *   crashes alike. Rows are locked in (app, queue) order, so two statements
 *   touching the same queues cannot deadlock on them.
 * - The waiting count is then this count minus the leased (and held-back) rows,
 *   found through the line index as the rows whose `visible_at` is ahead: few.
 */
import { sql, type Kysely } from "kysely";

export async function up(db: Kysely<unknown>): Promise<void> {
  // No put or ack runs between the count below and the triggers.
  await sql`LOCK TABLE queue_messages IN SHARE ROW EXCLUSIVE MODE`.execute(db);
  await sql`
    CREATE TABLE queue_counts (
      app_id uuid NOT NULL,
      queue text NOT NULL,
      slot smallint NOT NULL,
      n bigint NOT NULL,
      PRIMARY KEY (app_id, queue, slot)
    )`.execute(db);
  await sql`
    CREATE FUNCTION queue_counts_added() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO queue_counts (app_id, queue, slot, n)
      SELECT app_id, queue, (pg_backend_pid() % 16)::smallint, count(*) FROM added_rows
      GROUP BY app_id, queue ORDER BY app_id, queue
      ON CONFLICT (app_id, queue, slot) DO UPDATE SET n = queue_counts.n + excluded.n;
      RETURN NULL;
    END $$`.execute(db);
  await sql`
    CREATE FUNCTION queue_counts_removed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO queue_counts (app_id, queue, slot, n)
      SELECT app_id, queue, (pg_backend_pid() % 16)::smallint, -count(*) FROM removed_rows
      GROUP BY app_id, queue ORDER BY app_id, queue
      ON CONFLICT (app_id, queue, slot) DO UPDATE SET n = queue_counts.n + excluded.n;
      RETURN NULL;
    END $$`.execute(db);
  await sql`
    CREATE TRIGGER queue_counts_insert AFTER INSERT ON queue_messages
    REFERENCING NEW TABLE AS added_rows FOR EACH STATEMENT EXECUTE FUNCTION queue_counts_added()`.execute(db);
  await sql`
    CREATE TRIGGER queue_counts_delete AFTER DELETE ON queue_messages
    REFERENCING OLD TABLE AS removed_rows FOR EACH STATEMENT EXECUTE FUNCTION queue_counts_removed()`.execute(db);
  await sql`
    INSERT INTO queue_counts (app_id, queue, slot, n)
    SELECT app_id, queue, 0, count(*) FROM queue_messages GROUP BY app_id, queue`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TRIGGER queue_counts_delete ON queue_messages`.execute(db);
  await sql`DROP TRIGGER queue_counts_insert ON queue_messages`.execute(db);
  await sql`DROP FUNCTION queue_counts_removed()`.execute(db);
  await sql`DROP FUNCTION queue_counts_added()`.execute(db);
  await sql`DROP TABLE queue_counts`.execute(db);
}
