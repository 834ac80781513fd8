/**
 * `limit_exchange`: what each instance tells the others about the demand it
 * sees per app and limit (`core/limits/`), so that every instance takes its
 * share of an app's rate and concurrency limits. One row per live instance,
 * rewritten by that instance once per exchange period; a row not rewritten
 * for a while belongs to an instance that is gone.
 */
import { sql, type Kysely } from "kysely";

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`CREATE TABLE limit_exchange (
    instance_id text PRIMARY KEY,
    demand jsonb NOT NULL,
    seen_at timestamptz NOT NULL
  )`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE limit_exchange`.execute(db);
}
