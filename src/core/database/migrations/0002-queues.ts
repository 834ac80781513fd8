import { sql, type Kysely } from "kysely";

/**
 * The queue facility's one table. It is the hot table: every message is
 * inserted once, updated once per delivery and deleted once, so it carries
 * only what the operations need and three indexes:
 * - the primary key, for ack (one conditional DELETE by id);
 * - `(app_id, queue, visible_at)`, the line: claim takes the first visible
 *   row of one app's queue in order, listing groups by app and queue;
 * - `expires_at`, so expiry deletes in bounded batches without a full scan.
 * No foreign key to `apps`: a key check takes a share lock on the app's row
 * for every put, and concurrent puts of one app would then contend on it;
 * messages of a deleted app are removed by the expiry sweep instead.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE TABLE queue_messages (
      id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
      app_id uuid NOT NULL,
      queue text NOT NULL,
      payload text NOT NULL,
      enqueued_at timestamptz NOT NULL DEFAULT now(),
      visible_at timestamptz NOT NULL,
      expires_at timestamptz NOT NULL,
      deliveries integer NOT NULL DEFAULT 0
    )`.execute(db);
  await sql`CREATE INDEX queue_messages_line ON queue_messages (app_id, queue, visible_at)`.execute(db);
  await sql`CREATE INDEX queue_messages_expiry ON queue_messages (expires_at)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE queue_messages`.execute(db);
}
