/**
 * Analytics rollups, one row per day. A batch spread over a month touched some
 * 2,800 rollup rows per 1,000 events (an hourly and a daily row per property
 * value), and concurrent batches queued on the row locks of the buckets they
 * shared, so more clients made ingest slower. Now:
 * - `analytics_daily` carries the day's 24 hourly counts (`hours`, index 1 is
 *   00:00 UTC) beside the day's total `n`: one row per (app, type, property,
 *   UTC day, value) holds what `analytics_hourly` held in up to 24 rows, and
 *   `analytics_hourly` goes;
 * - rows are kept in slots (`slot`, part of the key): concurrent batches of one
 *   instance upsert into different slots and never wait on each other. A
 *   bucket's count is the sum of its slots. Existing rows become slot 0.
 */
import { sql, type Kysely } from "kysely";

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE analytics_daily ADD COLUMN slot smallint NOT NULL DEFAULT 0, ADD COLUMN hours bigint[]`.execute(
    db,
  );
  await sql`
    UPDATE analytics_daily d SET hours = (
      SELECT array_agg(coalesce(h.n, 0) ORDER BY i)
      FROM generate_series(0, 23) AS i
      LEFT JOIN analytics_hourly h
        ON h.app_id = d.app_id AND h.type = d.type AND h.prop = d.prop AND h.value = d.value AND h.hour = d.day + i * interval '1 hour')`.execute(
    db,
  );
  await sql`
    ALTER TABLE analytics_daily
      ALTER COLUMN hours SET NOT NULL,
      DROP CONSTRAINT analytics_daily_pkey,
      ADD PRIMARY KEY (app_id, type, prop, day, value, slot)`.execute(db);
  await sql`DROP TABLE analytics_hourly`.execute(db);
  await sql`
    CREATE OR REPLACE FUNCTION analytics_forget_app() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      DELETE FROM analytics_events WHERE app_id = OLD.id;
      DELETE FROM analytics_daily WHERE app_id = OLD.id;
      RETURN OLD;
    END $$`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
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
    INSERT INTO analytics_hourly (app_id, type, prop, hour, value, n)
    SELECT app_id, type, prop, day + (u.i - 1) * interval '1 hour', value, sum(u.n)
    FROM analytics_daily, unnest(hours) WITH ORDINALITY AS u(n, i)
    WHERE u.n <> 0
    GROUP BY 1, 2, 3, 4, 5`.execute(db);
  // Every day's slots summed into slot 0 before the columns go.
  await sql`
    WITH moved AS (DELETE FROM analytics_daily WHERE slot <> 0 RETURNING app_id, type, prop, day, value, n)
    INSERT INTO analytics_daily AS r (app_id, type, prop, day, value, n, slot, hours)
    SELECT app_id, type, prop, day, value, sum(n), 0, '{}' FROM moved GROUP BY 1, 2, 3, 4, 5
    ON CONFLICT (app_id, type, prop, day, value, slot) DO UPDATE SET n = r.n + excluded.n`.execute(db);
  await sql`
    ALTER TABLE analytics_daily
      DROP CONSTRAINT analytics_daily_pkey,
      DROP COLUMN slot,
      DROP COLUMN hours,
      ADD PRIMARY KEY (app_id, type, prop, day, value)`.execute(db);
  await sql`
    CREATE OR REPLACE FUNCTION analytics_forget_app() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      DELETE FROM analytics_events WHERE app_id = OLD.id;
      DELETE FROM analytics_hourly WHERE app_id = OLD.id;
      DELETE FROM analytics_daily WHERE app_id = OLD.id;
      RETURN OLD;
    END $$`.execute(db);
}
