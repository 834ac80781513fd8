/**
 * Queue retries that spread out, and failures that say why (docs/queues.md "Queue policies" and
 * "Dead letters"):
 * - `queue_policies.retry_jitter`: the share of each retry hold drawn at random (0 to 1); NULL
 *   means the default, which depends on whether the queue set its own `retry_delay_seconds`.
 * - `queue_messages.failure_reason`: why the message's last delivery failed: the `reason` of a
 *   nack, or `lease expired` when a lease lapsed; NULL while none failed.
 * - `queue_dead_letters.failure_reason`: the same, kept when the message died.
 * Existing rows get NULL: their failures happened before reasons were kept.
 */
import { sql, type Kysely } from "kysely";

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE queue_policies ADD COLUMN retry_jitter double precision`.execute(db);
  await sql`ALTER TABLE queue_messages ADD COLUMN failure_reason text`.execute(db);
  await sql`ALTER TABLE queue_dead_letters ADD COLUMN failure_reason text`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE queue_dead_letters DROP COLUMN failure_reason`.execute(db);
  await sql`ALTER TABLE queue_messages DROP COLUMN failure_reason`.execute(db);
  await sql`ALTER TABLE queue_policies DROP COLUMN retry_jitter`.execute(db);
}
