/**
 * Ordered message groups (docs/queues.md "Ordered groups"): `queue_messages.group_key`, null for every
 * message put without one (and every message already stored), and `group_seq`, the put's place in its
 * group, drawn from `queue_group_seq` by the put statement (which holds the queue's lock, so the sequence
 * follows the order in which a queue's puts commit). Only the head of a group, its lowest `group_seq`
 * still stored, is claimable: the claim asks `queue_messages_group_line`, a partial index of only the rows
 * with a group, whether a lower one of the group is stored, so queues without groups write and read no more
 * than before. A dead letter keeps the group it was in (`queue_dead_letters.group_key`).
 */
import { sql, type Kysely } from "kysely";

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`CREATE SEQUENCE queue_group_seq`.execute(db);
  await sql`ALTER TABLE queue_messages ADD COLUMN group_key text, ADD COLUMN group_seq bigint`.execute(db);
  await sql`
    CREATE INDEX queue_messages_group_line ON queue_messages (app_id, queue, group_key, group_seq)
    WHERE group_key IS NOT NULL`.execute(db);
  await sql`ALTER TABLE queue_dead_letters ADD COLUMN group_key text`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE queue_dead_letters DROP COLUMN group_key`.execute(db);
  await sql`DROP INDEX queue_messages_group_line`.execute(db);
  await sql`ALTER TABLE queue_messages DROP COLUMN group_seq, DROP COLUMN group_key`.execute(db);
  await sql`DROP SEQUENCE queue_group_seq`.execute(db);
}
