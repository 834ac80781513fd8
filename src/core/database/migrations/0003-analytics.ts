/**
 * Analytics: event types (always here), and the SQL event store's raw events
 * and hourly and daily rollups (used when MONGODB_URL is unset). See
 * src/analytics/sql-event-store.ts for why the tables look like this.
 */
import { sql, type Kysely } from "kysely";

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE TABLE analytics_event_types (
      app_id uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
      name text NOT NULL,
      properties jsonb NOT NULL DEFAULT '{}',
      created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
      updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
      PRIMARY KEY (app_id, name)
    )`.execute(db);
  // No foreign key on the event tables: a per-row referential check would
  // cost more than the insert. The trigger below forgets a deleted app's events.
  await sql`
    CREATE TABLE analytics_events (
      app_id uuid NOT NULL,
      type text NOT NULL,
      at timestamptz NOT NULL,
      properties jsonb NOT NULL
    )`.execute(db);
  await sql`CREATE INDEX analytics_events_app_type_at ON analytics_events (app_id, type, at)`.execute(db);
  // Rollup rows are updated in place on every batch: half-empty pages keep
  // those updates HOT (no new index entry, no growing chain of dead versions).
  await sql`
    CREATE TABLE analytics_hourly (
      app_id uuid NOT NULL,
      type text NOT NULL,
      prop text NOT NULL,
      hour timestamptz NOT NULL,
      value text NOT NULL,
      n bigint NOT NULL,
      PRIMARY KEY (app_id, type, prop, hour, value)
    ) WITH (fillfactor = 50)`.execute(db);
  await sql`
    CREATE TABLE analytics_daily (
      app_id uuid NOT NULL,
      type text NOT NULL,
      prop text NOT NULL,
      day timestamptz NOT NULL,
      value text NOT NULL,
      n bigint NOT NULL,
      PRIMARY KEY (app_id, type, prop, day, value)
    ) WITH (fillfactor = 50)`.execute(db);
  await sql`
    CREATE FUNCTION analytics_forget_app() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      DELETE FROM analytics_events WHERE app_id = OLD.id;
      DELETE FROM analytics_hourly WHERE app_id = OLD.id;
      DELETE FROM analytics_daily WHERE app_id = OLD.id;
      RETURN OLD;
    END $$`.execute(db);
  await sql`
    CREATE TRIGGER analytics_forget_app AFTER DELETE ON apps
    FOR EACH ROW EXECUTE FUNCTION analytics_forget_app()`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TRIGGER analytics_forget_app ON apps`.execute(db);
  await sql`DROP FUNCTION analytics_forget_app()`.execute(db);
  for (const table of ["analytics_daily", "analytics_hourly", "analytics_events", "analytics_event_types"]) {
    await sql`DROP TABLE ${sql.table(table)}`.execute(db);
  }
}
