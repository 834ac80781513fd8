import { sql, type Kysely } from "kysely";

/**
 * When a service token was last used, for the operator. Coarse on purpose:
 * it is written only when a token is looked up (not on every request, since
 * found tokens are remembered) and at most about once a minute per token, so
 * it costs no write per request. The daily usage history needs no table of
 * its own: `quota_usage` already keeps one row per app, day and counter.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE app_tokens ADD COLUMN last_used_at timestamptz`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE app_tokens DROP COLUMN last_used_at`.execute(db);
}
