/**
 * The query extensions (docs/analytics.md "Aggregations, filters and
 * breakdowns"), checked once for REST and gRPC: `aggregate` and `of`, `where`
 * (conditions type-checked against the declared kinds), `groupBy` as a list of
 * up to two properties, and `limit` (the groups beyond it are folded into one
 * `other` group). Leaving them all out is the base API's count, answered by the
 * rollups as before; any of them is answered from the raw events.
 */
import type { Value } from "@bufbuild/protobuf/wkt";
import { Aggregate, type Condition as ConditionMessage } from "../../gen/platform/analytics/v1/analytics_pb.js";
import { NAME_PATTERN, NAME_RULE } from "../core/apps/apps.ts";
import { invalidArgument } from "../core/errors.ts";
import {
  compareGroups,
  compareRows,
  type AggregateName,
  type AggregateQuery,
  type AggregateRow,
  type Condition,
  type ConditionOp,
  type ConditionScalar,
  type EventStore,
} from "./event-store.ts";
import { wordsOf } from "./enum-names.ts";
import { OP_OF } from "./where-conditions.ts";
import type { EventTypeRecord, PropertyKindName } from "./event-type-store.ts";
import { distinctIdRule, quoted } from "./validate-events.ts";

const MAX_CONDITIONS = 10;
const MAX_GROUP_BY = 2;
/** Groups answered when `groupBy` is a list and `limit` is left out. */
export const DEFAULT_GROUP_LIMIT = 50;
export const MAX_GROUP_LIMIT = 500;
/** Values of one `in` condition. */
const MAX_IN_VALUES = 100;
/** The name `where` and `of` use for an event's distinctId (never a property name: it has a capital). */
const DISTINCT_ID = "distinctId";

export const AGGREGATE_OF: Record<AggregateName, Aggregate> = {
  count: Aggregate.COUNT,
  unique: Aggregate.UNIQUE,
  sum: Aggregate.SUM,
  avg: Aggregate.AVG,
  min: Aggregate.MIN,
  max: Aggregate.MAX,
};
/** An unset aggregate counts. */
export const AGGREGATE_NAME: Record<number, AggregateName> = {
  ...wordsOf(AGGREGATE_OF),
  [Aggregate.UNSPECIFIED]: "count",
};
const OP_NAME: Record<number, ConditionOp> = wordsOf(OP_OF);
const OP_RULE = `must be one of ${Object.values(OP_NAME).join(", ")}`;

/** The parts of a query request the extensions read (QueryEventsRequest's fields). */
export interface ExtensionFields {
  aggregate: Aggregate;
  of?: string | undefined;
  where: ConditionMessage[];
  groupBy?: string | undefined;
  groupByProperties: string[];
  limit?: number | undefined;
}

/** True when the request uses any extension (else it is the base API's count, answered as before). */
export function usesExtensions(req: ExtensionFields): boolean {
  return (
    req.aggregate !== Aggregate.UNSPECIFIED ||
    req.of !== undefined ||
    req.where.length > 0 ||
    req.groupByProperties.length > 0 ||
    req.limit !== undefined
  );
}

function declared(type: EventTypeRecord, name: string, field: string): PropertyKindName {
  if (!NAME_PATTERN.test(name)) throw invalidArgument(field, NAME_RULE);
  if (!Object.hasOwn(type.properties, name))
    throw invalidArgument(field, `${quoted(name)} is not a property of type ${quoted(type.name)}`);
  return type.properties[name];
}

/** A Value as a scalar of `kind`, or the rule it breaks. */
function scalarOf(value: Value | undefined, kind: PropertyKindName, what: string): ConditionScalar | string {
  const v = value?.kind;
  switch (kind) {
    case "string":
      return v?.case === "stringValue" ? v.value : `must be a string (${what} is declared string)`;
    case "number":
      if (v?.case !== "numberValue") return `must be a number (${what} is declared number)`;
      return Number.isFinite(v.value) ? v.value : "must be a finite number";
    case "boolean":
      return v?.case === "boolValue" ? v.value : `must be a boolean (${what} is declared boolean)`;
  }
}

