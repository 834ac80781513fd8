/**
 * The analytics benchmark's large dataset (docs/benchmarks.md "bench:analytics"):
 * by default 10,000,000 events over 90 days, 100,000 distinct users, 20 types
 * (`t00` to `t19`) with the same 5 properties each, in a database of its own
 * on the benchmark's server, built once and reused by later runs.
 *
 * It is built with set-based SQL (`generate_series`), not through the API:
 * the service is started on the database first (so its migrations make the
 * schema and the app and types are registered as any app's), then the events
 * are inserted in time order as live traffic would leave them, and the
 * rollups are computed from them in the rows the SQL store itself writes
 * (`prop = ''` for the totals, one row per property value, 24 hourly counts).
 * The indexes of `analytics_events` are dropped during the load and made again
 * after it (minutes rather than an hour). The events go through the table's
 * own partitioning (by app and type, migration 0036), as the service's do. A marker row (`bench_dataset`)
 * records the shape and the app: a database without it, or with another
 * shape, is built again from scratch.
 *
 * Properties: `plan` (20 values), `country` (30), `source` (10), `paid`
 * (boolean, 30% true) and `amount` (a number, one of 100 prices; rolled up as
 * the store rolls up a number property: its events counted per day and hour,
 * not per value).
 */
import crypto from "node:crypto";
import pg from "pg";
import { migrations } from "../src/core/database/migrations/index.ts";
import { log } from "./support.ts";

export interface DatasetShape {
  events: number;
  days: number;
  users: number;
  types: number;
}

export const DATASET_PROPERTIES = {
  plan: "string",
  country: "string",
  source: "string",
  paid: "boolean",
  amount: "number",
} as const;

export const typeName = (i: number): string => `t${String(i).padStart(2, "0")}`;

interface Dataset {
  databaseUrl: string;
  appId: string;
  /** The last event's instant (epoch ms): queries read the 30 days before it. */
  end: number;
  shape: DatasetShape;
}

/** The dataset's database on `baseUrl`'s server, named after its shape. */
export function datasetDatabase(baseUrl: string, shape: DatasetShape): { name: string; url: string } {
  // The migrations are in the name too: a dataset migrated by another version (another table layout, or
  // a migration of another name, which the service refuses to start on) is built again, under its own name.
  const tag = crypto
    .createHash("sha256")
    .update(JSON.stringify({ ...shape, migrations: Object.keys(migrations) }))
    .digest("hex")
    .slice(0, 10);
  const name = `pb_bench_analytics_${tag}`;
  const url = new URL(baseUrl);
  url.pathname = `/${name}`;
  return { name, url: url.toString() };
}

/** The marker of a finished dataset, or undefined (no database, no marker, another shape). */
export async function readMarker(url: string, shape: DatasetShape): Promise<Dataset | undefined> {
  const client = new pg.Client({ connectionString: url });
  try {
    await client.connect();
  } catch {
    return undefined;
  }
  try {
    const r = await client.query<{ app_id: string; end_ms: string; shape: DatasetShape }>(
      "SELECT app_id, end_ms, shape FROM bench_dataset LIMIT 1",
    );
    const row = r.rows[0];
    // Field by field: jsonb keeps its keys in an order of its own.
    const same = (Object.keys(shape) as (keyof DatasetShape)[]).every((k) => row?.shape[k] === shape[k]);
    if (!row || !same) return undefined;
    return { databaseUrl: url, appId: row.app_id, end: Number(row.end_ms), shape };
  } catch {
    return undefined;
  } finally {
    await client.end();
  }
}

/** Drops and creates the dataset's database, empty (the service's migrations then make the schema). */
export async function recreateDatabase(baseUrl: string, name: string): Promise<void> {
  const admin = new pg.Client({ connectionString: baseUrl });
  await admin.connect();
  await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
}

/**
 * Fills the (migrated) database with the app's events and rollups, in one
 * transaction per part; writes the marker last.
 */
