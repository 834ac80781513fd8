/**
 * Events on MongoDB: one time-series collection for every app.
 *
 * - `timeField` `at`, `metaField` `meta` = `{ app, type }`: MongoDB groups the
 *   events of one app and type into buckets of one hour
 *   (`bucketMaxSpanSeconds` = `bucketRoundingSeconds` = 3600). Fixed, aligned
 *   buckets keep counting on the bucket-summary fast path.
 * - Properties are measurements under `p`. A property name may contain `.`,
 *   which MongoDB reads as a path; it is stored with `:` instead (a character
 *   the name pattern never allows), see `fieldName`.
 * - Counting is one `$match` on meta and time, one `$group` on `$dateTrunc`
 *   (`startOfWeek: "monday"`, `timezone`), built by the pure
 *   `buildCountPipeline` so tests can run it without a server.
 *
 * Whole-batch semantics: time-series collections take no multi-document
 * transactions, so every event of a batch carries the batch id `b`; when an
 * insert fails midway, the events of that batch already written are deleted
 * before the error is answered (502); when even that fails, the 502 says the
 * outcome is unknown (`outcomeUnknown`: the batch stays counted, and a keyed
 * retry gets the same 502 instead of storing part of it twice).
 */
import crypto from "node:crypto";
import { MongoClient, MongoError, type Collection, type Document } from "mongodb";
import type { Unit } from "./buckets.ts";
import { firstInstantOfWallTime, isUtc } from "./buckets.ts";
import {
  compareBuckets,
  upstreamError,
  type AggregateQuery,
  type AggregateRow,
  type Condition,
  type StepEvent,
  type StepEventsQuery,
  type CountBucket,
  type CountQuery,
  type EventStore,
  type StoredEvent,
} from "./event-store.ts";

const COLLECTION = "analytics_events";

/** A stored event document. */
export interface EventDocument {
  at: Date;
  meta: { app: string; type: string };
  p: Record<string, string>;
  /** The `number` properties as numbers (sums, averages, comparisons); absent when none. */
  n?: Record<string, number>;
  /** Who did it; absent when unknown. A measurement, not meta: it varies within an hour's bucket. */
  distinctId?: string;
  /** Batch id, for undoing a half-written batch. */
  b: string;
}

/** The stored field name of a property (`.` would be read as a path). */
export function fieldName(property: string): string {
  return property.replaceAll(".", ":");
}

/** The documents of a batch. Pure. */
export function toDocuments(appId: string, events: readonly StoredEvent[], batchId: string): EventDocument[] {
  return events.map((e) => {
    const p: Record<string, string> = {};
    for (const key in e.properties) p[fieldName(key)] = e.properties[key]!;
    const doc: EventDocument = { at: new Date(e.at), meta: { app: appId, type: e.type }, p, b: batchId };
    if (e.numbers !== undefined) {
      const n: Record<string, number> = {};
      for (const key in e.numbers) n[fieldName(key)] = e.numbers[key]!;
      doc.n = n;
    }
    if (e.distinctId !== undefined) doc.distinctId = e.distinctId;
    return doc;
  });
}

/** The app's events before `before` (retention), or all of them. */
export function eventsFilter(appId: string, before?: Date): Document {
  return before ? { "meta.app": appId, at: { $lt: before } } : { "meta.app": appId };
}

/**
 * The aggregation pipeline that counts one query. Pure: the same input gives
 * the same pipeline, which tests run against fixture events.
 * Output documents: `{ at: Date, group: string | null, count: number }`,
 * sorted by `at`, then `group` (null first).
 */
export function buildCountPipeline(q: CountQuery): Document[] {
  const trunc: Record<string, unknown> = { date: "$at", unit: q.unit satisfies Unit, binSize: 1 };
  if (q.unit === "week") trunc.startOfWeek = "monday";
  if (!isUtc(q.timezone)) trunc.timezone = q.timezone;
  return [
    { $match: { "meta.app": q.appId, "meta.type": q.type, at: { $gte: new Date(q.since), $lt: new Date(q.until) } } },
    {
      $group: {
        _id: {
          at: { $dateTrunc: trunc },
          group: q.groupBy === undefined ? null : { $ifNull: [`$p.${fieldName(q.groupBy)}`, null] },
        },
        count: { $sum: 1 },
      },
    },
    { $sort: { "_id.at": 1, "_id.group": 1 } },
    { $project: { _id: 0, at: "$_id.at", group: "$_id.group", count: 1 } },
  ];
}

/** The stored path of a property as a condition or an aggregate reads it (numbers under `n`, the rest under `p`). */
function pathOf(property: string | undefined, kind: Condition["kind"]): string {
  if (property === undefined) return "distinctId";
  return `${kind === "number" ? "n" : "p"}.${fieldName(property)}`;
}

