/**
 * The one interface in front of the two places events can live: the SQL
 * store (the platform's Postgres/PGlite, the default) and the MongoDB store
 * (a time-series collection, when MONGODB_URL is set). The facility validates
 * everything before a store sees it, so a store only stores and counts. A
 * MongoDB store that cannot be reached throws `upstream_error` (502); the SQL
 * store lives in the platform database, whose outage is answered 503
 * `unavailable` everywhere.
 */
import { PlatformError } from "../core/errors.ts";
import type { Unit } from "./buckets.ts";
import type { InTransaction } from "../core/database/index.ts";
import type { SpendStatement } from "../core/quotas/index.ts";
import type { PropertyKindName } from "./event-type-store.ts";
import type { ConditionOp } from "./where-conditions.ts";

/** A validated event as stored: values already turned into strings. */
export interface StoredEvent {
  type: string;
  /** Epoch milliseconds. */
  at: number;
  properties: Record<string, string>;
  /** Who did it (the `distinctId` extension), 1 to 200 characters. */
  distinctId?: string | undefined;
  /** The `number` properties' values as numbers, beside their strings (sums, averages, comparisons). */
  numbers?: Record<string, number> | undefined;
}

export interface CountQuery {
  appId: string;
  type: string;
  /** Inclusive, epoch ms. */
  since: number;
  /** Exclusive, epoch ms. */
  until: number;
  unit: Unit;
  groupBy?: string | undefined;
  /** IANA zone for day/week/month buckets; undefined means UTC. */
  timezone?: string | undefined;
}

export interface CountBucket {
  /** Epoch ms at the start of the bucket. */
  at: number;
  group: string | null;
  count: number;
}

export interface EventStore {
  readonly kind: "sql" | "mongodb";
  /**
   * Stores the whole batch or nothing. `spend`, when given, is the statement
   * fragment ending the batch's quota reservation as spent: a store in the
   * platform database runs it in the insert's own statement (so the count
   * commits with the events), and only then calls it; another store ignores it.
   */
  insert(appId: string, events: readonly StoredEvent[], spend?: () => SpendStatement): Promise<void>;
  /**
   * The same, with `answerIn` in the insert's transaction of the platform
   * database (an idempotent answer, committed with the events). Only a store
   * in that database has it (the SQL store; not MongoDB).
   */
  insertWithin?(
    appId: string,
    events: readonly StoredEvent[],
    answerIn: InTransaction,
    spend?: () => SpendStatement,
  ): Promise<void>;
  /** Non-empty buckets, sorted by `at`, then `group` (null first, then string order). */
  count(query: CountQuery): Promise<CountBucket[]>;
  /** Aggregates, filters and breakdowns (the query extensions): rows in any order. */
  aggregate(query: AggregateQuery): Promise<AggregateRow[]>;
  /** The events of one funnel step that carry a distinctId, in any order (funnels are computed by `funnel.ts`). */
  stepEvents(query: StepEventsQuery): Promise<StepEvent[]>;
  /**
   * The whole funnel computed where the events are, when the store can (the SQL store): the same
   * answer as `computeFunnel` over `stepEvents`, without bringing the events to this process.
   */
  funnel?(query: FunnelQuery): Promise<FunnelCounts>;
  /**
   * Deletes the app's events before `before`, a UTC day start (so the rollups of whole hours and days
   * go with their events and queries stay exact), at most `batch` rows a statement (raw events; then,
   * once none is left, the rollups of those days); how many raw events.
   */
  deleteBefore(appId: string, before: Date, batch: number): Promise<number>;
  /** Deletes every event of the app (the app is being deleted, or is gone); how many raw events. */
  deleteApp(appId: string): Promise<number>;
  /**
   * The apps that have events here, so housekeeping can sweep those of deleted
   * apps: MongoDB's events do not go with their app's row at all, and a batch
   * in flight while an app is deleted lands after the deletion in either store.
   */
  appIds?(): Promise<string[]>;
  /** Resolves when the store answers (for `/ready`); the SQL store lives in the platform database, checked already. */
  ping?(signal: AbortSignal): Promise<void>;
  close(): Promise<void>;
}

/** The store failed; `outcomeUnknown` when some of the work may be stored all the same. */
export function upstreamError(cause: unknown, outcomeUnknown = false): PlatformError {
  return new PlatformError("upstream_error", "analytics store unreachable", { cause, outcomeUnknown });
}

/** Sorts buckets the way docs/api.md#analytics orders them: by `at`, then group, null first. */
export function compareBuckets(a: CountBucket, b: CountBucket): number {
  if (a.at !== b.at) return a.at - b.at;
  if (a.group === b.group) return 0;
  if (a.group === null) return -1;
  if (b.group === null) return 1;
  return a.group < b.group ? -1 : 1;
}

