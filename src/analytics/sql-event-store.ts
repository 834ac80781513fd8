/**
 * Events on the platform's Postgres/PGlite: every SQL statement of the
 * analytics events lives here.
 *
 * Three tables, written by ONE statement per batch (so they change together
 * or not at all; one multi-row insert per table):
 * - `analytics_events`: the raw events (app, type, at, properties as jsonb).
 *   Indexed on (app_id, type, at) for the edges of a range and for zones
 *   whose day does not start on a whole UTC hour.
 * - `analytics_hourly` and `analytics_daily`: rollups (app, type, prop,
 *   bucket start, value, n) per UTC hour and per UTC day, upserted from the
 *   same batch. `prop = ''` holds the bucket's total; every property an event
 *   carries adds one to `(prop, value)`. A count grouped by `p` reads the
 *   totals and the `p` rows: the `null` group is the total less the events
 *   that carry `p`.
 * - Rollup rows are kept in slots (`slot`, part of the key; see `SlotPicker`):
 *   concurrent batches of one instance upsert into different slots, so
 *   batches spread over many days, which share nearly every bucket, do not
 *   queue on each other's row locks. A bucket's count is the sum of its slots.
 *
 * A query over `[since, until)` is cut into pieces, each read from the
 * coarsest source that is exact for it: whole UTC days from the daily
 * rollups (UTC day, week and month buckets), whole hours from the hourly
 * rollups, and the partial hours at either end from the raw events. The cost
 * grows with days × values, not with events. Buckets in a zone are sums of
 * whole UTC hours when every bucket boundary in the range falls on a whole
 * UTC hour (true for Europe/Berlin or America/New_York across DST);
 * otherwise (e.g. Asia/Kolkata, +05:30) the raw events are counted directly.
 */
import { sql, type ColumnType, type Kysely } from "kysely";
import type { Db, Timestamp } from "../core/database/index.ts";
import { invalidArgument } from "../core/errors.ts";
import { isUtc } from "./buckets.ts";
import { compareBuckets, upstreamError, type CountBucket, type CountQuery, type EventStore, type StoredEvent } from "./event-store.ts";

/** Raw events (property values are strings). */
export interface AnalyticsEventsTable {
  app_id: string;
  type: string;
  at: Timestamp;
  properties: ColumnType<Record<string, string>, string, string>;
}

/** Hourly counts per (type, property, value); `prop = ''` is the hour's total. */
export interface AnalyticsHourlyTable {
  app_id: string;
  type: string;
  prop: string;
  hour: Timestamp;
  value: string;
  n: number;
  /** Which writer's row (see `SlotPicker`); a bucket's count sums its slots. */
  slot: number;
}

/** The same per UTC day. */
export interface AnalyticsDailyTable {
  app_id: string;
  type: string;
  prop: string;
  day: Timestamp;
  value: string;
  n: number;
  slot: number;
}

export type AnalyticsEventTables = {
  analytics_events: AnalyticsEventsTable;
  analytics_hourly: AnalyticsHourlyTable;
  analytics_daily: AnalyticsDailyTable;
};

type EventDb = Kysely<AnalyticsEventTables>;

const HOUR_MS = 3_600_000;
const DAY_MS = 86_400_000;

/** Errors that mean "the database is not there", as opposed to a bug. */
function isUnreachable(err: unknown): boolean {
  const e = err as { code?: string; message?: string } | undefined;
  const code = e?.code ?? "";
  return (
    ["ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "ENOTFOUND", "EPIPE", "57P01", "57P02", "57P03", "53300"].includes(code) ||
    code.startsWith("08") ||
    /Connection terminated|connection timeout|Client has encountered a connection error/i.test(e?.message ?? "")
  );
}

async function guarded<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    if (isUnreachable(err)) throw upstreamError(err);
    if ((err as { code?: string }).code === "22023" && /time zone/i.test((err as Error).message)) {
      throw invalidArgument("timezone", "is not a time zone the analytics store knows");
    }
    throw err;
  }
}

interface RollupRows {
  types: string[];
  props: string[];
  /** Bucket start as a count of buckets since the epoch. */
  buckets: number[];
  values: string[];
  counts: number[];
}

/**
 * The rollup rows of a batch for buckets of `spanMs`, summed and sorted in the
 * primary key's order, so that concurrent batches lock the rows they share in
 * the same order (no deadlocks).
 */