export async function fillDataset(url: string, appId: string, shape: DatasetShape): Promise<Dataset> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  const step = async (label: string, text: string, values: unknown[] = []) => {
    const t0 = performance.now();
    await client.query(text, values);
    log(`dataset: ${label} in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  };
  try {
    await client.query("SET work_mem = '256MB'");
    await client.query("SET maintenance_work_mem = '512MB'");
    const end = Math.floor(Date.now() / 1000) * 1000;
    const start = end - shape.days * 86_400_000;
    const indexes = await client.query<{ indexname: string; indexdef: string }>(
      "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'analytics_events'",
    );
    for (const i of indexes.rows) await client.query(`DROP INDEX ${i.indexname}`);
    const pick = (list: string, n: number) => `${list} || lpad(floor(random() * ${n})::int::text, 2, '0')`;
    // Event i at start + (i + jitter) * step: in time order, as logged live. Prices are 100 points
    // from 4.99 to 499.99; the numbers column holds the same number as the string.
    await step(
      `${shape.events} events`,
      `
      INSERT INTO analytics_events (app_id, type, at, properties, distinct_id, numbers)
      SELECT $1::uuid, 't' || lpad(floor(random() * ${shape.types})::int::text, 2, '0'), at,
        jsonb_build_object('plan', plan, 'country', country, 'source', source, 'paid', paid, 'amount', amount::text),
        'user-' || floor(random() * ${shape.users})::int, jsonb_build_object('amount', amount)
      FROM (
        SELECT timestamptz 'epoch' + floor($2::float8 + (i + random()) * $3::float8) * interval '1 millisecond' AS at,
          ${pick("'plan-'", 20)} AS plan, ${pick("'c'", 30)} AS country, ${pick("'s'", 10)} AS source,
          (random() < 0.3)::text AS paid, (floor(random() * 100) * 5 + 4.99)::float8 AS amount
        FROM generate_series(0, $4::int - 1) AS i
      ) e`,
      [appId, start, (end - start) / shape.events, shape.events],
    );
    // A partitioned table's index is listed `ON ONLY` the parent; made again, it is made on every partition.
    for (const i of indexes.rows) await step(`index ${i.indexname}`, i.indexdef.replace(" ON ONLY ", " ON "));
    // The rollups in one scan of the events: one hashed grouping set per property (and one for the
    // totals), each group an hour's count, then the hours of a day gathered into its row.
    // A number property is rolled up as the store does it: one mark per day and hour (`#amount`), no values.
    const props = Object.keys(DATASET_PROPERTIES);
    const rollupProp = (p: string) =>
      DATASET_PROPERTIES[p as keyof typeof DATASET_PROPERTIES] === "number" ? `#${p}` : p;
    const rollupValue = (p: string) =>
      DATASET_PROPERTIES[p as keyof typeof DATASET_PROPERTIES] === "number"
        ? `''::text AS ${p}`
        : `properties->>'${p}' AS ${p}`;
    const hours = Array.from({ length: 24 }, (_, h) => `coalesce(sum(c) FILTER (WHERE h = ${h}), 0)`).join(", ");
    await step(
      "rollups",
      `
      INSERT INTO analytics_daily (app_id, type, prop, day, value, slot, n, hours)
      SELECT $1::uuid, type, prop, day, value, 0, sum(c), ARRAY[${hours}]::bigint[]
      FROM (
        SELECT type, day, h, count(*) AS c,
          CASE ${props.map((p) => `WHEN GROUPING(${p}) = 0 THEN '${rollupProp(p)}'`).join(" ")} ELSE '' END AS prop,
          coalesce(${props.join(", ")}, '') AS value
        FROM (
          SELECT type, date_trunc('day', at, 'UTC') AS day, extract(hour FROM at AT TIME ZONE 'UTC')::int AS h,
            ${props.map(rollupValue).join(", ")}
          FROM analytics_events WHERE app_id = $1::uuid
        ) e
        GROUP BY GROUPING SETS ((type, day, h), ${props.map((p) => `(type, day, h, ${p})`).join(", ")})
      ) x
      GROUP BY type, prop, day, value`,
      [appId],
    );
    await step("vacuum analyze", "VACUUM (ANALYZE) analytics_events");
    await client.query("VACUUM (ANALYZE) analytics_daily");
    await client.query(
      "CREATE TABLE bench_dataset (app_id uuid NOT NULL, end_ms bigint NOT NULL, shape jsonb NOT NULL)",
    );
    await client.query("INSERT INTO bench_dataset VALUES ($1, $2, $3)", [appId, end, JSON.stringify(shape)]);
    return { databaseUrl: url, appId, end, shape };
  } finally {
    await client.end();
  }
}
