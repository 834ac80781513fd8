/**
 * Reservations of the daily allowances as rows: each has its run's instance
 * (`owner`) and an expiry the live run renews. A run that dies (the process
 * killed, the database cut) stops renewing, and the housekeeping sweep gives
 * its amount back to its day's `quota_usage` row, instead of it counting as
 * used until the UTC day ends.
 *
 * Reservations taken before this migration have no row and simply stay
 * counted, as they did.
 */
import { sql, type Kysely } from "kysely";

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE TABLE quota_reservations (
      id uuid PRIMARY KEY,
      app_id uuid NOT NULL,
      day date NOT NULL,
      counter text NOT NULL,
      amount bigint NOT NULL,
      owner text NOT NULL,
      expires_at timestamptz NOT NULL
    )`.execute(db);
  await sql`CREATE INDEX quota_reservations_expiry ON quota_reservations (expires_at)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE quota_reservations`.execute(db);
}