/** What a query computes per bucket (the `aggregate` extension). */
export type AggregateName = "count" | "unique" | "sum" | "avg" | "min" | "max";

export type { ConditionOp };

/** A scalar as a condition compares it: a string property's string, a number, a boolean. */
export type ConditionScalar = string | number | boolean;

/** One checked condition of `where`: the value is of the property's declared kind. */
export interface Condition {
  /** A declared property, or undefined for the event's `distinctId` (a string). */
  property?: string | undefined;
  kind: PropertyKindName;
  op: ConditionOp;
  /** A scalar of `kind`; a list for `in`; a boolean for `exists`. */
  value: ConditionScalar | ConditionScalar[];
}

/** One group: each breakdown property's value, null where the event lacks it. */
export type GroupKey = (string | null)[];

export interface AggregateQuery {
  appId: string;
  type: string;
  since: number;
  until: number;
  /** The bucket unit; undefined answers one row per group over the whole range (`at` null). */
  unit?: Unit | undefined;
  timezone?: string | undefined;
  aggregate: AggregateName;
  /**
   * The property aggregated: a `number` one for sum, avg, min and max; any for unique
   * (undefined: the distinctIds). Only events that carry it are counted.
   */
  of?: { name: string; kind: PropertyKindName } | undefined;
  where: readonly Condition[];
  /** Zero to two properties to group by. */
  groupBy: readonly string[];
  /** When given, the groups not in it are folded into one row per bucket marked `other`. */
  keep?: readonly GroupKey[] | undefined;
  /**
   * When given, the store may leave out the rows of all but `maxGroups + 1` of the groups: enough to
   * tell that there are more than `maxGroups` (the answer is then asked again with `keep`), and what
   * bounds the rows a query with many groups brings back.
   */
  maxGroups?: number | undefined;
}

export interface AggregateRow {
  /** Epoch ms at the start of the bucket; null for a whole-range row. */
  at: number | null;
  groups: GroupKey;
  other: boolean;
  /** Events counted. */
  count: number;
  /** The aggregate (for count, the same as `count`). */
  value: number;
}

/** A group's order: component by component, null first, then string order. */
export function compareGroups(a: GroupKey, b: GroupKey): number {
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    const x = a[i] ?? null;
    const y = b[i] ?? null;
    if (x === y) continue;
    if (x === null) return -1;
    if (y === null) return 1;
    return x < y ? -1 : 1;
  }
  return 0;
}

/** Rows by `at` (a whole-range row first), then group, the folded `other` row last. */
export function compareRows(a: AggregateRow, b: AggregateRow): number {
  if (a.at !== b.at) return (a.at ?? -Infinity) - (b.at ?? -Infinity);
  if (a.other !== b.other) return a.other ? 1 : -1;
  return compareGroups(a.groups, b.groups);
}

/** The events of one funnel step: its type and conditions, in `[since, until)`, with a distinctId. */
export interface StepEventsQuery {
  appId: string;
  type: string;
  where: readonly Condition[];
  since: number;
  until: number;
  /** A property whose value each event carries along (the first step's breakdown). */
  breakdown?: string | undefined;
}

export interface StepEvent {
  distinctId: string;
  /** Epoch ms. */
  at: number;
  /** The breakdown property's value; null when the event lacks it (or there is no breakdown). */
  group: string | null;
}

/** A funnel as a store computes it (docs/analytics.md "Funnels"; the rules are `computeFunnel`'s). */
export interface FunnelQuery {
  appId: string;
  steps: readonly { type: string; where: readonly Condition[] }[];
  /** The first step's range, epoch ms; later steps may follow the last start by up to the window. */
  since: number;
  until: number;
  windowMs: number;
  /** Later steps' events are read before this instant (`until + windowMs`, capped at the latest time). */
  laterUntil: number;
  /** A property of the first step's start event to break the users down by. */
  breakdown?: string | undefined;
  /** The most groups answered; the rest are folded into one. */
  limit: number;
}

/** One step's raw figures: who reached it, and the two middle values of the times from the previous step. */
export interface FunnelStepCounts {
  users: number;
  /** Milliseconds from the previous step: the lower and upper middle values (equal for an odd count). */
  lowerMiddleMs?: number | undefined;
  upperMiddleMs?: number | undefined;
}

export interface FunnelCounts {
  steps: FunnelStepCounts[];
  groups: { group: string | null; other: boolean; steps: FunnelStepCounts[] }[];
  otherGroups: number;
}
