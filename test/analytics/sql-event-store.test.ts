/**
 * The pure parts of the SQL event store: how a range is cut into pieces read
 * from raw events, hourly counts and daily totals, the rollup rows of a batch,
 * and the choice of rollup slots.
 * (Its results against a real database are in event-store.test.ts.)
 */
import { describe, expect, it } from "vitest";
import { createSlotPicker, planPieces, rollupRows } from "../../src/analytics/sql-event-store.ts";
import type { CountQuery, StoredEvent } from "../../src/analytics/event-store.ts";
import { T } from "./store-cases.ts";

const iso = (ranges: [number, number][]) =>
  ranges.map(([a, b]) => [new Date(a).toISOString(), new Date(b).toISOString()]);
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
    expect(plan({ ...range, timezone: "Europe/Berlin" })).toEqual({
      raw: [],
      hourly: [["2024-03-10T00:00:00.000Z", "2024-03-12T00:00:00.000Z"]],
      daily: [],
    });
  });

  it("counts raw events when the range holds no whole hour or the zone is not on whole hours", () => {
    const inside = { since: T("2024-03-10T10:15:00Z"), until: T("2024-03-10T10:45:00Z") };
    expect(plan(inside)).toEqual({
      raw: [["2024-03-10T10:15:00.000Z", "2024-03-10T10:45:00.000Z"]],
      hourly: [],
      daily: [],
    });
    const kolkata = { since: T("2024-03-10T00:00:00Z"), until: T("2024-03-12T00:00:00Z"), timezone: "Asia/Kolkata" };
    expect(plan(kolkata, false)).toEqual({
      raw: [["2024-03-10T00:00:00.000Z", "2024-03-12T00:00:00.000Z"]],
      hourly: [],
      daily: [],
    });
  });
});

describe("rollupRows", () => {
  const events: StoredEvent[] = [
    { type: "b", at: T("2024-03-10T10:30:00Z"), properties: { plan: "pro" } },
    { type: "a", at: T("2024-03-10T11:10:00Z"), properties: { plan: "pro", paid: "true" } },
    { type: "a", at: T("2024-03-10T10:10:00Z"), properties: {} },
    { type: "a", at: T("2024-03-10T11:50:00Z"), properties: { plan: "basic" } },
  ];

  it("sums a total row ('' property) and one row per property value, per UTC day, in key order, with the hourly counts", () => {
    const rows = rollupRows(events);
    const day = T("2024-03-10T00:00:00Z") / 86_400_000;
    const hours = (h10: number, h11: number) =>
      `{${[...Array<number>(10).fill(0), h10, h11, ...Array<number>(12).fill(0)].join(",")}}`;
    const table = rows.types.map((t, i) => [
      t,
      rows.props[i],
      rows.days[i],
      rows.values[i],
      rows.counts[i],
      rows.hours[i],
    ]);
    expect(table).toEqual([
      ["a", "", day, "", 3, hours(1, 2)],
      ["a", "paid", day, "true", 1, hours(0, 1)],
      ["a", "plan", day, "basic", 1, hours(0, 1)],
      ["a", "plan", day, "pro", 1, hours(0, 1)],
      ["b", "", day, "", 1, hours(1, 0)],
      ["b", "plan", day, "pro", 1, hours(1, 0)],
    ]);
  });

  it("keeps the days of a batch apart, before 1970 too", () => {
    const rows = rollupRows([
      { type: "a", at: T("2024-03-10T23:59:59Z"), properties: {} },
      { type: "a", at: T("2024-03-11T00:00:00Z"), properties: {} },
      { type: "a", at: T("1969-12-31T23:30:00Z"), properties: {} },
    ]);
    expect(rows.days).toEqual([-1, T("2024-03-10T00:00:00Z") / 86_400_000, T("2024-03-11T00:00:00Z") / 86_400_000]);
    expect(rows.hours.map((h) => h.slice(1, -1).split(",").map(Number).indexOf(1))).toEqual([23, 23, 0]);
  });
});

describe("createSlotPicker", () => {
  it("gives narrow batches the shared slot, concurrent wide ones a slot each, and a lone wide writer always the same one", () => {
    const picker = createSlotPicker(4, 2);
    const shared = picker.acquire(false);
    expect(picker.acquire(false)).toBe(shared);
    const a = picker.acquire(true);
    picker.release(a);
    expect(picker.acquire(true)).toBe(a);
    const wide = [a, picker.acquire(true), picker.acquire(true)];
    expect(new Set([shared, ...wide]).size).toBe(4);
    expect(wide.every((s) => s >= 0 && s < 4)).toBe(true);
    // A fourth wide batch shares a slot (not the shared one); once one is given back, the next gets that one.
    const fourth = picker.acquire(true);
    expect(wide).toContain(fourth);
    picker.release(wide[2]);
    expect(picker.acquire(true)).toBe(wide[2]);
  });

  it("has only the shared slot when there is one", () => {
    const picker = createSlotPicker(1);
    expect([picker.acquire(true), picker.acquire(false)]).toEqual([0, 0]);
  });
});
