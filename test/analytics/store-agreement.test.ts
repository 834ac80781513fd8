/**
 * One behaviour, two stores: the same randomly generated events (fast-check)
 * go into the SQL store on this run's database (PGlite, or PostgreSQL with
 * DATABASE_URL) and into the documents the MongoDB store would insert, whose
 * pipelines run on mingo (with `ZONED_CONTEXT`, as mingo's own zoned
 * `$dateTrunc` is wrong); every query's answer must be the same. Queries
 * cover the base API's count (the rollups on SQL) and the extensions (aggregates,
 * conditions, one or two breakdowns, limits folding an other group), over
 * hour, day, Monday-week and month buckets in UTC and in zones with summer
 * time (Europe/Berlin, America/New_York, Australia/Lord_Howe's half hour) and
 * without whole-hour offsets (Asia/Kolkata, Asia/Kathmandu), across their
 * 2024 clock changes.
 */
import crypto from "node:crypto";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { firstInstantOfWallTime, type Unit } from "../../src/analytics/buckets.ts";
import {
  compareBuckets,
  type AggregateName,
  type AggregateQuery,
  type Condition,
  type CountQuery,
  type StoredEvent,
} from "../../src/analytics/event-store.ts";
import {
  aggregateRows,
  buildAggregatePipeline,
  buildCountPipeline,
  toDocuments,
  type AggregateDocument,
  type EventDocument,
} from "../../src/analytics/mongo-event-store.ts";
import { runExtended } from "../../src/analytics/query-extensions.ts";
import { useSqlEventStore } from "../support/sql-event-store.ts";
import { T } from "./store-cases.ts";
import { zonedAggregate } from "./zoned-date-trunc.ts";

const START = T("2024-02-26T00:00:00Z");
const SPAN = 60 * 86_400_000;
const ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata", "Asia/Kathmandu"];
const PLANS = ["free", "pro", "team", "$x", "a.b"];
const COUNTRIES = ["de", "fr", "us", "De"];
const USERS = ["u1", "u2", "u3", "u4", "u5", "$u"];

interface EventSpec {
  type: string;
  at: number;
  distinctId?: string | undefined;
  plan?: string | undefined;
  country?: string | undefined;
  amount?: number | undefined;
  paid?: boolean | undefined;
}

const eventArb: fc.Arbitrary<EventSpec> = fc.record({
  type: fc.constantFrom("t", "t", "t", "noise"),
  at: fc.integer({ min: START, max: START + SPAN - 1 }),
  distinctId: fc.option(fc.constantFrom(...USERS), { nil: undefined }),
  plan: fc.option(fc.constantFrom(...PLANS), { nil: undefined }),
  country: fc.option(fc.constantFrom(...COUNTRIES), { nil: undefined }),
  amount: fc.option(
    fc.integer({ min: -20, max: 200 }).map((n) => n / 2),
    { nil: undefined },
  ),
  paid: fc.option(fc.boolean(), { nil: undefined }),
});

function stored(e: EventSpec): StoredEvent {
  const properties: Record<string, string> = {};
  const out: StoredEvent = { type: e.type, at: e.at, properties };
  if (e.plan !== undefined) properties.plan = e.plan;
  if (e.country !== undefined) properties.country = e.country;
  if (e.paid !== undefined) properties.paid = String(e.paid);
  if (e.amount !== undefined) {
    properties.amount = String(e.amount);
    out.numbers = { amount: e.amount };
  }
  if (e.distinctId !== undefined) out.distinctId = e.distinctId;
  return out;
}

const KINDS = { plan: "string", country: "string", amount: "number", paid: "boolean" } as const;

const conditionArb: fc.Arbitrary<Condition> = fc.oneof(
  fc
    .record({
      property: fc.constantFrom<"plan" | "country" | undefined>("plan", "country", undefined),
      op: fc.constantFrom("eq" as const, "neq" as const, "contains" as const),
      value: fc.constantFrom(...PLANS, ...COUNTRIES, ...USERS, "e", "$"),
    })
    .map((c) => ({ ...c, kind: "string" as const })),
  fc
    .record({
      property: fc.constantFrom<"plan" | "country" | undefined>("plan", "country", undefined),
      value: fc.subarray([...PLANS, ...COUNTRIES, ...USERS], { minLength: 1, maxLength: 3 }),
    })
    .map((c) => ({ ...c, kind: "string" as const, op: "in" as const })),
  fc
    .record({
      property: fc.constant("amount"),
      op: fc.constantFrom("eq" as const, "neq" as const, "gt" as const, "gte" as const, "lt" as const, "lte" as const),
      value: fc.integer({ min: -20, max: 200 }).map((n) => n / 2),
    })
    .map((c) => ({ ...c, kind: "number" as const })),
  fc
    .record({
      property: fc.constant("amount"),
      value: fc.array(fc.integer({ min: 0, max: 20 }), { minLength: 1, maxLength: 3 }),
    })
    .map((c) => ({ ...c, kind: "number" as const, op: "in" as const })),
  fc
    .record({ property: fc.constant("paid"), op: fc.constantFrom("eq" as const, "neq" as const), value: fc.boolean() })
    .map((c) => ({ ...c, kind: "boolean" as const })),
  fc
    .record({
      property: fc.constantFrom<keyof typeof KINDS | undefined>("plan", "country", "amount", "paid", undefined),
      value: fc.boolean(),
    })
    .map((c) => ({
      ...c,
      kind: c.property === undefined ? ("string" as const) : KINDS[c.property],
      op: "exists" as const,
    })),
);

