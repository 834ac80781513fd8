/**
 * Events on the platform's Postgres/PGlite: every SQL statement of the
 * analytics events lives here.
 *
 * Two tables, written by ONE statement per batch (so they change together
 * or not at all; one multi-row insert each):
 * - `analytics_events`: the raw events (app, type, at, properties as jsonb,
 *   distinct_id, numbers), partitioned by hash of (app_id, type) so that a
 *   type's events lie together (migration 0036). Indexed only on (app_id, type, at)
 *   with distinct_id included, for the edges of a range, zones whose day does
 *   not start on a whole UTC hour, unique users and funnels.
 * - `analytics_daily`: rollups (app, type, prop, UTC day, value, slot) with
 *   the day's count `n` and its 24 hourly counts `hours` (index 1 is 00:00
 *   UTC), upserted from the same batch. `prop = ''` holds the total; every
 *   string or boolean property an event carries adds one to `(prop, value)`,
 *   every number property one to its mark `('#prop', '')` (`numberMark`). A count grouped by
 *   `p` reads the totals and the `p` rows: the `null` group is the total less
 *   the events that carry `p`. One row per day rather than one per hour: a
 *   batch spread over a month writes about a quarter as many rows.
 * - Rollup rows are kept in slots (`slot`, part of the key; see
 *   `createSlotPicker`): concurrent wide batches (spread over many days, so
 *   sharing nearly every row) upsert into different slots and do not queue
 *   on each other's row locks; narrow ones (live traffic) share one slot. A
 *   bucket's count is the sum of its slots.
 *
 * A query over `[since, until)` is cut into pieces, each read from the
 * coarsest source that is exact for it: whole UTC days from the days' totals
 * (UTC day, week and month buckets), whole hours from the days' hourly
 * counts, and the partial hours at either end from the raw events. The cost
 * grows with days × values, not with events. Buckets in a zone are sums of
 * whole UTC hours when every bucket boundary in the range falls on a whole
 * UTC hour (true for Europe/Berlin or America/New_York across DST);
 * otherwise (e.g. Asia/Kolkata, +05:30) the raw events are counted directly.
 */
import { sql, type ColumnType, type Kysely, type RawBuilder } from "kysely";
import { PREPARED, inTransaction, type Db, type InTransaction, type Timestamp } from "../core/database/index.ts";
import { invalidArgument } from "../core/errors.ts";
import { DAY_MS, HOUR_MS } from "../core/time.ts";
import type { SpendStatement } from "../core/quotas/index.ts";
import { firstInstantOfWallTime, isUtc } from "./buckets.ts";
import {
  compareBuckets,
  type AggregateQuery,
  type AggregateRow,
  type Condition,
  type CountBucket,
  type ConditionScalar,
  type CountQuery,
  type EventStore,
  type FunnelCounts,
  type FunnelQuery,
  type FunnelStepCounts,
  type StoredEvent,
} from "./event-store.ts";

/** Raw events (property values are strings). */
interface AnalyticsEventsTable {
  app_id: string;
  type: string;
  at: Timestamp;
  properties: ColumnType<Record<string, string>, string, string>;
  /** The event's `distinctId` (migration 0032). */
  distinct_id: string | null;
  /** The `number` properties as JSON numbers, beside their strings (migration 0032). */
  numbers: ColumnType<Record<string, number> | null, string | null, string | null>;
}

/** Counts per (type, property, UTC day, value); `prop = ''` is the day's total. */
interface AnalyticsDailyTable {
  app_id: string;
  type: string;
  prop: string;
  day: Timestamp;
  value: string;
  /** Which writer's row (see `createSlotPicker`); a bucket's count sums its slots. */
  slot: number;
  n: number;
  /** The 24 hourly counts of the day, from 00:00 UTC. */
  hours: number[];
}

export type AnalyticsEventTables = {
  analytics_events: AnalyticsEventsTable;
  analytics_daily: AnalyticsDailyTable;
};

type EventDb = Kysely<AnalyticsEventTables>;

/**
 * A statement of this store, with the one error that is the analytics
 * request's fault named. These tables live in the platform database, so its
 * outage is the platform's: the error goes on as it is, and `toPlatformError`
 * answers it 503 `unavailable` like every other path (not 502, which is for
 * a separate analytics store, MongoDB).
 */
async function guarded<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    if ((err as { code?: string }).code === "22023" && /time zone/i.test((err as Error).message)) {
      throw invalidArgument("timezone", "is not a time zone the analytics store knows");
    }
    throw err;
  }
}

/**
 * The element-wise sum of a row's hourly counts and the batch's, spelled out:
 * a plain expression costs less per row than a subquery over `unnest`.
 */
const ADD_HOURS = sql.raw(
  `ARRAY[${Array.from({ length: 24 }, (_, i) => `r.hours[${i + 1}] + excluded.hours[${i + 1}]`).join(", ")}]`,
);

export interface RollupRows {
  types: string[];
  props: string[];
  /** UTC day as a count of days since the epoch. */
  days: number[];
  values: string[];
  /** The day's count. */
  counts: number[];
  /** The 24 hourly counts, as Postgres array literals (`{0,2,...}`). */
  hours: string[];
}

/**
 * The rollup property that counts, per day and hour, the events that carried
 * `prop` as a number (no value). A number property is not rolled up per
 * value: amounts and durations are nearly all different, so each event made
 * a rollup row of its own (1,000 upserts for a batch of 1,000 orders, against
 * about 25 for its string and boolean properties), and a count by a number
 * property's stored string, the one query those rows served, is rare. A
 * property's kind may change (a type is registered again), so a query that
 * would read `prop`'s rollup rows first looks for these marks in its range:
 * where there are any, some events carried `prop` without a row of their
 * value, and the query counts the raw events instead (`countSql`). Property
 * names start with a letter, so the mark cannot be a property's name.
 */
const numberMark = (prop: string) => `#${prop}`;

/**
 * The rollup rows of a batch, summed per (type, property, UTC day, value) and
 * sorted in the primary key's order, so that batches that do share a slot lock
 * the rows they share in the same order (no deadlocks).
 */
