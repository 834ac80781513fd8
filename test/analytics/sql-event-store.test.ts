/**
 * The pure parts of the SQL event store: how a range is cut into pieces read
 * from raw events, hourly and daily rollups, and the rollup rows of a batch.
 * (Its results against a real database are in event-store.test.ts.)
 */
import { describe, expect, it } from "vitest";
import { planPieces, rollupRows } from "../../src/analytics/sql-event-store.ts";
import type { CountQuery, StoredEvent } from "../../src/analytics/event-store.ts";
import { T } from "./store-cases.ts";

const iso = (ranges: [number, number][]) => ranges.map(([a, b]) => [new Date(a).toISOString(), new Date(b).toISOString()]);
const plan = (q: Partial<CountQuery> & { since: number; until: number }, hourlyExact = true) => {
  const p = planPieces({ appId: "a", type: "t", unit: "day", ...q }, hourlyExact);
  return { raw: iso(p.raw), hourly: iso(p.hourly), daily: iso(p.daily) };
};

describe("planPieces", () => {
  it("reads whole UTC days from daily rollups, whole hours from hourly rollups, and the rest raw", () => {
    expect(plan({ since: T("2024-03-10T07:20:00Z"), until: T("2024-03-13T15:40:00Z") })).toEqual({
      raw: [
        ["2024-03-10T07:20:00.000Z", "2024-03-10T08:00:00.000Z"],
        ["2024-03-13T15:00:00.000Z", "2024-03-13T15:40:00.000Z"],
      ],
      hourly: [
        ["2024-03-10T08:00:00.000Z", "2024-03-11T00:00:00.000Z"],
        ["2024-03-13T00:00:00.000Z", "2024-03-13T15:00:00.000Z"],
      ],
      daily: [["2024-03-11T00:00:00.000Z", "2024-03-13T00:00:00.000Z"]],
    });
  });

  it("needs no raw events or hours for a range of whole days", () => {
    expect(plan({ since: T("2024-03-10T00:00:00Z"), until: T("2024-03-12T00:00:00Z"), unit: "month" })).toEqual({
      raw: [],
      hourly: [],
      daily: [["2024-03-10T00:00:00.000Z", "2024-03-12T00:00:00.000Z"]],
    });
  });

  it("uses no daily rollups for hour buckets or in a time zone", () => {
    const range = { since: T("2024-03-10T00:00:00Z"), until: T("2024-03-12T00:00:00Z") };
    expect(plan({ ...range, unit: "hour" }).daily).toEqual([]);
    expect(plan({ ...range, timezone: "Europe/Berlin" })).toEqual({ raw: [], hourly: [["2024-03-10T00:00:00.000Z", "2024-03-12T00:00:00.000Z"]], daily: [] });
  });

  it("counts raw events when the range holds no whole hour or the zone is not on whole hours", () => {
    const inside = { since: T("2024-03-10T10:15:00Z"), until: T("2024-03-10T10:45:00Z") };
    expect(plan(inside)).toEqual({ raw: [["2024-03-10T10:15:00.000Z", "2024-03-10T10:45:00.000Z"]], hourly: [], daily: [] });
    const kolkata = { since: T("2024-03-10T00:00:00Z"), until: T("2024-03-12T00:00:00Z"), timezone: "Asia/Kolkata" };
    expect(plan(kolkata, false)).toEqual({ raw: [["2024-03-10T00:00:00.000Z", "2024-03-12T00:00:00.000Z"]], hourly: [], daily: [] });
  });
});

describe("rollupRows", () => {
  const events: StoredEvent[] = [
    { type: "b", at: T("2024-03-10T10:30:00Z"), properties: { plan: "pro" } },
    { type: "a", at: T("2024-03-10T11:10:00Z"), properties: { plan: "pro", paid: "true" } },
    { type: "a", at: T("2024-03-10T10:10:00Z"), properties: {} },
    { type: "a", at: T("2024-03-10T11:50:00Z"), properties: { plan: "basic" } },
  ];

  it("sums a total row ('' property) and one row per property value, per bucket, in key order", () => {
    const rows = rollupRows(events, 3_600_000);
    const h = (iso: string) => T(iso) / 3_600_000;
    const table = rows.types.map((t, i) => [t, rows.props[i], rows.buckets[i], rows.values[i], rows.counts[i]]);
    expect(table).toEqual([
      ["a", "", h("2024-03-10T10:00:00Z"), "", 1],
      ["a", "", h("2024-03-10T11:00:00Z"), "", 2],
      ["a", "paid", h("2024-03-10T11:00:00Z"), "true", 1],
      ["a", "plan", h("2024-03-10T11:00:00Z"), "basic", 1],
      ["a", "plan", h("2024-03-10T11:00:00Z"), "pro", 1],
      ["b", "", h("2024-03-10T10:00:00Z"), "", 1],
      ["b", "plan", h("2024-03-10T10:00:00Z"), "pro", 1],
    ]);
  });

  it("rolls a batch up per day as well", () => {
    const rows = rollupRows(events, 86_400_000);
    expect(rows.counts).toEqual([3, 1, 1, 1, 1, 1]);
    expect(new Set(rows.buckets)).toEqual(new Set([T("2024-03-10T00:00:00Z") / 86_400_000]));
  });
});
