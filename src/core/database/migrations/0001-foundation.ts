import { sql, type Kysely } from "kysely";

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE TABLE apps (
      id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
      name text NOT NULL UNIQUE,
      status text NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'stopped')),
      mail_from text NOT NULL DEFAULT '',
      analytics_enabled boolean NOT NULL DEFAULT true,
      secrets_enabled boolean NOT NULL DEFAULT true,
      limits jsonb NOT NULL DEFAULT '{}',
      created_at timestamptz NOT NULL DEFAULT now()
    )`.execute(db);
  await sql`
    CREATE TABLE app_tokens (
      id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
      app_id uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
      token_hash text NOT NULL UNIQUE,
      label text NOT NULL DEFAULT '',
      created_at timestamptz NOT NULL DEFAULT now()
    )`.execute(db);
  await sql`CREATE INDEX app_tokens_app_id ON app_tokens (app_id)`.execute(db);
  await sql`
    CREATE TABLE quota_usage (
      app_id uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
      day date NOT NULL,
      counter text NOT NULL,
      used bigint NOT NULL CHECK (used >= 0),
      PRIMARY KEY (app_id, day, counter)
    )`.execute(db);
  await sql`
    CREATE TABLE secrets (
      app_id uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
      name text NOT NULL,
      value_encrypted bytea,
      key_id text,
      version integer,
      set_at timestamptz,
      PRIMARY KEY (app_id, name)
    )`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  for (const table of ["secrets", "quota_usage", "app_tokens", "apps"]) {
    await sql`DROP TABLE ${sql.table(table)}`.execute(db);
  }
}
