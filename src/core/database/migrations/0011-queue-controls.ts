/**
 * Queue controls owned by the app (docs/queues.md "Retries, dead letters and
 * deduplication"):
 * - `queue_messages.lease_until`: the end of the current lease, apart from
 *   `visible_at` (when the message may next be claimed). They were one column;
 *   now a lapsed lease can be followed by a retry delay (`visible_at` =
 *   `lease_until` + the policy's backoff), and a nack can end a lease while
 *   hiding the message for a while (`lease_until` NULL, `visible_at` later):
 *   such a message is waiting (it counts in depth, as a delayed put does), and
 *   no receipt acks it. Leases held now keep their end.
 * - `queue_policies`: one row per app and queue whose app set a policy; every
 *   NULL column means "the default" (the app's limits, or docs/queues.md). A
 *   row outlives its queue being empty; it goes with its app (housekeeping).
 * - `queue_dedup`: the dedup keys of puts, each with the first message's id
 *   and expiry, kept `until` the end of the dedup window (the message may be
 *   acked long before). Swept by housekeeping once past `until`.
 */
import { sql, type Kysely } from "kysely";

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE queue_messages ADD COLUMN lease_until timestamptz`.execute(db);
  await sql`UPDATE queue_messages SET lease_until = visible_at WHERE deliveries > 0 AND visible_at > now()`.execute(db);
  await sql`
    CREATE TABLE queue_policies (
      app_id uuid NOT NULL,
      queue text NOT NULL,
      max_deliveries integer,
      dead_letter_queue text,
      retry_delay_seconds integer,
      retry_backoff double precision,
      max_retry_delay_seconds integer,
      lease_seconds integer,
      dedup_window_seconds integer,
      updated_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (app_id, queue)
    )`.execute(db);
  await sql`
    CREATE TABLE queue_dedup (
      app_id uuid NOT NULL,
      queue text NOT NULL,
      dedup_key text NOT NULL,
      message_id uuid NOT NULL,
      message_expires_at timestamptz NOT NULL,
      until timestamptz NOT NULL,
      PRIMARY KEY (app_id, queue, dedup_key)
    )`.execute(db);
  await sql`CREATE INDEX queue_dedup_until ON queue_dedup (until)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE queue_dedup`.execute(db);
  await sql`DROP TABLE queue_policies`.execute(db);
  await sql`ALTER TABLE queue_messages DROP COLUMN lease_until`.execute(db);
}