export function rollupRows(events: readonly StoredEvent[]): RollupRows {
  // type -> prop ('' for the total) -> day -> value -> hourly counts
  type Days = Map<number, Map<string, number[]>>;
  const tree = new Map<string, Map<string, Days>>();
  const bump = (props: Map<string, Days>, prop: string, day: number, hour: number, value: string) => {
    let days = props.get(prop);
    if (!days) props.set(prop, (days = new Map<number, Map<string, number[]>>()));
    let values = days.get(day);
    if (!values) days.set(day, (values = new Map<string, number[]>()));
    let hours = values.get(value);
    if (!hours) values.set(value, (hours = new Array<number>(24).fill(0)));
    hours[hour]++;
  };
  for (const e of events) {
    let props = tree.get(e.type);
    if (!props) tree.set(e.type, (props = new Map<string, Days>()));
    const day = Math.floor(e.at / DAY_MS);
    const hour = Math.floor((e.at - day * DAY_MS) / HOUR_MS);
    bump(props, "", day, hour, "");
    const numbers = e.numbers;
    for (const prop in e.properties)
      if (numbers !== undefined && Object.hasOwn(numbers, prop)) bump(props, numberMark(prop), day, hour, "");
      else bump(props, prop, day, hour, e.properties[prop]);
  }
  const rows: RollupRows = { types: [], props: [], days: [], values: [], counts: [], hours: [] };
  const byString = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
  for (const type of [...tree.keys()].sort(byString)) {
    const props = tree.get(type)!;
    for (const prop of [...props.keys()].sort(byString)) {
      const days = props.get(prop)!;
      for (const day of [...days.keys()].sort((a, b) => a - b)) {
        const values = days.get(day)!;
        for (const value of [...values.keys()].sort(byString)) {
          const hours = values.get(value)!;
          let n = 0;
          for (const c of hours) n += c;
          rows.types.push(type);
          rows.props.push(prop);
          rows.days.push(day);
          rows.values.push(value);
          rows.counts.push(n);
          rows.hours.push(`{${hours.join(",")}}`);
        }
      }
    }
  }
  return rows;
}

/** Rollup slots of one instance on PostgreSQL: the shared one and 7 for wide batches, about the pool's concurrent batches. */
export const POSTGRES_ROLLUP_SLOTS = 8;

/**
 * Batches with at most this many rollup rows (live traffic: a day or two,
 * a few property values) write the shared slot: they hold few row locks for a
 * short time, and sharing keeps a day's rows few, which keeps queries fast.
 */
const SHARED_SLOT_MAX_ROWS = 100;

export interface SlotPicker {
  /**
   * The shared slot for a narrow batch; for a wide one, the other slot with the
   * fewest batches in flight (the lowest such). Give it back with `release`.
   */
  acquire(wide: boolean): number;
  release(slot: number): void;
}

/**
 * Picks the rollup slot of a batch. A wide batch (a backfill spread over a
 * month touches every day's rows) gets a slot of its own while there are
 * enough: two wide batches in one slot would wait on each other's row locks
 * for every bucket they share, so more clients would ingest slower. A lone
 * writer always gets the same slot, so rows multiply only with concurrency.
 * Slots are numbered from a random offset per instance, so that instances
 * sharing a database mostly write different slots too.
 */
export function createSlotPicker(slots: number, offset = Math.floor(Math.random() * slots)): SlotPicker {
  const inFlight = new Array<number>(slots).fill(0);
  return {
    acquire(wide) {
      let best = 0;
      if (wide && slots > 1) {
        best = 1;
        for (let i = 2; i < slots; i++) if (inFlight[i] < inFlight[best]) best = i;
      }
      inFlight[best]++;
      return (best + offset) % slots;
    },
    release(slot) {
      inFlight[(slot - offset + slots) % slots]--;
    },
  };
}

/** The raw rows of a batch as `insertRows` sends them: one text per column (see `eventColumns`). */
interface EventColumns {
  /** Type names joined by U+001E (a name has no control character). */
  types: string;
  /** Epoch milliseconds joined by commas. */
  ats: string;
  /** Each event's properties as a JSON object, joined by U+001E (JSON escapes every control character). */
  properties: string;
  /** The distinct ids as a `text[]` expression, an event without one NULL. */
  distinctIds: RawBuilder<string[]>;
  /** Each event's numbers as a JSON object, or empty (NULL) without any, joined by U+001E. */
  numbers: string;
}

/**
 * Separators tried, in turn, for a batch's distinct ids (an id may hold any
 * character but NUL): the first that no id of the batch holds.
 */
const ID_SEPARATORS = ["\x1e", "\x1f", "\x1d", "\x1c"];

/**
 * The raw rows of a batch, one text per column. Why not one JSON document of
 * the batch (`jsonb_to_recordset`) or pg's array literals: PostgreSQL parsed
 * the whole document into jsonb and then copied each event's properties out
 * of it, and an array literal quotes and escapes every element on both sides;
 * texts joined by a separator no element holds are split by `string_to_array`
 * at the cost of a scan, and each property object is parsed once, into its
 * own jsonb. Empty elements are NULL (a distinct id has 1 to 200 characters;
 * a numbers object is never empty text). A batch of one event without an id
 * sends an empty text, which splits into no element: `unnest` pads the
 * shorter arrays with NULL, so the row gets NULL as well.
 */
function eventColumns(events: readonly StoredEvent[]): EventColumns {
  const n = events.length;
  const types = new Array<string>(n);
  const ats = new Array<number>(n);
  const properties = new Array<string>(n);
  const ids = new Array<string>(n);
  const numbers = new Array<string>(n);
  let anyId = false;
  for (let i = 0; i < n; i++) {
    const e = events[i];
    types[i] = e.type;
    ats[i] = e.at;
    properties[i] = JSON.stringify(e.properties);
    const id = e.distinctId;
    if (id !== undefined) {
      ids[i] = id;
      anyId = true;
    } else ids[i] = "";
    numbers[i] = e.numbers === undefined ? "" : JSON.stringify(e.numbers);
  }
  let distinctIds: RawBuilder<string[]>;
  const separator = anyId ? ID_SEPARATORS.find((sep) => !ids.some((id) => id.includes(sep))) : ID_SEPARATORS[0];
  if (separator !== undefined)
    distinctIds = sql<string[]>`string_to_array(${ids.join(separator)}::text, ${separator}::text, '')`;
  // Ids that hold every separator (made to): an array literal, which pg quotes and escapes.
  else distinctIds = sql<string[]>`${ids.map((id) => (id === "" ? null : id))}::text[]`;
  return {
    types: types.join("\x1e"),
    ats: ats.join(","),
    properties: properties.join("\x1e"),
    distinctIds,
    numbers: numbers.join("\x1e"),
  };
}

