/**
 * Consumer rate limits (docs/queues.md "Rate limits"):
 * - `queue_policies.max_deliveries_per_second`: the queue's limit; NULL means none.
 * - `queue_rate_buckets`: one token bucket per limited queue, shared by every instance. A claim takes
 *   tokens first with one conditional `UPDATE ... RETURNING` (refilled by the time since `refilled_at`,
 *   at most the burst), and gives back what it did not use. `granted` is what the last take granted
 *   (read back by that statement's `RETURNING`). Rows are made on a queue's first limited claim.
 */
import { sql, type Kysely } from "kysely";

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE queue_policies ADD COLUMN max_deliveries_per_second double precision`.execute(db);
  await sql`
    CREATE TABLE queue_rate_buckets (
      app_id uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
      queue text NOT NULL,
      tokens double precision NOT NULL,
      granted integer NOT NULL DEFAULT 0,
      refilled_at timestamptz NOT NULL,
      PRIMARY KEY (app_id, queue)
    )`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE queue_rate_buckets`.execute(db);
  await sql`ALTER TABLE queue_policies DROP COLUMN max_deliveries_per_second`.execute(db);
}
