/**
 * Analytics rollups in slots: a rollup row is keyed by its bucket and a small
 * `slot` number as well, and concurrent batches of one instance upsert into
 * different slots. Batches spread over many days share nearly every bucket; with
 * one row per bucket they queued on each other's row locks, so more clients
 * made ingest slower. A count sums a bucket's slots (the queries already sum).
 * Existing rows become slot 0.
 */
import { sql, type Kysely } from "kysely";

const TABLES = [
  { table: "analytics_hourly", bucket: "hour" },
  { table: "analytics_daily", bucket: "day" },
] as const;

export async function up(db: Kysely<unknown>): Promise<void> {
  for (const { table, bucket } of TABLES) {
    const t = sql.table(table);
    await sql`ALTER TABLE ${t} ADD COLUMN slot smallint NOT NULL DEFAULT 0`.execute(db);
    await sql`ALTER TABLE ${t} DROP CONSTRAINT ${sql.id(`${table}_pkey`)}, ADD PRIMARY KEY (app_id, type, prop, ${sql.ref(bucket)}, value, slot)`.execute(db);
  }
}

export async function down(db: Kysely<unknown>): Promise<void> {
  for (const { table, bucket } of TABLES) {
    const t = sql.table(table);
    const b = sql.ref(bucket);
    // Every bucket's slots summed into slot 0 before the column goes.
    await sql`
      WITH moved AS (DELETE FROM ${t} WHERE slot <> 0 RETURNING app_id, type, prop, ${b} AS b, value, n)
      INSERT INTO ${t} AS r (app_id, type, prop, ${b}, value, n, slot)
      SELECT app_id, type, prop, b, value, sum(n), 0 FROM moved GROUP BY 1, 2, 3, 4, 5
      ON CONFLICT (app_id, type, prop, ${b}, value, slot) DO UPDATE SET n = r.n + excluded.n`.execute(db);
    await sql`ALTER TABLE ${t} DROP CONSTRAINT ${sql.id(`${table}_pkey`)}, DROP COLUMN slot, ADD PRIMARY KEY (app_id, type, prop, ${b}, value)`.execute(db);
  }
}
