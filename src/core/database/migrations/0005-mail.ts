import { sql, type Kysely } from "kysely";

/**
 * The mail log: one row per send attempt, by either provider. For the outbox
 * the row is the message itself (the text is kept); for SES the text is not
 * kept, only what an operator needs to trace a message.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE TABLE mail_log (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      app_id uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
      to_address text NOT NULL,
      from_address text NOT NULL,
      subject text NOT NULL,
      body_text text,
      status text NOT NULL CHECK (status IN ('sent', 'stored', 'failed')),
      provider text NOT NULL,
      provider_message_id text NOT NULL DEFAULT '',
      created_at timestamptz NOT NULL DEFAULT clock_timestamp()
    )`.execute(db);
  await sql`CREATE INDEX mail_log_app_newest ON mail_log (app_id, id DESC)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE mail_log`.execute(db);
}
