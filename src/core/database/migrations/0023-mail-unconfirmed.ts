/**
 * `unconfirmed`, a status of the mail log: a send SES failed (5xx) or went
 * silent on after taking the message. It was logged `failed`, which says the
 * message did not go, while it may have: an operator reading the log could
 * send it again, and the person would get it twice.
 */
import { sql, type Kysely } from "kysely";

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE mail_log DROP CONSTRAINT mail_log_status_check`.execute(db);
  await sql`ALTER TABLE mail_log ADD CONSTRAINT mail_log_status_check
    CHECK (status IN ('sent', 'stored', 'failed', 'unconfirmed'))`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE mail_log DROP CONSTRAINT mail_log_status_check`.execute(db);
  await sql`UPDATE mail_log SET status = 'failed' WHERE status = 'unconfirmed'`.execute(db);
  await sql`ALTER TABLE mail_log ADD CONSTRAINT mail_log_status_check
    CHECK (status IN ('sent', 'stored', 'failed'))`.execute(db);
}