const queryArb = fc
  .record({
    unit: fc.constantFrom<Unit>("hour", "day", "day", "week", "month"),
    zone: fc.constantFrom(...ZONES),
    from: fc.integer({ min: START - 3 * 86_400_000, max: START + SPAN }),
    length: fc.integer({ min: 1, max: 40 * 86_400_000 }),
    aggregate: fc.constantFrom<AggregateName>("count", "unique", "sum", "avg", "min", "max"),
    uniqueOf: fc.constantFrom(undefined, "plan", "amount", "paid"),
    where: fc.array(conditionArb, { maxLength: 2 }),
    groupBy: fc.shuffledSubarray(["plan", "country", "paid"], { maxLength: 2 }),
    limit: fc.option(fc.integer({ min: 1, max: 4 }), { nil: undefined }),
  })
  .map(({ unit, zone, from, length, aggregate, uniqueOf, where, groupBy, limit }) => {
    const of =
      aggregate === "count"
        ? undefined
        : aggregate === "unique"
          ? uniqueOf === undefined
            ? undefined
            : { name: uniqueOf, kind: KINDS[uniqueOf as keyof typeof KINDS] }
          : { name: "amount", kind: "number" as const };
    return {
      unit,
      // Hour buckets are UTC hours (a zone applies to day, week and month).
      timezone: unit === "hour" ? undefined : zone,
      since: from,
      until: from + (unit === "hour" ? Math.min(length, 10 * 86_400_000) : length),
      aggregate,
      of,
      where,
      groupBy,
      limit: groupBy.length === 0 ? undefined : limit,
    };
  });

/** The MongoDB store's answers, its pipelines run by mingo over the documents it would insert. */
function mingoStore(docs: EventDocument[]) {
  return {
    async aggregate(q: AggregateQuery) {
      const out = zonedAggregate<AggregateDocument>(docs, buildAggregatePipeline(q));
      return aggregateRows(out, q);
    },
    count(q: CountQuery) {
      const out = zonedAggregate<{ at: Date; group: string | null; count: number }>(docs, buildCountPipeline(q));
      return out
        .map((r) => ({
          at: firstInstantOfWallTime(r.at.getTime(), q.timezone),
          group: r.group ?? null,
          count: r.count,
        }))
        .sort(compareBuckets);
    },
  };
}

/** Values to 9 significant digits: the stores may add floating numbers in another order. */
const rounded = (v: number | null) => (v === null ? null : Number(v.toPrecision(9)));

describe("the SQL store and the MongoDB store's pipelines answer alike", () => {
  const fixture = useSqlEventStore();

  it("on random events and queries, in zones and across week and month starts", async () => {
    // Not vacuous: many answers must hold buckets (the conditions are random, so some hold none).
    let answered = 0;
    let asked = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(eventArb, { minLength: 0, maxLength: 120 }),
        fc.array(queryArb, { minLength: 1, maxLength: 4 }),
        async (generated, queries) => {
          const appId = crypto.randomUUID();
          const events = generated.map(stored);
          await fixture.store.insert(appId, events);
          const mongo = mingoStore(toDocuments(appId, events, "batch"));
          for (const query of queries) {
            const q: AggregateQuery = { appId, type: "t", ...query };
            const [fromSql, fromMongo] = await Promise.all([
              runExtended(fixture.store, q, query.limit),
              runExtended(mongo, q, query.limit),
            ]);
            const shape = (a: typeof fromSql) => ({
              ...a,
              total: rounded(a.total),
              rows: a.rows.map((r) => ({ ...r, value: rounded(r.value) })),
            });
            expect(shape(fromSql), JSON.stringify(q)).toEqual(shape(fromMongo));
            asked++;
            if (fromSql.rows.length > 0) answered++;
            if (q.groupBy.length <= 1) {
              // the base API's count, from the SQL store's rollups.
              const count: CountQuery = {
                appId,
                type: "t",
                since: q.since,
                until: q.until,
                unit: q.unit!,
                timezone: q.timezone,
                groupBy: q.groupBy[0],
              };
              expect(await fixture.store.count(count), JSON.stringify(count)).toEqual(mongo.count(count));
            }
          }
        },
      ),
      { numRuns: 100 },
    );
    expect(answered / asked).toBeGreaterThan(0.1);
  }, 300_000);
});