export function rollupRows(events: readonly StoredEvent[], spanMs: number): RollupRows {
  // type -> prop ('' for the total) -> bucket -> value -> n
  const tree = new Map<string, Map<string, Map<number, Map<string, number>>>>();
  const bump = (props: Map<string, Map<number, Map<string, number>>>, prop: string, bucket: number, value: string) => {
    let buckets = props.get(prop);
    if (!buckets) props.set(prop, (buckets = new Map<number, Map<string, number>>()));
    let values = buckets.get(bucket);
    if (!values) buckets.set(bucket, (values = new Map<string, number>()));
    values.set(value, (values.get(value) ?? 0) + 1);
  };
  for (const e of events) {
    let props = tree.get(e.type);
    if (!props) tree.set(e.type, (props = new Map<string, Map<number, Map<string, number>>>()));
    const bucket = Math.floor(e.at / spanMs);
    bump(props, "", bucket, "");
    for (const prop in e.properties) bump(props, prop, bucket, e.properties[prop]);
  }
  const rows: RollupRows = { types: [], props: [], buckets: [], values: [], counts: [] };
  const byString = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
  for (const type of [...tree.keys()].sort(byString)) {
    const props = tree.get(type)!;
    for (const prop of [...props.keys()].sort(byString)) {
      const buckets = props.get(prop)!;
      for (const bucket of [...buckets.keys()].sort((a, b) => a - b)) {
        const values = buckets.get(bucket)!;
        for (const value of [...values.keys()].sort(byString)) {
          rows.types.push(type);
          rows.props.push(prop);
          rows.buckets.push(bucket);
          rows.values.push(value);
          rows.counts.push(values.get(value)!);
        }
      }
    }
  }
  return rows;
}

/** Rollup slots of one instance on PostgreSQL: enough for the pool's concurrent batches to rarely share one. */
export const POSTGRES_ROLLUP_SLOTS = 8;

export interface SlotPicker {
  /** The slot with the fewest batches in flight (the lowest such); give it back with `release`. */
  acquire(): number;
  release(slot: number): void;
}

/**
 * Hands each batch in flight a rollup slot of its own while there are enough:
 * two batches in the same slot would wait on each other's row locks for the
 * buckets they share (every bucket, for batches spread over a month). A lone
 * writer always gets the same slot, so rows multiply only with concurrency.
 * Slots are numbered from a random offset per instance, so that instances
 * sharing a database mostly write different slots too.
 */
export function createSlotPicker(slots: number, offset = Math.floor(Math.random() * slots)): SlotPicker {
  const inFlight = new Array<number>(slots).fill(0);
  return {
    acquire() {
      let best = 0;
      for (let i = 1; i < slots; i++) if (inFlight[i] < inFlight[best]) best = i;
      inFlight[best]++;
      return (best + offset) % slots;
    },
    release(slot) {
      inFlight[(slot - offset + slots) % slots]--;
    },
  };
}

export interface SqlEventStoreOptions {
  /**
   * How many rollup slots this instance writes (default 1). PostgreSQL:
   * `POSTGRES_ROLLUP_SLOTS`; PGlite runs one statement at a time, so one slot.
   */
  slots?: number;
}

