/**
 * Which source the SQL store reads for the query extensions (docs/analytics.md
 * "What is indexed and rolled up"), shown by what it answers once the raw
 * events of whole days are gone and only their rollups are left: a count with
 * one `eq`, `in` or `exists` condition on a string or boolean property is read
 * from the rollups, other conditions from the raw events. And a first pass of
 * an extended query with `maxGroups` brings back the rows of at most
 * `maxGroups + 1` groups. (That the answers are the same as the raw events'
 * is the store-agreement test's.) Runs on this run's database.
 */
import crypto from "node:crypto";
import { sql } from "kysely";
import { beforeAll, describe, expect, it } from "vitest";
import type { AggregateQuery, Condition, StoredEvent } from "../../src/analytics/event-store.ts";
import { useSqlEventStore } from "../support/sql-event-store.ts";
import { T } from "./store-cases.ts";

const DAY = 86_400_000;
const D0 = T("2024-05-01T00:00:00Z");

describe("the SQL store's sources for the query extensions", () => {
  const fixture = useSqlEventStore();
  const appId = crypto.randomUUID();
  beforeAll(async () => {
    const events: StoredEvent[] = [];
    for (let i = 0; i < 60; i++)
      events.push({
        type: "order",
        at: D0 + (i % 3) * DAY + i * 60_000,
        properties: { plan: ["free", "pro", "team"][i % 3], paid: String(i % 2 === 0), n: `v${i % 7}` },
        distinctId: `u${i % 5}`,
      });
    await fixture.store.insert(appId, events);
    // The raw events go; the rollups of their (whole) days stay.
    await sql`DELETE FROM analytics_events WHERE app_id = ${appId}::uuid`.execute(fixture.db.db);
  }, 120_000);

  const counted = async (where: Condition[], groupBy: string[] = []) => {
    const q: AggregateQuery = {
      appId,
      type: "order",
      since: D0,
      until: D0 + 3 * DAY,
      unit: "day",
      aggregate: "count",
      where,
      groupBy,
    };
    const rows = await fixture.store.aggregate(q);
    return rows
      .map((r) => [r.at === null ? null : new Date(r.at).toISOString().slice(0, 10), ...r.groups, r.count])
      .sort();
  };

  it("answers a count with one eq, in or exists condition on a string or boolean property from the rollups", async () => {
    expect(await counted([{ property: "plan", kind: "string", op: "eq", value: "pro" }])).toEqual([["2024-05-02", 20]]);
    expect(await counted([{ property: "plan", kind: "string", op: "in", value: ["free", "team", "free"] }])).toEqual([
      ["2024-05-01", 20],
      ["2024-05-03", 20],
    ]);
    expect(await counted([{ property: "paid", kind: "boolean", op: "eq", value: true }])).toEqual([
      ["2024-05-01", 10],
      ["2024-05-02", 10],
      ["2024-05-03", 10],
    ]);
    expect(await counted([{ property: "n", kind: "string", op: "exists", value: true }])).toEqual([
      ["2024-05-01", 20],
      ["2024-05-02", 20],
      ["2024-05-03", 20],
    ]);
    // No condition and one breakdown: the base API's count.
    expect((await counted([], ["plan"])).length).toBe(3);
  });

  it("reads the raw events for what the rollups cannot answer", async () => {
    expect(await counted([{ property: "plan", kind: "string", op: "neq", value: "pro" }])).toEqual([]);
    expect(await counted([{ property: "plan", kind: "string", op: "contains", value: "r" }])).toEqual([]);
    expect(await counted([{ property: undefined, kind: "string", op: "eq", value: "u1" }])).toEqual([]);
    expect(
      await counted([
        { property: "plan", kind: "string", op: "eq", value: "pro" },
        { property: "paid", kind: "boolean", op: "eq", value: true },
      ]),
    ).toEqual([]);
    expect(await counted([{ property: "plan", kind: "string", op: "eq", value: "pro" }], ["paid"])).toEqual([]);
  });
});

