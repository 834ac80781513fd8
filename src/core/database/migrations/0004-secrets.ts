import { sql, type Kysely } from "kysely";

/**
 * Secret links. A link belongs to one declared secret (dropping the name from
 * the blueprint deletes the secret row and, by the cascade, its links). Only
 * the SHA-256 of the link token is stored. The partial index serves the count
 * of outstanding (unused) links per app.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE TABLE secret_links (
      token_hash text PRIMARY KEY,
      app_id uuid NOT NULL,
      name text NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(),
      expires_at timestamptz NOT NULL,
      used_at timestamptz,
      FOREIGN KEY (app_id, name) REFERENCES secrets (app_id, name) ON DELETE CASCADE
    )`.execute(db);
  await sql`CREATE INDEX secret_links_unused ON secret_links (app_id, expires_at) WHERE used_at IS NULL`.execute(db);
  await sql`CREATE INDEX secret_links_secret ON secret_links (app_id, name)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE secret_links`.execute(db);
}