export interface SqlEventStoreOptions {
  /**
   * How many rollup slots this instance writes (default 1). PostgreSQL:
   * `POSTGRES_ROLLUP_SLOTS`; PGlite runs one statement at a time, so one slot.
   */
  slots?: number;
  /** Batches with more rollup rows than this take a slot of their own (default `SHARED_SLOT_MAX_ROWS`). */
  sharedSlotMaxRows?: number;
}

export function createSqlEventStore(database: Db, options: SqlEventStoreOptions = {}): EventStore {
  const db: EventDb = database.withTables<AnalyticsEventTables>();
  const slots = createSlotPicker(Math.max(1, options.slots ?? 1));
  const sharedSlotMaxRows = options.sharedSlotMaxRows ?? SHARED_SLOT_MAX_ROWS;
  /**
   * Stores a batch, given as its statement's parameters (`eventColumns`, `rollupRows`): the events
   * themselves are not held while the statement runs (see `insert`).
   */
  const insertBatch = async (
    appId: string,
    columns: EventColumns,
    r: RollupRows,
    answerIn?: InTransaction,
    spend?: () => SpendStatement,
  ): Promise<void> => {
    const slot = slots.acquire(r.types.length > sharedSlotMaxRows);
    try {
      if (!answerIn) await insertRows(appId, columns, r, slot, db, spend?.());
      else
        await inTransaction(database, async (trx) => {
          await insertRows(appId, columns, r, slot, trx.withTables<AnalyticsEventTables>(), spend?.());
          await answerIn(trx);
        });
    } finally {
      slots.release(slot);
    }
  };
  const insertRows = async (
    appId: string,
    e: EventColumns,
    r: RollupRows,
    slot: number,
    on: EventDb,
    spent?: SpendStatement,
  ): Promise<void> => {
    // One statement, two tables: the inserts run as data-modifying CTEs, so
    // the batch and its rollups commit together or not at all. The rollup
    // insert waits for the raw rows (`count(*)` of their RETURNING), so the
    // rollup rows are locked last and for as short a time as possible. An
    // existing row adds the batch's hourly counts element by element (`ADD_HOURS`).
    // A day is its UTC midnight in seconds (`to_timestamp`), never `'epoch' + n
    // days`, which lands on local midnight in a session zone with summer time.
    // The raw rows come from one text per column (`eventColumns`), split by
    // `string_to_array` and zipped by `unnest`; its text never changes, so it
    // is prepared once per connection (`PREPARED`).
    await guarded(() =>
      sql`${PREPARED}
        WITH raw AS (
          INSERT INTO analytics_events (app_id, type, at, properties, distinct_id, numbers)
          SELECT ${appId}::uuid, e.t, timestamptz 'epoch' + e.a * interval '1 millisecond', e.p::jsonb, e.d, e.n::jsonb
          FROM unnest(
            string_to_array(${e.types}::text, chr(30)),
            string_to_array(${e.ats}::text, ',')::bigint[],
            string_to_array(${e.properties}::text, chr(30)),
            ${e.distinctIds},
            string_to_array(${e.numbers}::text, chr(30), '')
          ) AS e(t, a, p, d, n)
          RETURNING 1
        ), raw_done AS (
          SELECT count(*) AS c FROM raw
        )${spent ? sql`, ${spent}` : sql``}
        INSERT INTO analytics_daily AS r (app_id, type, prop, day, value, slot, n, hours)
        SELECT ${appId}::uuid, x.t, x.k, to_timestamp(x.d * 86400), x.v, ${slot}::smallint, x.n, x.h::bigint[]
        FROM raw_done, unnest(${r.types}::text[], ${r.props}::text[], ${r.days}::bigint[], ${r.values}::text[], ${r.counts}::bigint[], ${r.hours}::text[])
          AS x(t, k, d, v, n, h)
        ON CONFLICT (app_id, type, prop, day, value, slot) DO UPDATE
        SET n = r.n + excluded.n,
            hours = ${ADD_HOURS}`.execute(on),
    );
  };

  return {
    kind: "sql",

    // Not async: a suspended async call keeps its arguments, and the events (about 270 KB for a batch of
    // 1,000) are not needed once their statement's parameters are made.
    insert(appId, events, spend) {
      if (events.length === 0) return Promise.resolve();
      return insertBatch(appId, eventColumns(events), rollupRows(events), undefined, spend);
    },

    insertWithin(appId, events, answerIn, spend) {
      if (events.length === 0) return inTransaction(database, answerIn);
      return insertBatch(appId, eventColumns(events), rollupRows(events), answerIn, spend);
    },

    async count(q) {
      return guarded(() => countSql(db, q));
    },

    async aggregate(q) {
      const filter = rollupFilter(q);
      if (filter !== undefined) return guarded(() => countFromRollups(db, q, filter));
      return guarded(() =>
        withEventReadSettings(database, (trx) => aggregateSql(trx.withTables<AnalyticsEventTables>(), q)),
      );
    },

    async funnel(q) {
      return guarded(() => funnelSql(db, q));
    },

    async stepEvents(q) {
      // By the (app, type, at) index, which carries the ids (index-only): only events with an id.
      const result = await sql<{ d: string; t: number; g: string | null }>`
        SELECT distinct_id AS d, (extract(epoch FROM at) * 1000)::float8 AS t,
          ${q.breakdown === undefined ? sql`NULL::text` : sql`properties->>${q.breakdown}`} AS g
        FROM analytics_events
        WHERE ${sql.join(
          [
            sql`app_id = ${q.appId}::uuid`,
            sql`type = ${q.type}`,
            sql`distinct_id IS NOT NULL`,
            sql`at >= ${new Date(q.since)}`,
            sql`at < ${new Date(q.until)}`,
            ...q.where.map(conditionSql),
          ],
          sql` AND `,
        )}`.execute(db);
      return result.rows.map((r) => ({ distinctId: r.d, at: Math.round(Number(r.t)), group: r.g ?? null }));
    },

    async deleteBefore(appId, before, batch) {
      // Raw rows in bounded batches (no key but the row's address); the rollups of the same whole days after them.
      // The events are partitioned (migration 0036), so an address is its partition (`tableoid`) and `ctid`:
      // the `ctid` list finds the rows in each partition at once, the pairs keep only the chosen ones.
      const raw = await sql`
        WITH chosen AS MATERIALIZED (
          SELECT tableoid AS t, ctid AS c FROM analytics_events
          WHERE app_id = ${appId}::uuid AND at < ${before} LIMIT ${batch} FOR UPDATE SKIP LOCKED
        )
        DELETE FROM analytics_events
        WHERE ctid = ANY (ARRAY(SELECT c FROM chosen)) AND (tableoid, ctid) IN (SELECT t, c FROM chosen)`.execute(db);
      const removed = Number(raw.numAffectedRows ?? 0);
      if (removed === batch) return removed;
      // The raw rows are gone: then the rollups of those days, in batches too (an app with many property
      // values over many days has more rollup rows than one statement should delete).
      for (let n = batch; n === batch;) {
        const rollups = await sql`
          DELETE FROM analytics_daily WHERE ctid = ANY (ARRAY(
            SELECT ctid FROM analytics_daily WHERE app_id = ${appId}::uuid AND day < ${before}
            LIMIT ${batch} FOR UPDATE SKIP LOCKED))`.execute(db);
        n = Number(rollups.numAffectedRows ?? 0);
      }
      return removed;
    },

    // The app's rows go with the app itself (a trigger on apps, migration 0003, in the same transaction).
    // Rows a batch in flight during the deletion inserted after it are the orphan sweep's (`appIds`).
    async deleteApp(appId) {
      const raw = await db.deleteFrom("analytics_events").where("app_id", "=", appId).executeTakeFirst();
      await db.deleteFrom("analytics_daily").where("app_id", "=", appId).execute();
      return Number(raw.numDeletedRows);
    },

    async appIds() {
      // The distinct app ids of both tables, one index probe per app (their primary key and index lead
      // with app_id): a scan of every row would cost the size of the tables, this the number of apps.
      const distinct = (table: "analytics_events" | "analytics_daily") =>
        sql<{ app_id: string | null }>`
        WITH RECURSIVE ids AS (
          (SELECT app_id FROM ${sql.table(table)} ORDER BY app_id LIMIT 1)
          UNION ALL
          SELECT (SELECT t.app_id FROM ${sql.table(table)} t WHERE t.app_id > ids.app_id ORDER BY t.app_id LIMIT 1)
          FROM ids WHERE ids.app_id IS NOT NULL
        )
        SELECT app_id FROM ids WHERE app_id IS NOT NULL`.execute(db);
      const [events, daily] = await Promise.all([distinct("analytics_events"), distinct("analytics_daily")]);
      return [...new Set([...events.rows, ...daily.rows].map((r) => r.app_id!))];
    },

    async close() {},
  };
}