describe("a first pass with maxGroups", () => {
  const fixture = useSqlEventStore();

  it("brings back the rows of at most maxGroups + 1 groups, and of every group when there are no more", async () => {
    const appId = crypto.randomUUID();
    const events: StoredEvent[] = Array.from({ length: 40 }, (_, i) => ({
      type: "order",
      at: D0 + (i % 4) * DAY,
      properties: { sku: `s${i % 10}` },
      numbers: {},
    }));
    await fixture.store.insert(appId, events);
    const q = (maxGroups: number): AggregateQuery => ({
      appId,
      type: "order",
      since: D0,
      until: D0 + 4 * DAY,
      unit: "day",
      aggregate: "unique",
      of: { name: "sku", kind: "string" },
      where: [],
      groupBy: ["sku"],
      maxGroups,
    });
    const groups = async (maxGroups: number) =>
      new Set((await fixture.store.aggregate(q(maxGroups))).map((r) => r.groups[0]));
    expect((await groups(3)).size).toBe(4);
    expect((await groups(10)).size).toBe(10);
  });
});

describe("a number property in the rollups", () => {
  const fixture = useSqlEventStore();
  const appId = crypto.randomUUID();
  // Day 1: `amount` logged as a number (rolled up as marks, no values); day 2: logged as a string after the type
  // was registered again (rolled up per value); day 3: `plan` only.
  const events: StoredEvent[] = [
    ...[5, 5, 7, 12.5].map((amount, i) => ({
      type: "order",
      at: D0 + i * 3_600_000,
      properties: { amount: String(amount), plan: "pro" },
      numbers: { amount },
    })),
    ...["5", "9"].map((amount, i) => ({
      type: "order",
      at: D0 + DAY + i * 3_600_000,
      properties: { amount, plan: "free" },
    })),
    { type: "order", at: D0 + 2 * DAY + 60_000, properties: { plan: "free" } },
  ];
  beforeAll(async () => {
    await fixture.store.insert(appId, events);
  }, 120_000);

  /** The count of `q` from the events themselves, per UTC day and group. */
  const truth = (groupOf: (e: StoredEvent) => string | null, keep: (e: StoredEvent) => boolean = () => true) => {
    const counts = new Map<string, number>();
    for (const e of events.filter(keep)) {
      const key = JSON.stringify([new Date(Math.floor(e.at / DAY) * DAY).toISOString(), groupOf(e)]);
      counts.set(key, (counts.get(key) ?? 0) + 1);
    }
    return [...counts].map(([k, n]) => [...(JSON.parse(k) as [string, string | null]), n]).sort();
  };
  const range = { appId, type: "order", since: D0, until: D0 + 3 * DAY };

  it("is rolled up as one mark per day and hour, not a row per value", async () => {
    const rows = await sql<{ prop: string; value: string; n: number }>`
      SELECT prop, value, sum(n)::int AS n FROM analytics_daily
      WHERE app_id = ${appId}::uuid AND day = ${new Date(D0)} GROUP BY 1, 2 ORDER BY 1, 2`.execute(fixture.db.db);
    expect(rows.rows).toEqual([
      { prop: "", value: "", n: 4 },
      { prop: "#amount", value: "", n: 4 },
      { prop: "plan", value: "pro", n: 4 },
    ]);
  });

  it("answers a count grouped by it, or by its string after a change of kind, exactly (from the raw events)", async () => {
    const grouped = await fixture.store.count({ ...range, unit: "day", groupBy: "amount" });
    expect(grouped.map((b) => [new Date(b.at).toISOString(), b.group, b.count]).sort()).toEqual(
      truth((e) => e.properties.amount ?? null),
    );
    // The other properties' rollups still answer as before, marks or not.
    const byPlan = await fixture.store.count({ ...range, unit: "day", groupBy: "plan" });
    expect(byPlan.map((b) => [new Date(b.at).toISOString(), b.group, b.count]).sort()).toEqual(
      truth((e) => e.properties.plan ?? null),
    );
  });

  it("answers a count with one condition on it, declared a string now, exactly", async () => {
    const rows = await fixture.store.aggregate({
      ...range,
      unit: "day",
      aggregate: "count",
      where: [{ property: "amount", kind: "string", op: "eq", value: "5" }],
      groupBy: [],
    });
    expect(rows.map((r) => [new Date(r.at!).toISOString(), null, r.count]).sort()).toEqual(
      truth(
        () => null,
        (e) => e.properties.amount === "5",
      ),
    );
    const present = await fixture.store.aggregate({
      ...range,
      unit: undefined,
      aggregate: "count",
      where: [{ property: "amount", kind: "string", op: "exists", value: true }],
      groupBy: [],
    });
    expect(present.map((r) => r.count)).toEqual([6]);
  });
});
