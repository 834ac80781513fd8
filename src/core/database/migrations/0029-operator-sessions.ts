import { sql, type Kysely } from "kysely";

/**
 * The dashboard's single sign-on sessions (docs/operators.md#single-sign-on):
 * one row per signed-in browser, found by the SHA-256 of its cookie (the
 * cookie's value itself is never stored). `operator_id` is null for the
 * built-in operator "owner" (not a row); deleting an operator ends its
 * sessions. `expires_at` is the hard end a session never outlives; the
 * housekeeping sweep removes rows past it.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE TABLE operator_sessions (
      id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
      session_hash text NOT NULL UNIQUE,
      operator_id uuid REFERENCES operators (id) ON DELETE CASCADE,
      subject text NOT NULL,
      email text,
      created_at timestamptz NOT NULL DEFAULT now(),
      expires_at timestamptz NOT NULL
    )`.execute(db);
  await sql`CREATE INDEX operator_sessions_expires ON operator_sessions (expires_at)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE operator_sessions`.execute(db);
}
