/**
 * Message priorities (docs/queues.md "Priorities"): `queue_messages.priority`, 0 to 9, higher first among
 * the visible messages of a queue; 0 for every message put without one (and every message already stored).
 * The claim takes the prioritised ones through `queue_messages_priority_line`, a partial index of only the
 * rows above 0, so puts and claims of queues that never use priorities write and read no more than before;
 * the rest of the line stays on `queue_messages_line`.
 */
import { sql, type Kysely } from "kysely";

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE queue_messages ADD COLUMN priority smallint NOT NULL DEFAULT 0`.execute(db);
  await sql`
    CREATE INDEX queue_messages_priority_line ON queue_messages (app_id, queue, priority DESC, visible_at)
    WHERE priority > 0`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP INDEX queue_messages_priority_line`.execute(db);
  await sql`ALTER TABLE queue_messages DROP COLUMN priority`.execute(db);
}
