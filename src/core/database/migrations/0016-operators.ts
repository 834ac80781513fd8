import { sql, type Kysely } from "kysely";

/**
 * Named operators of the admin API, each with a role and their own tokens
 * (stored only as SHA-256, like service tokens). The bootstrap `ADMIN_TOKEN`
 * is not a row: it is the built-in operator "owner". A token change notifies
 * `pb_auth_changed` (migration 0006) so every instance forgets what it
 * remembered of it. An operator's last use is its tokens' latest one.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE TABLE operators (
      id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
      name text NOT NULL UNIQUE,
      role text NOT NULL CHECK (role IN ('admin', 'viewer')),
      disabled boolean NOT NULL DEFAULT false,
      created_at timestamptz NOT NULL DEFAULT now()
    )`.execute(db);
  await sql`
    CREATE TABLE operator_tokens (
      id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
      operator_id uuid NOT NULL REFERENCES operators (id) ON DELETE CASCADE,
      token_hash text NOT NULL UNIQUE,
      label text NOT NULL DEFAULT '',
      created_at timestamptz NOT NULL DEFAULT now(),
      last_used_at timestamptz
    )`.execute(db);
  await sql`CREATE INDEX operator_tokens_operator ON operator_tokens (operator_id)`.execute(db);
  await sql`CREATE TRIGGER operators_auth_changed AFTER UPDATE OR DELETE ON operators FOR EACH STATEMENT EXECUTE FUNCTION pb_auth_changed()`.execute(
    db,
  );
  await sql`CREATE TRIGGER operator_tokens_auth_changed AFTER DELETE ON operator_tokens FOR EACH STATEMENT EXECUTE FUNCTION pb_auth_changed()`.execute(
    db,
  );
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE operator_tokens`.execute(db);
  await sql`DROP TABLE operators`.execute(db);
}
