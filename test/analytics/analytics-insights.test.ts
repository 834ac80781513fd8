/**
 * The query extensions over REST and Connect (docs/analytics.md
 * "Aggregations, filters and breakdowns"): unique users, sums and averages,
 * `where`, two breakdowns and `limit` with an `other` group, on this run's
 * database (SQL store). Both stores' answers are compared on random events in
 * `store-agreement.test.ts`.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { Aggregate, AnalyticsService, Operator } from "../../gen/platform/analytics/v1/analytics_pb.js";
import { useTestServer, type TestApp } from "../support/harness.ts";
import { T } from "./store-cases.ts";

const t = useTestServer();
const DAY1 = T("2024-03-01T00:00:00Z");
const DAY2 = T("2024-03-02T00:00:00Z");
const RANGE = { type: "order", since: DAY1, until: T("2024-03-04T00:00:00Z") };

let app: TestApp;
const query = (body: Record<string, unknown>) => t.request("POST", "/v1/analytics/query", { token: app.token, body });
async function answer(body: Record<string, unknown>) {
  const res = await query({ ...RANGE, ...body });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body;
}
async function refusal(body: Record<string, unknown>) {
  const res = await query({ ...RANGE, ...body });
  expect(res.status, JSON.stringify(res.body)).toBe(400);
  return res.body.error.message as string;
}

beforeAll(async () => {
  app = await t.createApp();
  const reg = await t.request("POST", "/v1/analytics/types", {
    token: app.token,
    body: { name: "order", properties: { plan: "string", country: "string", amount: "number", paid: "boolean" } },
  });
  expect(reg.status).toBe(200);
  const e = (at: number, distinctId: string | undefined, properties: Record<string, unknown>) => ({
    type: "order",
    at,
    ...(distinctId === undefined ? {} : { distinctId }),
    properties,
  });
  const log = await t.request("POST", "/v1/analytics/events", {
    token: app.token,
    body: {
      events: [
        // Day 1: u1 twice, u2 once, one anonymous.
        e(DAY1 + 1000, "u1", { plan: "pro", country: "de", amount: 10, paid: true }),
        e(DAY1 + 2000, "u1", { plan: "pro", country: "fr", amount: 30, paid: false }),
        e(DAY1 + 3000, "u2", { plan: "free", country: "de", amount: 5 }),
        e(DAY1 + 4000, undefined, { plan: "team", amount: 1.5 }),
        // Day 2: u1 again, u3.
        e(DAY2 + 1000, "u1", { plan: "pro", country: "de", amount: 20, paid: true }),
        e(DAY2 + 2000, "u3", { plan: "free", country: "us" }),
      ],
    },
  });
  expect(log.status, JSON.stringify(log.body)).toBe(200);
});

describe("aggregate", () => {
  it("answers the base API's shape when no extension is used", async () => {
    expect(await answer({ groupBy: "plan" })).toEqual({
      type: "order",
      interval: "day",
      since: DAY1,
      until: RANGE.until,
      groupBy: "plan",
      buckets: [
        { at: DAY1, group: "free", count: 1 },
        { at: DAY1, group: "pro", count: 2 },
        { at: DAY1, group: "team", count: 1 },
        { at: DAY2, group: "free", count: 1 },
        { at: DAY2, group: "pro", count: 1 },
      ],
      total: 6,
    });
  });

  it("counts unique users per bucket, and over the whole range (not a sum of buckets)", async () => {
    const body = await answer({ aggregate: "unique" });
    expect(body).toEqual({
      type: "order",
      interval: "day",
      since: DAY1,
      until: RANGE.until,
      groupBy: null,
      aggregate: "unique",
      of: null,
      limit: null,
      buckets: [
        { at: DAY1, group: null, count: 3, value: 2, other: false },
        { at: DAY2, group: null, count: 2, value: 2, other: false },
      ],
      total: 3,
      count: 5,
      otherGroups: 0,
    });
  });

  it("counts distinct values of a property with of", async () => {
    const body = await answer({ aggregate: "unique", of: "country", interval: "month" });
    expect(body.buckets).toEqual([{ at: T("2024-03-01T00:00:00Z"), group: null, count: 5, value: 3, other: false }]);
    expect(body.total).toBe(3);
  });

  it("sums, averages, and takes the least and the most of a number property", async () => {
    const values = async (aggregate: string) => {
      const body = await answer({ aggregate, of: "amount" });
      return [body.buckets.map((b: { value: number }) => b.value), body.total];
    };
    expect(await values("sum")).toEqual([[46.5, 20], 66.5]);
    expect(await values("avg")).toEqual([[11.625, 20], 13.3]);
    expect(await values("min")).toEqual([[1.5, 20], 1.5]);
    expect(await values("max")).toEqual([[30, 20], 30]);
  });

  it("answers an empty range with 0 for count and unique and null for avg", async () => {
    const empty = { since: T("2023-01-01T00:00:00Z"), until: T("2023-01-02T00:00:00Z") };
    expect((await answer({ ...empty, aggregate: "unique" })).total).toBe(0);
    expect((await answer({ ...empty, aggregate: "avg", of: "amount" })).total).toBeNull();
    expect((await answer({ ...empty, aggregate: "count" })).buckets).toEqual([]);
  });

  it.each([
    [{ aggregate: "sum" }, "of: is required for sum: a number property of the type"],
    [{ aggregate: "avg", of: "plan" }, "of: avg needs a number property (plan is declared string)"],
    [{ aggregate: "count", of: "amount" }, "of: applies to unique, sum, avg, min and max, not count"],
    [{ aggregate: "sum", of: "nope" }, 'of: "nope" is not a property of type "order"'],
    [{ aggregate: "median", of: "amount" }, "aggregate: must be one of count, unique, sum, avg, min, max"],
  ])("refuses %j", async (body, message) => {
    expect(await refusal(body)).toBe(message);
  });
});

describe("where", () => {
  const total = async (...where: unknown[]) => (await answer({ aggregate: "count", where })).total as number;

  it("filters with every operator, all conditions holding", async () => {
    expect(await total({ property: "plan", op: "eq", value: "pro" })).toBe(3);
    expect(await total({ property: "country", op: "neq", value: "de" })).toBe(3); // fr, us and the one without
    expect(await total({ property: "plan", op: "in", value: ["free", "team"] })).toBe(3);
    expect(await total({ property: "country", op: "contains", value: "e" })).toBe(3);
    expect(await total({ property: "amount", op: "gt", value: 10 })).toBe(2);
    expect(await total({ property: "amount", op: "gte", value: 10 })).toBe(3);
    expect(await total({ property: "amount", op: "lt", value: 5 })).toBe(1);
    expect(await total({ property: "amount", op: "lte", value: 5 })).toBe(2);
    expect(await total({ property: "amount", op: "in", value: [5, 20] })).toBe(2);
    expect(await total({ property: "paid", op: "eq", value: true })).toBe(2);
    expect(await total({ property: "paid", op: "exists" })).toBe(3);
    expect(await total({ property: "paid", op: "exists", value: false })).toBe(3);
    expect(await total({ property: "distinctId", op: "eq", value: "u1" })).toBe(3);
    expect(await total({ property: "distinctId", op: "exists", value: false })).toBe(1);
    expect(
      await total({ property: "plan", op: "eq", value: "pro" }, { property: "country", op: "eq", value: "de" }),
    ).toBe(2);
  });

  it("combines with unique and a breakdown: unique pro users by country", async () => {
    const body = await answer({
      aggregate: "unique",
      where: [{ property: "plan", op: "eq", value: "pro" }],
      groupBy: "country",
      interval: "month",
    });
    expect(body.buckets).toEqual([
      { at: DAY1, group: "de", count: 2, value: 1, other: false },
      { at: DAY1, group: "fr", count: 1, value: 1, other: false },
    ]);
    expect(body.total).toBe(1);
  });

  it.each([
    [[{ property: "amount", op: "eq", value: "10" }], "where[0].value: must be a number (amount is declared number)"],
    [[{ property: "plan", op: "eq", value: 3 }], "where[0].value: must be a string (plan is declared string)"],
    [
      [{ property: "plan", op: "gt", value: "a" }],
      "where[0].op: gt compares number properties only (plan is declared string)",
    ],
    [
      [{ property: "amount", op: "contains", value: "1" }],
      "where[0].op: contains applies to string properties and distinctId (amount is declared number)",
    ],
    [
      [{ property: "paid", op: "in", value: [true, "no"] }],
      "where[0].value[1]: must be a boolean (paid is declared boolean)",
    ],
    [[{ property: "plan", op: "in", value: "pro" }], "where[0].value: must be a list of 1 to 100 values for in"],
    [
      [{ property: "plan", op: "exists", value: "yes" }],
      "where[0].value: must be true or false (or left out) for exists",
    ],
    [[{ property: "nope", op: "eq", value: "x" }], 'where[0].property: "nope" is not a property of type "order"'],
    [
      [{ property: "plan", op: "like", value: "x" }],
      "where[0].op: must be one of eq, neq, in, contains, gt, gte, lt, lte, exists",
    ],
    [[{ property: "plan", value: "x" }], "where[0].op: must be a string"],
    [Array.from({ length: 11 }, () => ({ property: "plan", op: "exists" })), "where: must have at most 10 conditions"],
  ])("refuses %j", async (where, message) => {
    expect(await refusal({ where })).toBe(message);
  });
});

describe("groupBy with two properties, and limit", () => {
  it("breaks down by two properties, events without one under null", async () => {
    const body = await answer({ groupBy: ["plan", "country"], interval: "month" });
    expect(body.groupBy).toEqual(["plan", "country"]);
    expect(body.aggregate).toBe("count");
    expect(body.limit).toBe(50);
    expect(body.buckets).toEqual([
      { at: DAY1, groups: ["free", "de"], count: 1, value: 1, other: false },
      { at: DAY1, groups: ["free", "us"], count: 1, value: 1, other: false },
      { at: DAY1, groups: ["pro", "de"], count: 2, value: 2, other: false },
      { at: DAY1, groups: ["pro", "fr"], count: 1, value: 1, other: false },
      { at: DAY1, groups: ["team", null], count: 1, value: 1, other: false },
    ]);
  });

  it("keeps the largest groups and folds the rest into other, said in the answer", async () => {
    const body = await answer({ groupBy: ["plan", "country"], interval: "month", limit: 2, aggregate: "unique" });
    // pro/de has 1 user, free/de 1, free/us 1, pro/fr 1, team/null 0 (anonymous): ties in group order.
    expect(body.buckets).toEqual([
      { at: DAY1, groups: ["free", "de"], count: 1, value: 1, other: false },
      { at: DAY1, groups: ["free", "us"], count: 1, value: 1, other: false },
      // u1 (pro/de, pro/fr): one user, though in two folded groups.
      { at: DAY1, groups: [null, null], count: 3, value: 1, other: true },
    ]);
    expect(body.otherGroups).toBe(2);
    expect(body.total).toBe(3);
  });

  it("limits a single groupBy when limit is given, by the groups' totals", async () => {
    const body = await answer({ groupBy: "plan", limit: 1, interval: "month" });
    expect(body.buckets).toEqual([
      { at: DAY1, group: "pro", count: 3, value: 3, other: false },
      { at: DAY1, group: null, count: 3, value: 3, other: true },
    ]);
    expect(body.otherGroups).toBe(2);
  });

  it.each([
    [{ groupBy: ["plan", "country", "paid"] }, "groupBy: must have at most 2 properties"],
    [{ groupBy: ["plan", "plan"] }, "groupBy: must not name a property twice"],
    [{ groupBy: ["plan", "nope"] }, 'groupBy[1]: "nope" is not a property of type "order"'],
    [{ groupBy: "plan", limit: 501 }, "limit: must be an integer from 1 to 500"],
    [{ limit: 5 }, "limit: applies to groupBy: there are no groups to limit"],
  ])("refuses %j", async (body, message) => {
    expect(await refusal(body)).toBe(message);
  });
});

describe("over Connect", () => {
  it("answers the same query with the same values", async () => {
    const client = t.client(AnalyticsService, app.token, "connect");
    const res = await client.queryEvents({
      type: "order",
      since: timestampFromMs(RANGE.since),
      until: timestampFromMs(RANGE.until),
      aggregate: Aggregate.SUM,
      of: "amount",
      where: [
        {
          property: "distinctId",
          op: Operator.IN,
          value: { kind: { case: "listValue", value: { values: [{ kind: { case: "stringValue", value: "u1" } }] } } },
        },
      ],
      groupByProperties: ["plan", "country"],
    });
    expect(res.aggregate).toBe(Aggregate.SUM);
    expect(res.totalValue).toBe(60);
    expect(res.buckets.map((b) => [b.groups.map((g) => g.value ?? null), b.value, Number(b.count)])).toEqual([
      [["pro", "de"], 10, 1],
      [["pro", "fr"], 30, 1],
      [["pro", "de"], 20, 1],
    ]);
  });
});