/** `where`, checked against the type's declared kinds: a number compared with a string is a 400. */
export function checkConditions(
  where: readonly ConditionMessage[],
  type: EventTypeRecord,
  root = "where",
): Condition[] {
  if (where.length > MAX_CONDITIONS) throw invalidArgument(root, `must have at most ${MAX_CONDITIONS} conditions`);
  return where.map((c, i) => {
    const at = `${root}[${i}]`;
    if (!c.property) throw invalidArgument(`${at}.property`, "is required");
    const isId = c.property === DISTINCT_ID;
    const kind: PropertyKindName = isId ? "string" : declared(type, c.property, `${at}.property`);
    const op = OP_NAME[c.op];
    if (!op) throw invalidArgument(`${at}.op`, OP_RULE);
    const what = isId ? DISTINCT_ID : c.property;
    const property = isId ? undefined : c.property;
    const bad = (rule: string) => invalidArgument(`${at}.value`, rule);
    switch (op) {
      case "exists": {
        const v = c.value?.kind;
        if (v === undefined || v.case === undefined || v.case === "nullValue")
          return { property, kind, op, value: true };
        if (v.case !== "boolValue") throw bad("must be true or false (or left out) for exists");
        return { property, kind, op, value: v.value };
      }
      case "in": {
        const v = c.value?.kind;
        if (v?.case !== "listValue" || v.value.values.length < 1 || v.value.values.length > MAX_IN_VALUES)
          throw bad(`must be a list of 1 to ${MAX_IN_VALUES} values for in`);
        const list = v.value.values.map((e, j) => {
          const s = scalarOf(e, kind, what);
          if (typeof s === "string" && (kind !== "string" || e.kind.case !== "stringValue"))
            throw invalidArgument(`${at}.value[${j}]`, s);
          return s;
        });
        return { property, kind, op, value: list };
      }
      case "contains":
      case "eq":
      case "neq": {
        if (op === "contains" && kind !== "string")
          throw invalidArgument(
            `${at}.op`,
            `contains applies to string properties and ${DISTINCT_ID} (${what} is declared ${kind})`,
          );
        const s = scalarOf(c.value, kind, what);
        if (typeof s === "string" && (kind !== "string" || c.value?.kind.case !== "stringValue")) throw bad(s);
        if (isId && op !== "contains" && typeof s === "string" && distinctIdRule(s) !== undefined)
          throw bad(distinctIdRule(s)!);
        return { property, kind, op, value: s };
      }
      default: {
        if (kind !== "number")
          throw invalidArgument(`${at}.op`, `${op} compares number properties only (${what} is declared ${kind})`);
        const s = scalarOf(c.value, kind, what);
        if (typeof s === "string") throw bad(s);
        return { property, kind, op, value: s };
      }
    }
  });
}

/** The checked extension fields of a query, ready for the store (with the range, unit and zone added). */
export interface CheckedExtensions {
  aggregate: AggregateName;
  of?: { name: string; kind: PropertyKindName } | undefined;
  where: Condition[];
  groupBy: string[];
  /** The most groups answered; undefined: all (a single `groupBy` without `limit`, as the base API counts). */
  limit?: number | undefined;
}