/** A condition's value as stored: booleans are strings under `p`. */
function stored(v: string | number | boolean): string | number {
  return typeof v === "boolean" ? String(v) : v;
}

/** `contains` as a regular expression matching the text literally. */
function literal(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** One condition of `where` as a `$match` clause. */
function conditionMatch(c: Condition): Document {
  const path = pathOf(c.property, c.kind);
  const v = c.value;
  switch (c.op) {
    case "exists":
      // Presence is read where every property is: its string under `p`.
      return { [pathOf(c.property, "string")]: { $exists: v !== false } };
    case "eq":
      return { [path]: stored(v as string) };
    // The complement of eq: `$ne` matches events without the property too.
    case "neq":
      return { [path]: { $ne: stored(v as string) } };
    case "in":
      return { [path]: { $in: (v as (string | number | boolean)[]).map(stored) } };
    case "contains":
      return { [path]: { $regex: literal(v as string) } };
    case "gt":
    case "gte":
    case "lt":
    case "lte":
      return { [path]: { [`$${c.op}`]: v } };
  }
}

/**
 * The aggregation pipeline of an aggregate query (`AggregateQuery`): the same
 * answer as the SQL store's, row for row. Pure, for tests. Output documents:
 * `{ at: Date | null, g: (string | null)[], other: boolean, count, value }`.
 */
export function buildAggregatePipeline(q: AggregateQuery): Document[] {
  const match: Document[] = q.where.map(conditionMatch);
  const unique = q.aggregate === "unique";
  const ofPath = pathOf(q.of?.name, unique ? "string" : (q.of?.kind ?? "string"));
  if (q.aggregate !== "count") match.push({ [ofPath]: { $exists: true } });
  const groups = q.groupBy.map((p) => ({ $ifNull: [`$p.${fieldName(p)}`, null] }));
  const trunc: Record<string, unknown> = { date: "$at", unit: q.unit ?? "day", binSize: 1 };
  if (q.unit === "week") trunc.startOfWeek = "monday";
  if (!isUtc(q.timezone)) trunc.timezone = q.timezone;
  // Literals: a group value such as "$x" must not be read as a field path.
  const kept = q.keep === undefined ? { $literal: true } : { $in: [groups, { $literal: q.keep }] };
  const accumulator = {
    count: { $sum: 1 },
    unique: { $addToSet: `$${ofPath}` },
    sum: { $sum: `$${ofPath}` },
    avg: { $avg: `$${ofPath}` },
    min: { $min: `$${ofPath}` },
    max: { $max: `$${ofPath}` },
  }[q.aggregate];
  return [
    {
      $match: {
        "meta.app": q.appId,
        "meta.type": q.type,
        at: { $gte: new Date(q.since), $lt: new Date(q.until) },
        ...(match.length > 0 ? { $and: match } : {}),
      },
    },
    { $addFields: { _k: kept } },
    {
      $group: {
        _id: {
          at: q.unit === undefined ? null : { $dateTrunc: trunc },
          g: groups.map((g) => ({ $cond: ["$_k", g, null] })),
          other: { $not: ["$_k"] },
        },
        count: { $sum: 1 },
        value: accumulator,
      },
    },
    {
      $project: {
        _id: 0,
        at: "$_id.at",
        g: "$_id.g",
        other: "$_id.other",
        count: 1,
        value: unique ? { $size: "$value" } : "$value",
      },
    },
  ];
}

/** An output document of `buildAggregatePipeline`. */
export interface AggregateDocument {
  at: Date | null;
  g: (string | null)[];
  other: boolean;
  count: number;
  value: number;
}

/** The store's rows from the pipeline's documents (zoned bucket starts made the first instant of their wall time). */
export function aggregateRows(docs: readonly AggregateDocument[], q: AggregateQuery): AggregateRow[] {
  return docs.map((r) => ({
    at: r.at === null ? null : firstInstantOfWallTime(r.at.getTime(), q.timezone),
    groups: r.g.map((x) => x ?? null),
    other: r.other,
    count: Number(r.count),
    value: Number(r.value),
  }));
}

/** The pipeline of one funnel step's events (`StepEventsQuery`). Output: `{ d, at: Date, g }`. Pure. */
export function buildStepPipeline(q: StepEventsQuery): Document[] {
  return [
    {
      $match: {
        "meta.app": q.appId,
        "meta.type": q.type,
        at: { $gte: new Date(q.since), $lt: new Date(q.until) },
        $and: [{ distinctId: { $exists: true } }, ...q.where.map(conditionMatch)],
      },
    },
    {
      $project: {
        _id: 0,
        d: "$distinctId",
        at: 1,
        g: q.breakdown === undefined ? { $literal: null } : { $ifNull: [`$p.${fieldName(q.breakdown)}`, null] },
      },
    },
  ];
}

/** The store's step events from the pipeline's documents. */
export function stepEventsOf(docs: readonly { d: string; at: Date; g: string | null }[]): StepEvent[] {
  return docs.map((r) => ({ distinctId: r.d, at: r.at.getTime(), group: r.g ?? null }));
}

export interface MongoStoreOptions {
  url: string;
  dbName: string;
  collection?: string;
}

export function createMongoEventStore(options: MongoStoreOptions): EventStore {
  const hasTimeout = /[?&]serverSelectionTimeoutMS=/i.test(options.url);
  const client = new MongoClient(options.url, {
    ...(hasTimeout ? {} : { serverSelectionTimeoutMS: 5000 }),
    appName: "platform-batteries",
  });
  const name = options.collection ?? COLLECTION;
  let ready: Promise<Collection<EventDocument>> | undefined;

  /** Creates the collection on first use; the server may be down at start. */
  const collection = (): Promise<Collection<EventDocument>> => {
    ready ??= (async () => {
      const db = client.db(options.dbName);
      try {
        await db.createCollection(name, {
          timeseries: { timeField: "at", metaField: "meta", bucketMaxSpanSeconds: 3600, bucketRoundingSeconds: 3600 },
        });
      } catch (err) {
        if (!(
          err instanceof MongoError &&
          (err.code === 48 || (err as { codeName?: string }).codeName === "NamespaceExists")
        ))
          throw err;
      }
      const coll = db.collection<EventDocument>(name);
      // Unique users and funnels read the ids of one app's type over a range (a secondary index on a
      // measurement, which time-series collections take from MongoDB 6.0; creating it again is a no-op).
      await coll.createIndex({ "meta.app": 1, "meta.type": 1, distinctId: 1, at: 1 });
      return coll;
    })().catch((err: unknown) => {
      ready = undefined;
      throw err;
    });
    return ready;
  };

  return {
    kind: "mongodb",

    async insert(appId, events) {
      if (events.length === 0) return;
      const batchId = crypto.randomUUID();
      let coll: Collection<EventDocument>;
      try {
        coll = await collection();
      } catch (err) {
        throw upstreamError(err);
      }
      try {
        await coll.insertMany(toDocuments(appId, events, batchId), { ordered: true });
      } catch (err) {
        // Never half a batch: take back what was written. If that fails too (the store is gone), part
        // of the batch may be stored: the error says so, so that it stays counted and a keyed retry is
        // answered this error again instead of storing that part twice.
        const undone = await coll.deleteMany({ "meta.app": appId, b: batchId }).then(
          () => true,
          () => false,
        );
        throw upstreamError(err, !undone);
      }
    },

    async count(q) {
      try {
        const coll = await collection();
        const rows = await coll
          .aggregate<{ at: Date; group: string | null; count: number }>(buildCountPipeline(q))
          .toArray();
        return rows
          .map((r): CountBucket => ({
            at: firstInstantOfWallTime(r.at.getTime(), q.timezone),
            group: r.group ?? null,
            count: Number(r.count),
          }))
          .sort(compareBuckets);
      } catch (err) {
        throw upstreamError(err);
      }
    },

    async aggregate(q) {
      try {
        const coll = await collection();
        return aggregateRows(await coll.aggregate<AggregateDocument>(buildAggregatePipeline(q)).toArray(), q);
      } catch (err) {
        throw upstreamError(err);
      }
    },

    async stepEvents(q) {
      try {
        const coll = await collection();
        return stepEventsOf(
          await coll.aggregate<{ d: string; at: Date; g: string | null }>(buildStepPipeline(q)).toArray(),
        );
      } catch (err) {
        throw upstreamError(err);
      }
    },

    // MongoDB deletes server-side without holding anything for long: one call, whatever the count.
    async deleteBefore(appId, before) {
      try {
        return (await (await collection()).deleteMany(eventsFilter(appId, before))).deletedCount;
      } catch (err) {
        throw upstreamError(err);
      }
    },

    async deleteApp(appId) {
      try {
        return (await (await collection()).deleteMany(eventsFilter(appId))).deletedCount;
      } catch (err) {
        throw upstreamError(err);
      }
    },

    // `meta` is the buckets' own field: the distinct values come from the buckets, not every event.
    async appIds() {
      try {
        return (await (await collection()).distinct("meta.app")) as string[];
      } catch (err) {
        throw upstreamError(err);
      }
    },

    async ping(signal) {
      const answered = client.db(options.dbName).command({ ping: 1 });
      signal.addEventListener("abort", () => void answered.catch(() => {}), { once: true });
      await answered;
    },
    async close() {
      await client.close();
    },
  };
}