type Range = [number, number];

/** The non-empty ranges among `ranges`. */
const nonEmpty = (...ranges: Range[]): Range[] => ranges.filter(([from, to]) => from < to);

/** `(x >= a AND x < b) OR ...` over the given ranges of a timestamptz expression (a column or the hour of an hourly count). */
function inRanges(expression: "at" | "day" | RawBuilder<Date>, ranges: Range[]) {
  const x = typeof expression === "string" ? sql.ref(expression) : expression;
  return sql.join(
    ranges.map(([from, to]) => sql`(${x} >= ${new Date(from)} AND ${x} < ${new Date(to)})`),
    sql` OR `,
  );
}

/**
 * Cuts `[since, until)` into the pieces each source counts exactly: raw
 * events for the partial hours at the ends, the days' hourly counts for whole hours,
 * daily rollups for whole UTC days (when the buckets are UTC days or coarser).
 */
export function planPieces(q: CountQuery, hourlyExact: boolean): { raw: Range[]; hourly: Range[]; daily: Range[] } {
  const firstHour = Math.ceil(q.since / HOUR_MS) * HOUR_MS;
  const lastHour = Math.floor(q.until / HOUR_MS) * HOUR_MS;
  if (!hourlyExact || firstHour >= lastHour) return { raw: [[q.since, q.until]], hourly: [], daily: [] };
  const raw = nonEmpty([q.since, firstHour], [lastHour, q.until]);
  const firstDay = Math.ceil(firstHour / DAY_MS) * DAY_MS;
  const lastDay = Math.floor(lastHour / DAY_MS) * DAY_MS;
  if (q.unit === "hour" || !isUtc(q.timezone) || firstDay >= lastDay)
    return { raw, hourly: [[firstHour, lastHour]], daily: [] };
  return { raw, hourly: nonEmpty([firstHour, firstDay], [lastDay, lastHour]), daily: [[firstDay, lastDay]] };
}

/**
 * A count the rollups answer (see `rollupFilter`): the events that carry
 * `prop`, with one of `values` when given. The rollup rows of `(prop, value)`
 * hold exactly those events' counts.
 */
interface RollupFilter {
  prop: string;
  values?: string[] | undefined;
  /** The same condition on the raw events, for the partial hours at the ends. */
  condition: Condition;
}