export function checkExtensions(req: ExtensionFields, type: EventTypeRecord): CheckedExtensions {
  const aggregate = AGGREGATE_NAME[req.aggregate];
  if (!aggregate) throw invalidArgument("aggregate", "must be count, unique, sum, avg, min or max");
  let of: CheckedExtensions["of"];
  if (req.of !== undefined) {
    if (aggregate === "count") throw invalidArgument("of", "applies to unique, sum, avg, min and max, not count");
    if (aggregate === "unique" && req.of === DISTINCT_ID) of = undefined;
    else {
      const kind = declared(type, req.of, "of");
      if (aggregate !== "unique" && kind !== "number")
        throw invalidArgument("of", `${aggregate} needs a number property (${req.of} is declared ${kind})`);
      of = { name: req.of, kind };
    }
  } else if (aggregate !== "count" && aggregate !== "unique") {
    throw invalidArgument("of", `is required for ${aggregate}: a number property of the type`);
  }
  const where = checkConditions(req.where, type);
  if (req.groupBy !== undefined && req.groupByProperties.length > 0)
    throw invalidArgument("groupBy", "give one property or a list, not both");
  const list = req.groupByProperties.length > 0;
  const groupBy = list ? req.groupByProperties : req.groupBy !== undefined ? [req.groupBy] : [];
  if (groupBy.length > MAX_GROUP_BY) throw invalidArgument("groupBy", `must have at most ${MAX_GROUP_BY} properties`);
  groupBy.forEach((p, i) => declared(type, p, list ? `groupBy[${i}]` : "groupBy"));
  if (new Set(groupBy).size !== groupBy.length) throw invalidArgument("groupBy", "must not name a property twice");
  if (req.limit !== undefined) {
    if (!Number.isInteger(req.limit) || req.limit < 1 || req.limit > MAX_GROUP_LIMIT)
      throw invalidArgument("limit", `must be an integer from 1 to ${MAX_GROUP_LIMIT}`);
    if (groupBy.length === 0) throw invalidArgument("limit", "applies to groupBy: there are no groups to limit");
  }
  const limit = req.limit ?? (list ? DEFAULT_GROUP_LIMIT : undefined);
  return { aggregate, of, where, groupBy, limit };
}

export interface ExtendedAnswer {
  rows: AggregateRow[];
  /** The aggregate over the whole range and every group (unique over the range, not a sum); null for avg, min, max of nothing. */
  total: number | null;
  /** Events counted. */
  count: number;
  /** Groups folded into the `other` rows. */
  otherGroups: number;
}

/** How many groups the rows hold. */
function distinctGroups(rows: readonly AggregateRow[]): number {
  return new Set(rows.map((r) => JSON.stringify(r.groups))).size;
}

/**
 * Runs an extended query: the buckets, and when they hold more than `limit`
 * groups, the groups' totals over the range (the largest kept, ties in group
 * order) and the buckets again with the rest folded into `other`; beside
 * them, the whole range's aggregate where it is not a sum of the buckets'
 * (unique, avg).
 */
export async function runExtended(
  store: Pick<EventStore, "aggregate">,
  base: AggregateQuery,
  limit: number | undefined,
): Promise<ExtendedAnswer> {
  let otherGroups = 0;
  // The buckets of every group first: their groups are the groups of the range, so when there are at most
  // `limit` of them (as is usual) they are the answer, from one pass over the events. Only beyond `limit`
  // are the groups' totals needed to rank them, and the buckets asked again with the rest folded.
  const whole =
    base.aggregate === "unique" || base.aggregate === "avg"
      ? store.aggregate({ ...base, unit: undefined, groupBy: [], keep: undefined })
      : undefined;
  const first = { ...base, keep: undefined, maxGroups: base.groupBy.length > 0 ? limit : undefined };
  const [all, wholeRows] = await Promise.all([store.aggregate(first), whole]);
  let rows = all;
  if (base.groupBy.length > 0 && limit !== undefined && distinctGroups(all) > limit) {
    const totals = await store.aggregate({ ...base, unit: undefined, keep: undefined });
    totals.sort((a, b) => b.value - a.value || compareGroups(a.groups, b.groups));
    const keep = totals.slice(0, limit).map((r) => r.groups);
    otherGroups = totals.length - limit;
    rows = await store.aggregate({ ...base, keep });
  }
  rows.sort(compareRows);
  let count = 0;
  for (const r of rows) count += r.count;
  let total: number | null;
  switch (base.aggregate) {
    case "count":
    case "sum":
      total = rows.reduce((sum, r) => sum + r.value, 0);
      break;
    case "min":
    case "max": {
      // A loop, not Math.min(...rows): up to 1000 buckets times 501 groups would overflow the stack.
      const sign = base.aggregate === "min" ? 1 : -1;
      total = null;
      for (const r of rows) if (total === null || sign * r.value < sign * total) total = r.value;
      break;
    }
    default:
      total = wholeRows?.[0]?.value ?? (base.aggregate === "unique" ? 0 : null);
  }
  return { rows, total, count, otherGroups };
}