export function createSqlEventStore(database: Db, options: SqlEventStoreOptions = {}): EventStore {
  const db: EventDb = database.withTables<AnalyticsEventTables>();
  const slots = createSlotPicker(Math.max(1, options.slots ?? 1));
  const insertBatch = async (appId: string, events: readonly StoredEvent[], slot: number): Promise<void> => {
    const raw = JSON.stringify(events.map((e) => ({ t: e.type, a: e.at, p: e.properties })));
    const h = rollupRows(events, HOUR_MS);
    const d = rollupRows(events, DAY_MS);
    // One statement, three tables: the inserts run as data-modifying CTEs,
    // so the batch and its rollups commit together or not at all. Each step
    // waits for the one before (`count(*)` of its RETURNING): the raw rows go
    // first, and the rollup rows that concurrent batches share are locked
    // last, so those locks are held for as short a time as possible.
    await guarded(() =>
      sql`
        WITH raw AS (
          INSERT INTO analytics_events (app_id, type, at, properties)
          SELECT ${appId}::uuid, e.t, timestamptz 'epoch' + e.a * interval '1 millisecond', e.p
          FROM jsonb_to_recordset(${raw}::jsonb) AS e(t text, a bigint, p jsonb)
          RETURNING 1
        ), raw_done AS (
          SELECT count(*) AS c FROM raw
        ), hourly AS (
          INSERT INTO analytics_hourly AS r (app_id, type, prop, hour, value, n, slot)
          SELECT ${appId}::uuid, x.t, x.k, timestamptz 'epoch' + x.b * interval '1 hour', x.v, x.n, ${slot}::smallint
          FROM raw_done, unnest(${h.types}::text[], ${h.props}::text[], ${h.buckets}::bigint[], ${h.values}::text[], ${h.counts}::bigint[])
            AS x(t, k, b, v, n)
          ON CONFLICT (app_id, type, prop, hour, value, slot) DO UPDATE SET n = r.n + excluded.n
          RETURNING 1
        ), hourly_done AS (
          SELECT count(*) AS c FROM hourly
        )
        INSERT INTO analytics_daily AS r (app_id, type, prop, day, value, n, slot)
        SELECT ${appId}::uuid, x.t, x.k, timestamptz 'epoch' + x.b * interval '1 day', x.v, x.n, ${slot}::smallint
        FROM hourly_done, unnest(${d.types}::text[], ${d.props}::text[], ${d.buckets}::bigint[], ${d.values}::text[], ${d.counts}::bigint[])
          AS x(t, k, b, v, n)
        ON CONFLICT (app_id, type, prop, day, value, slot) DO UPDATE SET n = r.n + excluded.n`.execute(db),
    );
  };

  return {
    kind: "sql",

    async insert(appId, events) {
      if (events.length === 0) return;
      const slot = slots.acquire();
      try {
        await insertBatch(appId, events, slot);
      } finally {
        slots.release(slot);
      }
    },
    async count(q) {
      return guarded(() => countSql(db, q));
    },

    async deleteBefore(appId, before, batch) {
      // Raw rows in bounded batches (no key but the row's address); the rollups of the same whole hours and days after them.
      const raw = await sql`
        DELETE FROM analytics_events WHERE ctid = ANY (ARRAY(
          SELECT ctid FROM analytics_events WHERE app_id = ${appId}::uuid AND at < ${before} LIMIT ${batch} FOR UPDATE SKIP LOCKED))`.execute(db);
      const removed = Number(raw.numAffectedRows ?? 0);
      if (removed < batch) {
        await db.deleteFrom("analytics_hourly").where("app_id", "=", appId).where("hour", "<", before).execute();
        await db.deleteFrom("analytics_daily").where("app_id", "=", appId).where("day", "<", before).execute();
      }
      return removed;
    },

    // The app's rows go with the app itself (a trigger of the analytics migration, in the same transaction).
    async deleteApp() {},

    async close() {},
  };
}

type Range = [number, number];

/** The non-empty ranges among `ranges`. */
const nonEmpty = (...ranges: Range[]): Range[] => ranges.filter(([from, to]) => from < to);

/** `(col >= a AND col < b) OR ...` over the given ranges of a timestamptz column. */
function inRanges(column: "at" | "hour" | "day", ranges: Range[]) {
  const col = sql.ref(column);
  return sql.join(
    ranges.map(([from, to]) => sql`(${col} >= ${new Date(from)} AND ${col} < ${new Date(to)})`),
    sql` OR `,
  );
}

/**
 * Cuts `[since, until)` into the pieces each source counts exactly: raw
 * events for the partial hours at the ends, hourly rollups for whole hours,
 * daily rollups for whole UTC days (when the buckets are UTC days or coarser).
 */
export function planPieces(q: CountQuery, hourlyExact: boolean): { raw: Range[]; hourly: Range[]; daily: Range[] } {
  const firstHour = Math.ceil(q.since / HOUR_MS) * HOUR_MS;
  const lastHour = Math.floor(q.until / HOUR_MS) * HOUR_MS;
  if (!hourlyExact || firstHour >= lastHour) return { raw: [[q.since, q.until]], hourly: [], daily: [] };
  const raw = nonEmpty([q.since, firstHour], [lastHour, q.until]);
  const firstDay = Math.ceil(firstHour / DAY_MS) * DAY_MS;
  const lastDay = Math.floor(lastHour / DAY_MS) * DAY_MS;
  if (q.unit === "hour" || !isUtc(q.timezone) || firstDay >= lastDay) return { raw, hourly: [[firstHour, lastHour]], daily: [] };
  return { raw, hourly: nonEmpty([firstHour, firstDay], [lastDay, lastHour]), daily: [[firstDay, lastDay]] };
}