async function countSql(db: EventDb, q: CountQuery, filter?: RollupFilter, rawOnly = false): Promise<CountBucket[]> {
  const zone = isUtc(q.timezone) ? "UTC" : q.timezone!;
  const hourlyExact = !rawOnly && (zone === "UTC" || q.unit === "hour" || (await boundariesOnWholeHours(db, q, zone)));
  const pieces = planPieces(q, hourlyExact);

  // group -> count, per bucket start
  const buckets = new Map<number, Map<string | null, number>>();
  const add = (at: number, group: string | null, n: number) => {
    let groups = buckets.get(at);
    if (!groups) buckets.set(at, (groups = new Map<string | null, number>()));
    groups.set(group, (groups.get(group) ?? 0) + n);
  };
  const property = filter?.prop ?? q.groupBy;
  const props = filter ? [filter.prop] : q.groupBy === undefined ? [""] : ["", q.groupBy];
  // A filtered count reads only the filter's rows (any value for `exists`), each counted as it is. Either
  // also reads the property's number marks (`numberMark`, value ''): any in range, and the raw events
  // answer. Lists rather than an OR, so that both stay conditions of the primary key's index; the last
  // condition keeps a filtered property's own rows to the filter's values ('' only when asked for).
  const read = property === undefined ? props : [...props, numberMark(property)];
  const wanted =
    filter?.values === undefined
      ? sql`prop = ANY(${read}::text[])`
      : sql`prop = ANY(${read}::text[]) AND value = ANY(${[...filter.values, ""]}::text[])
          AND (prop <> ${filter.prop} OR value = ANY(${filter.values}::text[]))`;
  let marked = false;
  const addRollups = (rows: { b: Date; prop: string; value: string; n: number }[]) => {
    for (const row of rows) {
      const at = new Date(row.b).getTime();
      const n = Number(row.n);
      if (property !== undefined && row.prop === numberMark(property)) marked = true;
      else if (row.prop === "" || filter) add(at, null, n);
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
        WHERE app_id = ${q.appId}::uuid AND type = ${q.type} AND ${wanted} AND (${inRanges("day", pieces.daily)})
        GROUP BY 1, 2, 3`
        .execute(db)
        .then((r) => addRollups(r.rows)),
    );
  }
  if (pieces.hourly.length > 0) {
    // Each hour of the days that hold the pieces, from the days' hourly counts.
    const hour = sql<Date>`(day + (u.i - 1) * interval '1 hour')`;
    const days = pieces.hourly.map(([from, to]): Range => [Math.floor(from / DAY_MS) * DAY_MS, to]);
    work.push(
      sql<{ b: Date; prop: string; value: string; n: number }>`
        SELECT date_trunc(${q.unit}, ${hour}, ${zone}) AS b, prop, value, sum(u.n)::bigint AS n
        FROM analytics_daily, unnest(hours) WITH ORDINALITY AS u(n, i)
        WHERE app_id = ${q.appId}::uuid AND type = ${q.type} AND ${wanted} AND (${inRanges("day", days)})
          AND u.n <> 0 AND (${inRanges(hour, pieces.hourly)})
        GROUP BY 1, 2, 3`
        .execute(db)
        .then((r) => addRollups(r.rows)),
    );
  }
  if (pieces.raw.length > 0) {
    const group =
      q.groupBy === undefined ? sql<string | null>`NULL::text` : sql<string | null>`properties->>${q.groupBy}`;
    work.push(
      sql<{ b: Date; g: string | null; n: number }>`
        SELECT date_trunc(${q.unit}, at, ${zone}) AS b, ${group} AS g, count(*)::bigint AS n
        FROM analytics_events
        WHERE app_id = ${q.appId}::uuid AND type = ${q.type} AND (${inRanges("at", pieces.raw)})${filter ? sql` AND ${conditionSql(filter.condition)}` : sql``}
        GROUP BY 1, 2`
        .execute(db)
        .then((r) => {
          for (const row of r.rows) add(new Date(row.b).getTime(), row.g, Number(row.n));
        }),
    );
  }
  // On PostgreSQL the pieces run at once on separate connections.
  await Promise.all(work);
  if (marked) return countSql(db, q, filter, true);

  const out: CountBucket[] = [];
  for (const [truncated, groups] of buckets) {
    const at = firstInstantOfWallTime(truncated, q.timezone);
    for (const [group, count] of groups) if (count > 0) out.push({ at, group, count });
  }
  return out.sort(compareBuckets);
}

/**
 * True when every bucket boundary of the range, as Postgres computes it in
 * `zone`, is a whole UTC hour, so that buckets are exact sums of hourly counts.
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

/** A property's value as a condition or an aggregate reads it: its number for `number` properties, else its string. */
function valueOf(property: string | undefined, kind: Condition["kind"]): RawBuilder<unknown> {
  if (property === undefined) return sql`distinct_id`;
  return kind === "number" ? sql`(numbers->>${property})::float8` : sql`(properties->>${property})`;
}

/** Whether the event carries the property (or a distinctId). */
function carries(property: string | undefined, kind: Condition["kind"]): RawBuilder<unknown> {
  if (property === undefined) return sql`distinct_id IS NOT NULL`;
  // A number property's numeric form is what the arithmetic reads: an event without it has none to give.
  return kind === "number" ? sql`numbers ? ${property}` : sql`properties ? ${property}`;
}

/** A condition's value as SQL compares it: numbers as float8, booleans as their stored strings. */
function scalar(v: string | number | boolean, kind: Condition["kind"]): RawBuilder<unknown> {
  if (kind === "number") return sql`${v}::float8`;
  return sql`${typeof v === "boolean" ? String(v) : v}::text`;
}

function conditionSql(c: Condition): RawBuilder<unknown> {
  const x = valueOf(c.property, c.kind);
  const v = c.value;
  switch (c.op) {
    // Presence is read where every property is, its string (as the MongoDB store does).
    case "exists":
      return v === false ? sql`NOT (${carries(c.property, "string")})` : carries(c.property, "string");
    case "in": {
      const list = (v as (string | number | boolean)[]).map((e) => (typeof e === "boolean" ? String(e) : e));
      return c.kind === "number" ? sql`${x} = ANY(${list}::float8[])` : sql`${x} = ANY(${list}::text[])`;
    }
    case "eq":
      return sql`${x} = ${scalar(v as string, c.kind)}`;
    // The complement of eq: events without the property match too.
    case "neq":
      return sql`${x} IS DISTINCT FROM ${scalar(v as string, c.kind)}`;
    case "contains":
      return sql`strpos(${x}, ${v}::text) > 0`;
    case "gt":
      return sql`${x} > ${scalar(v as number, c.kind)}`;
    case "gte":
      return sql`${x} >= ${scalar(v as number, c.kind)}`;
    case "lt":
      return sql`${x} < ${scalar(v as number, c.kind)}`;
    case "lte":
      return sql`${x} <= ${scalar(v as number, c.kind)}`;
  }
}

/**
 * What the statements over the raw events of an extended query ask of
 * PostgreSQL for their own transaction (`set_config(..., true)` is `SET
 * LOCAL`): enough memory to group in a hash table, and no JIT compilation.
 * A sum by day and two properties over 30 days groups some 170,000 events
 * into about 1,200 groups, but the planner cannot know how few (the groups
 * are expressions over jsonb), estimates one group per event, and with the
 * default 4 MB `work_mem` sorted all 170,000 rows on disk instead; the range's
 * unique count hashed its 82,000 ids in five batches spilled to disk. The
 * same estimate put the statement above PostgreSQL's JIT threshold, and
 * compiling it cost about 28 ms, more than it saved. 32 MB is held only while
 * one such statement runs (hash tables may take twice `work_mem`). Parallel
 * workers are costed as cheaper than PostgreSQL's defaults (which suit
 * statements of seconds): the sum's scan of 12,700 pages and its jsonb
 * reads then run on two workers beside the leader, where the default costs
 * kept it on one core (EXPLAIN ANALYZE: half the time; no gain where no core
 * is idle). Where no worker can start (PGlite, or every worker busy), the
 * leader does the work.
 */
const EVENT_READ_SETTINGS = sql`
  SELECT set_config('work_mem', '32MB', true), set_config('jit', 'off', true),
    set_config('parallel_setup_cost', '100', true), set_config('parallel_tuple_cost', '0.01', true)`;

function withEventReadSettings<T>(database: Db, work: (trx: Db) => Promise<T>): Promise<T> {
  return inTransaction(database, async (trx) => {
    await EVENT_READ_SETTINGS.execute(trx);
    return work(trx);
  });
}

/** `date_bin`'s origin: a Monday at 00:00 UTC, so that week bins start on Mondays as `date_trunc`'s do. */
const BIN_ORIGIN = sql`timestamptz '1970-01-05 00:00:00+00'`;
const BIN_WIDTH = { hour: "1 hour", day: "1 day", week: "7 days" } as const;

/**
 * The start of an event's bucket. In UTC, hours, days and weeks are bins of
 * fixed width from a Monday midnight, and `date_bin` finds them with integer
 * arithmetic, where `date_trunc` with a zone looks the zone up for every event
 * (on 170,000 events, some 60 of the 230 ms of CPU a sum by day and two
 * properties took). Months, and buckets in any other zone, are `date_trunc`'s.
 */
function bucketOf(unit: NonNullable<AggregateQuery["unit"]>, zone: string): RawBuilder<Date> {
  if (zone === "UTC" && unit !== "month") return sql<Date>`date_bin(${BIN_WIDTH[unit]}::interval, at, ${BIN_ORIGIN})`;
  return sql<Date>`date_trunc(${unit}, at, ${zone})`;
}

/**
 * Aggregates, filters and breakdowns over the raw events (`analytics_events`,
 * by its (app, type, at) index): the rollups hold counts per single property
 * value, which answer none of these. Only events that carry `of` (or a
 * distinctId for unique users) are counted. With `keep`, the groups not in it
 * are folded into one `other` row per bucket, in the same statement (a unique
 * count of the folded groups is not a sum of theirs).
 */
async function aggregateSql(db: EventDb, q: AggregateQuery): Promise<AggregateRow[]> {
  const zone = isUtc(q.timezone) ? "UTC" : q.timezone!;
  const bucket = q.unit === undefined ? sql`NULL::timestamptz` : bucketOf(q.unit, zone);
  const conditions = [
    sql`app_id = ${q.appId}::uuid`,
    sql`type = ${q.type}`,
    sql`at >= ${new Date(q.since)}`,
    sql`at < ${new Date(q.until)}`,
    ...q.where.map(conditionSql),
  ];
  // Unique values are counted on their stored strings, whatever the kind (a number's string is unique to it).
  const ofKind = q.aggregate === "unique" ? "string" : (q.of?.kind ?? "string");
  if (q.aggregate !== "count") conditions.push(carries(q.of?.name, ofKind));
  const x = q.aggregate === "count" ? sql`NULL` : valueOf(q.of?.name, ofKind);
  if (q.aggregate === "unique" && q.groupBy.length === 0 && q.unit !== undefined && zone === "UTC")
    return uniquePerUtcBucket(db, q, q.unit, conditions, x);
  if (q.aggregate === "unique" && q.groupBy.length === 0 && q.unit === undefined) {
    // The whole range's unique count by hashing the values (one pass); `count(DISTINCT)` sorts them all.
    const whole = await sql<{ n: string | null; v: number }>`
      SELECT sum(c)::bigint AS n, count(*)::float8 AS v
      FROM (SELECT ${x} AS x, count(*) AS c FROM analytics_events WHERE ${sql.join(conditions, sql` AND `)} GROUP BY 1) u`.execute(
      db,
    );
    const row = whole.rows[0];
    return row && Number(row.n ?? 0) > 0
      ? [{ at: null, groups: [], other: false, count: Number(row.n), value: Number(row.v) }]
      : [];
  }
  const groups = q.groupBy.map((p) => sql`(properties->>${p})`);
  const kept =
    q.keep === undefined
      ? sql`true`
      : sql`jsonb_build_array(${sql.join(groups)}) = ANY(ARRAY(SELECT jsonb_array_elements(${JSON.stringify(q.keep)}::jsonb)))`;
  const value = {
    count: sql`count(*)::float8`,
    unique: sql`count(DISTINCT x COLLATE "C")::float8`,
    sum: sql`sum(x)`,
    avg: sql`avg(x)`,
    min: sql`min(x)`,
    max: sql`max(x)`,
  }[q.aggregate];
  const groupColumns = q.groupBy.map((_, i) => sql`CASE WHEN k THEN ${sql.ref(`g${i}`)} END AS ${sql.ref(`g${i}`)}`);
  const events = sql`
      SELECT ${bucket} AS b, ${sql.join([...groups.map((g, i) => sql`${g} AS ${sql.ref(`g${i}`)}`), sql`${kept} AS k`, sql`${x} AS x`])}
      FROM analytics_events
      WHERE ${sql.join(conditions, sql` AND `)}`;
  const grouped = sql`
    SELECT b, ${sql.join([...groupColumns, sql`NOT k AS other`])}, count(*)::bigint AS n, ${value} AS v
    FROM (${events}) e
    GROUP BY ${sql.join(Array.from({ length: q.groupBy.length + 2 }, (_, i) => sql.raw(String(i + 1))))}`;
  // With `maxGroups`, the rows of the first `maxGroups + 1` groups in any fixed order: enough to tell.
  const bounded =
    q.maxGroups === undefined || q.groupBy.length === 0
      ? grouped
      : sql`
    SELECT * FROM (
      SELECT r.*, dense_rank() OVER (ORDER BY ${sql.join(q.groupBy.map((_, i) => sql`${sql.ref(`g${i}`)} COLLATE "C"`))}) AS rank
      FROM (${grouped}) r
    ) r WHERE rank <= ${q.maxGroups + 1}`;
  const result = await sql<
    Record<string, unknown> & { b: Date | null; other: boolean; n: string; v: number }
  >`${bounded}`.execute(db);
  return result.rows.map((r) => ({
    at: r.b === null ? null : firstInstantOfWallTime(new Date(r.b).getTime(), q.timezone),
    groups: q.groupBy.map((_, i) => (r[`g${i}`] as string | null) ?? null),
    other: r.other,
    count: Number(r.n),
    value: Number(r.v),
  }));
}

/**
 * Unique values per UTC bucket without a breakdown (unique users per day, the
 * common question), one bucket at a time: each bucket's values are counted by
 * their own index range, so each sort holds one bucket's values in memory,
 * where one statement over the range sorted every value of the range by
 * bucket first (on the benchmark's dataset, about twice the time). Values
 * are compared in byte order (`COLLATE "C"`): the database's own collation
 * (C.UTF-8 under glibc, say) sorts with `strcoll` and without abbreviated
 * keys, and the count is the same (a deterministic collation's equal strings
 * are equal bytes); the day-by-day sorts took a third less CPU. The
 * buckets are stepped on `timestamp` in UTC, whatever the session's zone;
 * their number is bounded by the query's bucket limit.
 */
async function uniquePerUtcBucket(
  db: EventDb,
  q: AggregateQuery,
  unit: NonNullable<AggregateQuery["unit"]>,
  conditions: RawBuilder<unknown>[],
  x: RawBuilder<unknown>,
): Promise<AggregateRow[]> {
  const since = new Date(q.since);
  const until = new Date(q.until);
  const step = `1 ${unit}`;
  const result = await sql<{ b: Date; n: string; v: number }>`
    SELECT s.b, u.n, u.v
    FROM (
      SELECT w AT TIME ZONE 'UTC' AS b, (w + ${step}::interval) AT TIME ZONE 'UTC' AS e
      FROM generate_series(
        date_trunc(${unit}, ${since}::timestamptz AT TIME ZONE 'UTC'),
        ${until}::timestamptz AT TIME ZONE 'UTC' - interval '1 microsecond',
        ${step}::interval) AS w
    ) s,
    LATERAL (
      SELECT count(*)::bigint AS n, count(DISTINCT ${x} COLLATE "C")::float8 AS v
      FROM analytics_events
      WHERE ${sql.join(conditions, sql` AND `)} AND at >= s.b AND at < s.e
    ) u
    WHERE u.n > 0`.execute(db);
  return result.rows.map((r) => ({
    at: new Date(r.b).getTime(),
    groups: [],
    other: false,
    count: Number(r.n),
    value: Number(r.v),
  }));
}

/**
 * The rollup filter of an extended query the rollups answer exactly, or
 * undefined: a count with no condition and at most one breakdown (the base
 * API's count, asked with an extension such as `limit`), or a count with no
 * breakdown and one condition on a string or boolean property that selects
 * whole rollup rows: `eq` or `in` (its stored strings), or `exists`. The
 * rollups count each property value on its own, so two conditions, or a
 * condition with a breakdown, need the raw events; so does a number
 * property, compared as a number rather than by its stored string.
 */
function rollupFilter(q: AggregateQuery): RollupFilter | null | undefined {
  if (q.aggregate !== "count") return undefined;
  if (q.where.length === 0) return q.groupBy.length <= 1 ? null : undefined;
  if (q.where.length > 1 || q.groupBy.length > 0) return undefined;
  const c = q.where[0];
  if (c.property === undefined || c.kind === "number") return undefined;
  const stored = (v: ConditionScalar) => (typeof v === "boolean" ? String(v) : String(v));
  switch (c.op) {
    case "eq":
      return { prop: c.property, values: [stored(c.value as ConditionScalar)], condition: c };
    case "in":
      return { prop: c.property, values: (c.value as ConditionScalar[]).map(stored), condition: c };
    case "exists":
      return c.value === true ? { prop: c.property, condition: c } : undefined;
    default:
      return undefined;
  }
}

/**
 * A count from the rollups (`rollupFilter`), as `aggregateSql` would answer
 * it: one row per bucket and group, the groups not in `keep` folded into one
 * `other` row per bucket. Without a unit, the whole range's count is the sum
 * of its UTC days' (whole counts: the sum is exact).
 */
async function countFromRollups(db: EventDb, q: AggregateQuery, filter: RollupFilter | null): Promise<AggregateRow[]> {
  const buckets = await countSql(
    db,
    {
      appId: q.appId,
      type: q.type,
      since: q.since,
      until: q.until,
      unit: q.unit ?? "day",
      timezone: q.unit === undefined ? undefined : q.timezone,
      groupBy: q.groupBy[0],
    },
    filter ?? undefined,
  );
  const keep = q.keep === undefined ? undefined : new Set(q.keep.map((k) => JSON.stringify(k)));
  const rows = new Map<string, AggregateRow>();
  for (const b of buckets) {
    const at = q.unit === undefined ? null : b.at;
    const groups = q.groupBy.length === 0 ? [] : [b.group];
    const other = keep !== undefined && !keep.has(JSON.stringify(groups));
    const key = JSON.stringify([at, other ? null : groups, other]);
    const row = rows.get(key);
    if (row) {
      row.count += b.count;
      row.value += b.count;
    } else
      rows.set(key, { at, groups: other ? q.groupBy.map(() => null) : groups, other, count: b.count, value: b.count });
  }
  return [...rows.values()];
}

/**
 * A funnel in the database (the rules are `computeFunnel`'s, in funnel.ts),
 * one statement, set-based: the first step's users and their start (the
 * first event of step 1 in range; with a breakdown, the least value among
 * events at that instant, null first), then each later step joined to the
 * users who reached the previous one, by hash join on the distinctId, keeping
 * each user's first event after the previous step and within the window.
 * What comes back is per step (and per group): the users who reached it and
 * the two middle values of the milliseconds from the previous step, so the
 * answer is the same whatever the number of events, and the memory this
 * process needs is that of the groups answered. The groups are ranked in the
 * statement too (most starting users first, then the value in code-point
 * order, null first); those beyond `limit` are folded into one.
 */
async function funnelSql(db: EventDb, q: FunnelQuery): Promise<FunnelCounts> {
  const ms = (t: number) => new Date(t);
  const stepConditions = (k: number, until: number) =>
    sql.join(
      [
        sql`app_id = ${q.appId}::uuid`,
        sql`type = ${q.steps[k].type}`,
        sql`distinct_id IS NOT NULL`,
        sql`at >= ${ms(q.since)}`,
        sql`at < ${ms(until)}`,
        ...q.steps[k].where.map(conditionSql),
      ],
      sql` AND `,
    );
  const breakdown = q.breakdown;
  const first =
    breakdown === undefined
      ? sql`
        SELECT distinct_id AS d, min(at) AS t0, min(at) AS tp, NULL::text AS g
        FROM analytics_events WHERE ${stepConditions(0, q.until)}
        GROUP BY distinct_id`
      : sql`
        SELECT DISTINCT ON (distinct_id) distinct_id AS d, at AS t0, at AS tp, properties->>${breakdown} AS g
        FROM analytics_events WHERE ${stepConditions(0, q.until)}
        ORDER BY distinct_id, at, properties->>${breakdown} COLLATE "C" NULLS FIRST`;
  // Each group's rank among the first step's groups, carried along by every user of it.
  const ranked =
    breakdown === undefined
      ? sql`SELECT d, t0, tp, g, 1::bigint AS r FROM starts`
      : sql`
        SELECT d, t0, tp, g, dense_rank() OVER (ORDER BY users DESC, g COLLATE "C" NULLS FIRST) AS r
        FROM (SELECT starts.*, count(*) OVER (PARTITION BY g) AS users FROM starts) f`;
  const window = sql`${q.windowMs}::float8 * interval '1 millisecond'`;
  const later = q.steps.slice(1).map((step, i) => {
    const k = i + 1;
    const previous = sql.ref(`s${k - 1}`);
    // One event never counts for two steps: after a step of the same type, strictly after it.
    const after = step.type === q.steps[k - 1].type ? sql`at > p.tp` : sql`at >= p.tp`;
    return sql`${sql.ref(`s${k}`)} AS (
        SELECT p.d, p.t0, min(at) AS tp, p.g, p.r,
          (extract(epoch FROM min(at)) - extract(epoch FROM p.tp)) * 1000 AS ms
        FROM ${previous} p JOIN analytics_events e ON e.distinct_id = p.d
        WHERE ${stepConditions(k, q.laterUntil)} AND ${after} AND at <= p.t0 + ${window}
        GROUP BY p.d, p.t0, p.tp, p.g, p.r
      )`;
  });
  const reached = sql.join(
    q.steps.map((_, k) =>
      k === 0
        ? sql`SELECT 0 AS k, g, r, NULL::numeric AS ms FROM s0`
        : sql`SELECT ${sql.lit(k)} AS k, g, r, ms FROM ${sql.ref(`s${k}`)}`,
    ),
    sql` UNION ALL `,
  );
  const result = await sql<{
    k: number;
    rank: string | null;
    g: string | null;
    whole: number;
    users: string;
    lo: string | null;
    hi: string | null;
    groups: string | null;
  }>`
    WITH starts AS (${first}),
    s0 AS (${ranked}),
    ${sql.join(later, sql`, `)}${later.length > 0 ? sql`, ` : sql``}
    reached AS (${reached})
    SELECT k, ${breakdown === undefined ? sql`0 AS rank, NULL::text AS g, 1 AS whole` : sql`rank, min(g COLLATE "C") AS g, GROUPING(rank) AS whole`}, count(*) AS users,
      percentile_disc(0.5) WITHIN GROUP (ORDER BY ms) AS lo,
      percentile_disc(0.5) WITHIN GROUP (ORDER BY ms DESC) AS hi,
      (SELECT max(r) FROM s0) AS groups
    FROM (SELECT k, g, ms, CASE WHEN r <= ${q.limit} THEN r ELSE 0 END AS rank FROM reached) x
    GROUP BY ${breakdown === undefined ? sql`k` : sql`GROUPING SETS ((k), (k, rank))`}`.execute(db);
  const empty = () => q.steps.map((): FunnelStepCounts => ({ users: 0 }));
  const steps = empty();
  const groups = new Map<number, { group: string | null; other: boolean; steps: FunnelStepCounts[] }>();
  let groupCount = 0;
  for (const row of result.rows) {
    const counts: FunnelStepCounts = {
      users: Number(row.users),
      lowerMiddleMs: row.lo === null ? undefined : Number(row.lo),
      upperMiddleMs: row.hi === null ? undefined : Number(row.hi),
    };
    groupCount = Number(row.groups ?? 0);
    if (Number(row.whole) === 1) {
      steps[row.k] = counts;
      continue;
    }
    const rank = Number(row.rank);
    let group = groups.get(rank);
    if (!group) groups.set(rank, (group = { group: rank === 0 ? null : row.g, other: rank === 0, steps: empty() }));
    group.steps[row.k] = counts;
  }
  if (breakdown === undefined) return { steps, groups: [], otherGroups: 0 };
  // The kept groups by rank, the folded one last.
  const order = [...groups.keys()].sort((a, b) => (a === 0 ? 1 : b === 0 ? -1 : a - b));
  return { steps, groups: order.map((r) => groups.get(r)!), otherGroups: Math.max(0, groupCount - q.limit) };
}