async function countSql(db: EventDb, q: CountQuery): Promise<CountBucket[]> {
  const zone = isUtc(q.timezone) ? "UTC" : q.timezone!;
  const hourlyExact = zone === "UTC" || q.unit === "hour" || (await boundariesOnWholeHours(db, q, zone));
  const pieces = planPieces(q, hourlyExact);

  // group -> count, per bucket start
  const buckets = new Map<number, Map<string | null, number>>();
  const add = (at: number, group: string | null, n: number) => {
    let groups = buckets.get(at);
    if (!groups) buckets.set(at, (groups = new Map<string | null, number>()));
    groups.set(group, (groups.get(group) ?? 0) + n);
  };
  const props = q.groupBy === undefined ? [""] : ["", q.groupBy];
  const addRollups = (rows: { b: Date; prop: string; value: string; n: number }[]) => {
    for (const row of rows) {
      const at = new Date(row.b).getTime();
      const n = Number(row.n);
      if (row.prop === "") add(at, null, n);
      else {
        add(at, row.value, n);
        add(at, null, -n); // the null group is the total less those that carry the property
      }
    }
  };

  const work: Promise<void>[] = [];
  if (pieces.daily.length > 0) {
    work.push(
      sql<{ b: Date; prop: string; value: string; n: number }>`
        SELECT date_trunc(${q.unit}, day, 'UTC') AS b, prop, value, sum(n)::bigint AS n
        FROM analytics_daily
        WHERE app_id = ${q.appId}::uuid AND type = ${q.type} AND prop = ANY(${props}::text[]) AND (${inRanges("day", pieces.daily)})
        GROUP BY 1, 2, 3`
        .execute(db)
        .then((r) => addRollups(r.rows)),
    );
  }
  if (pieces.hourly.length > 0) {
    work.push(
      sql<{ b: Date; prop: string; value: string; n: number }>`
        SELECT date_trunc(${q.unit}, hour, ${zone}) AS b, prop, value, sum(n)::bigint AS n
        FROM analytics_hourly
        WHERE app_id = ${q.appId}::uuid AND type = ${q.type} AND prop = ANY(${props}::text[]) AND (${inRanges("hour", pieces.hourly)})
        GROUP BY 1, 2, 3`
        .execute(db)
        .then((r) => addRollups(r.rows)),
    );
  }
  if (pieces.raw.length > 0) {
    const group = q.groupBy === undefined ? sql<string | null>`NULL::text` : sql<string | null>`properties->>${q.groupBy}`;
    work.push(
      sql<{ b: Date; g: string | null; n: number }>`
        SELECT date_trunc(${q.unit}, at, ${zone}) AS b, ${group} AS g, count(*)::bigint AS n
        FROM analytics_events
        WHERE app_id = ${q.appId}::uuid AND type = ${q.type} AND (${inRanges("at", pieces.raw)})
        GROUP BY 1, 2`
        .execute(db)
        .then((r) => {
          for (const row of r.rows) add(new Date(row.b).getTime(), row.g, Number(row.n));
        }),
    );
  }
  // On PostgreSQL the pieces run at once on separate connections.
  await Promise.all(work);

  const out: CountBucket[] = [];
  for (const [at, groups] of buckets) {
    for (const [group, count] of groups) if (count > 0) out.push({ at, group, count });
  }
  return out.sort(compareBuckets);
}

/**
 * True when every bucket boundary of the range, as Postgres computes it in
 * `zone`, is a whole UTC hour, so that buckets are exact sums of hourly rollups.
 */
async function boundariesOnWholeHours(db: EventDb, q: CountQuery, zone: string): Promise<boolean> {
  const step = `1 ${q.unit}`;
  const result = await sql<{ ok: boolean | null }>`
    SELECT bool_and(mod(extract(epoch FROM (s AT TIME ZONE ${zone}))::numeric, 3600) = 0) AS ok
    FROM generate_series(
      date_trunc(${q.unit}, ${new Date(q.since)}::timestamptz, ${zone}) AT TIME ZONE ${zone},
      ${new Date(q.until)}::timestamptz AT TIME ZONE ${zone},
      ${step}::interval) AS s`.execute(db);
  return result.rows[0]?.ok === true;
}
