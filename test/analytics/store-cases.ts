/**
 * Fixture events and hand-computed buckets shared by the event-store suite
 * (run on every real store) and the MongoDB pipeline tests (run on mingo).
 * `zoned` cases use a time zone: mingo gets zones wrong, so those run only
 * against real stores.
 */
import type { CountQuery, StoredEvent } from "../../src/analytics/event-store.ts";
import { utcBucketStart, type Unit } from "../../src/analytics/buckets.ts";

export const T = (iso: string): number => {
  const ms = Date.parse(iso);
  if (Number.isNaN(ms)) throw new Error(`bad fixture time ${iso}`);
  return ms;
};

export interface StoreCase {
  name: string;
  zoned?: boolean;
  events: StoredEvent[];
  query: Omit<CountQuery, "appId" | "type">;
  /** Buckets as [ISO start, group, count]. */
  expected: [string, string | null, number][];
}

const ev = (iso: string, properties: Record<string, string> = {}): StoredEvent => ({
  type: "signup",
  at: T(iso),
  properties,
});
const q = (unit: Unit, since: string, until: string, extra: Partial<CountQuery> = {}) => ({
  unit,
  since: T(since),
  until: T(until),
  ...extra,
});

export const STORE_CASES: StoreCase[] = [
  {
    name: "day buckets split exactly at UTC midnight",
    events: [ev("2024-03-10T23:59:59.999Z"), ev("2024-03-11T00:00:00.000Z"), ev("2024-03-11T12:00:00Z")],
    query: q("day", "2024-03-10T00:00:00Z", "2024-03-12T00:00:00Z"),
    expected: [
      ["2024-03-10T00:00:00.000Z", null, 1],
      ["2024-03-11T00:00:00.000Z", null, 2],
    ],
  },
  {
    name: "hour buckets",
    events: [ev("2024-03-10T10:00:00Z"), ev("2024-03-10T10:59:59.999Z"), ev("2024-03-10T11:00:00Z")],
    query: q("hour", "2024-03-10T00:00:00Z", "2024-03-11T00:00:00Z"),
    expected: [
      ["2024-03-10T10:00:00.000Z", null, 2],
      ["2024-03-10T11:00:00.000Z", null, 1],
    ],
  },
  {
    name: "weeks start on Monday and the first bucket may start before since",
    // 2024-03-01 is a Friday, 2024-03-10 a Sunday, 2024-03-11 a Monday.
    events: [
      ev("2024-03-01T00:00:00Z"),
      ev("2024-03-10T23:00:00Z"),
      ev("2024-03-11T00:00:00Z"),
      ev("2024-03-17T10:00:00Z"),
    ],
    query: q("week", "2024-03-01T00:00:00Z", "2024-03-31T00:00:00Z"),
    expected: [
      ["2024-02-26T00:00:00.000Z", null, 1],
      ["2024-03-04T00:00:00.000Z", null, 1],
      ["2024-03-11T00:00:00.000Z", null, 2],
    ],
  },
  {
    name: "month starts and the leap day (months)",
    events: [
      ev("2024-01-31T23:59:59.999Z"),
      ev("2024-02-29T00:00:00Z"),
      ev("2024-02-29T23:59:59.999Z"),
      ev("2024-03-01T00:00:00Z"),
    ],
    query: q("month", "2024-01-01T00:00:00Z", "2024-04-01T00:00:00Z"),
    expected: [
      ["2024-01-01T00:00:00.000Z", null, 1],
      ["2024-02-01T00:00:00.000Z", null, 2],
      ["2024-03-01T00:00:00.000Z", null, 1],
    ],
  },
  {
    name: "the leap day is a day bucket of its own",
    events: [
      ev("2024-02-28T23:59:59.999Z"),
      ev("2024-02-29T00:00:00Z"),
      ev("2024-02-29T23:59:59.999Z"),
      ev("2024-03-01T00:00:00Z"),
    ],
    query: q("day", "2024-02-28T00:00:00Z", "2024-03-02T00:00:00Z"),
    expected: [
      ["2024-02-28T00:00:00.000Z", null, 1],
      ["2024-02-29T00:00:00.000Z", null, 2],
      ["2024-03-01T00:00:00.000Z", null, 1],
    ],
  },
  {
    name: "since is inclusive and until exclusive, inside hours",
    events: [
      ev("2024-03-10T09:59:59.999Z"),
      ev("2024-03-10T10:15:00Z"),
      ev("2024-03-10T10:30:00Z"),
      ev("2024-03-10T11:00:00Z"),
      ev("2024-03-10T12:00:00Z"),
      ev("2024-03-10T12:44:59.999Z"),
      ev("2024-03-10T12:45:00Z"),
    ],
    query: q("day", "2024-03-10T10:15:00Z", "2024-03-10T12:45:00Z"),
    expected: [["2024-03-10T00:00:00.000Z", null, 5]],
  },
  {
    name: "hour buckets with both ends inside an hour",
    events: [
      ev("2024-03-10T10:10:00Z"),
      ev("2024-03-10T10:50:00Z"),
      ev("2024-03-10T11:20:00Z"),
      ev("2024-03-10T13:10:00Z"),
      ev("2024-03-10T13:50:00Z"),
    ],
    query: q("hour", "2024-03-10T10:30:00Z", "2024-03-10T13:30:00Z"),
    expected: [
      ["2024-03-10T10:00:00.000Z", null, 1],
      ["2024-03-10T11:00:00.000Z", null, 1],
      ["2024-03-10T13:00:00.000Z", null, 1],
    ],
  },
  {
    name: "a range inside one hour",
    events: [ev("2024-03-10T10:10:00Z"), ev("2024-03-10T10:20:00Z"), ev("2024-03-10T10:40:00Z")],
    query: q("hour", "2024-03-10T10:15:00Z", "2024-03-10T10:45:00Z"),
    expected: [["2024-03-10T10:00:00.000Z", null, 2]],
  },
  {
    name: "groupBy: events without the property count under null, null sorts first",
    events: [
      ev("2024-03-10T10:00:00Z", { plan: "pro" }),
      ev("2024-03-10T11:00:00Z", { plan: "basic" }),
      ev("2024-03-10T12:00:00Z", { plan: "pro" }),
      ev("2024-03-10T13:00:00Z"),
      ev("2024-03-10T14:00:00Z", { country: "de" }),
      ev("2024-03-11T09:30:00Z", { plan: "team" }),
    ],
    query: q("day", "2024-03-10T00:00:00Z", "2024-03-12T00:00:00Z", { groupBy: "plan" }),
    expected: [
      ["2024-03-10T00:00:00.000Z", null, 2],
      ["2024-03-10T00:00:00.000Z", "basic", 1],
      ["2024-03-10T00:00:00.000Z", "pro", 2],
      ["2024-03-11T00:00:00.000Z", "team", 1],
    ],
  },
  {
    name: "groupBy a number and a boolean property (values stored as strings)",
    events: [
      ev("2024-03-10T10:00:00Z", { seats: "3", paid: "true" }),
      ev("2024-03-10T10:05:00Z", { seats: "10", paid: "false" }),
      ev("2024-03-10T10:10:00Z", { seats: "3", paid: "true" }),
    ],
    query: q("hour", "2024-03-10T10:00:00Z", "2024-03-10T11:00:00Z", { groupBy: "seats" }),
    expected: [
      ["2024-03-10T10:00:00.000Z", "10", 1],
      ["2024-03-10T10:00:00.000Z", "3", 2],
    ],
  },
  {
    name: "groupBy a boolean property",
    events: [
      ev("2024-03-10T10:00:00Z", { seats: "3", paid: "true" }),
      ev("2024-03-10T10:05:00Z", { seats: "10", paid: "false" }),
      ev("2024-03-10T10:10:00Z", { seats: "3", paid: "true" }),
    ],
    query: q("day", "2024-03-10T00:00:00Z", "2024-03-11T00:00:00Z", { groupBy: "paid" }),
    expected: [
      ["2024-03-10T00:00:00.000Z", "false", 1],
      ["2024-03-10T00:00:00.000Z", "true", 2],
    ],
  },
  {
    name: "groupBy a property whose name contains a dot",
    events: [
      ev("2024-03-10T10:00:00Z", { "utm.source": "mail" }),
      ev("2024-03-10T10:20:00Z", { "utm.source": "ads" }),
      ev("2024-03-10T10:40:00Z"),
    ],
    query: q("day", "2024-03-10T00:00:00Z", "2024-03-11T00:00:00Z", { groupBy: "utm.source" }),
    expected: [
      ["2024-03-10T00:00:00.000Z", null, 1],
      ["2024-03-10T00:00:00.000Z", "ads", 1],
      ["2024-03-10T00:00:00.000Z", "mail", 1],
    ],
  },
  {
    name: "events before 1970",
    events: [ev("1969-12-31T23:59:59.999Z"), ev("1970-01-01T00:00:00Z")],
    query: q("day", "1969-12-01T00:00:00Z", "1970-02-01T00:00:00Z"),
    expected: [
      ["1969-12-31T00:00:00.000Z", null, 1],
      ["1970-01-01T00:00:00.000Z", null, 1],
    ],
  },
  // Time zones (real stores only).
  {
    name: "Europe/Berlin day buckets across the spring DST change (2024-03-31 has 23 hours)",
    zoned: true,
    events: [
      ev("2024-03-30T22:59:00Z", { plan: "pro" }), // 23:59 CET on Mar 30
      ev("2024-03-30T23:00:00Z", { plan: "pro" }), // 00:00 CET on Mar 31
      ev("2024-03-31T21:59:00Z"), // 23:59 CEST on Mar 31
      ev("2024-03-31T22:00:00Z", { plan: "team" }), // 00:00 CEST on Apr 1
    ],
    query: q("day", "2024-03-29T23:00:00Z", "2024-04-01T22:00:00Z", { timezone: "Europe/Berlin", groupBy: "plan" }),
    expected: [
      ["2024-03-29T23:00:00.000Z", "pro", 1],
      ["2024-03-30T23:00:00.000Z", null, 1],
      ["2024-03-30T23:00:00.000Z", "pro", 1],
      ["2024-03-31T22:00:00.000Z", "team", 1],
    ],
  },
  {
    name: "America/New_York day buckets across the autumn DST change (2024-11-03 has 25 hours)",
    zoned: true,
    events: [
      ev("2024-11-03T03:59:00Z"),
      ev("2024-11-03T04:00:00Z"),
      ev("2024-11-04T04:30:00Z"),
      ev("2024-11-04T05:00:00Z"),
    ],
    query: q("day", "2024-11-02T04:00:00Z", "2024-11-05T05:00:00Z", { timezone: "America/New_York" }),
    expected: [
      ["2024-11-02T04:00:00.000Z", null, 1],
      ["2024-11-03T04:00:00.000Z", null, 2],
      ["2024-11-04T05:00:00.000Z", null, 1],
    ],
  },
  {
    name: "Europe/Berlin weeks start on local Monday midnight",
    zoned: true,
    events: [ev("2024-03-31T21:59:00Z"), ev("2024-03-31T22:00:00Z"), ev("2024-04-07T21:59:59.999Z")],
    query: q("week", "2024-03-20T00:00:00Z", "2024-04-20T00:00:00Z", { timezone: "Europe/Berlin" }),
    expected: [
      ["2024-03-24T23:00:00.000Z", null, 1],
      ["2024-03-31T22:00:00.000Z", null, 2],
    ],
  },
  {
    name: "America/New_York months start on local midnight",
    zoned: true,
    events: [
      ev("2024-03-01T04:59:00Z"),
      ev("2024-03-01T05:00:00Z"),
      ev("2024-04-01T03:59:00Z"),
      ev("2024-04-01T04:00:00Z"),
    ],
    query: q("month", "2024-02-10T00:00:00Z", "2024-04-10T00:00:00Z", { timezone: "America/New_York" }),
    expected: [
      ["2024-02-01T05:00:00.000Z", null, 1],
      ["2024-03-01T05:00:00.000Z", null, 2],
      ["2024-04-01T04:00:00.000Z", null, 1],
    ],
  },
  {
    name: "Asia/Kolkata (+05:30) days start on a half hour",
    zoned: true,
    events: [
      ev("2024-03-10T18:29:00Z", { plan: "pro" }),
      ev("2024-03-10T18:30:00Z", { plan: "pro" }),
      ev("2024-03-11T18:29:59.999Z"),
    ],
    query: q("day", "2024-03-09T00:00:00Z", "2024-03-13T00:00:00Z", { timezone: "Asia/Kolkata", groupBy: "plan" }),
    expected: [
      ["2024-03-09T18:30:00.000Z", "pro", 1],
      ["2024-03-10T18:30:00.000Z", null, 1],
      ["2024-03-10T18:30:00.000Z", "pro", 1],
    ],
  },
  {
    name: "Atlantic/Azores: a day whose midnight happens twice (summer time ends at 01:00, back to 00:00) starts at the first",
    zoned: true,
    events: [
      ev("2024-10-26T12:00:00Z"), // Oct 26
      ev("2024-10-27T00:30:00Z"), // 00:30 on Oct 27, summer time (+00:00)
      ev("2024-10-27T01:30:00Z"), // 00:30 on Oct 27 again, standard time (-01:00)
    ],
    query: q("day", "2024-10-26T00:00:00Z", "2024-10-29T00:00:00Z", { timezone: "Atlantic/Azores" }),
    expected: [
      ["2024-10-26T00:00:00.000Z", null, 1],
      ["2024-10-27T00:00:00.000Z", null, 2],
    ],
  },
  {
    name: "America/Havana: a month whose first midnight happens twice starts at the first",
    zoned: true,
    events: [ev("2026-11-01T04:30:00Z"), ev("2026-11-01T05:30:00Z"), ev("2026-11-20T12:00:00Z")],
    query: q("month", "2026-10-15T00:00:00Z", "2026-11-25T00:00:00Z", { timezone: "America/Havana" }),
    expected: [["2026-11-01T04:00:00.000Z", null, 3]],
  },
  {
    name: "the years 1 to 99 are their own (not read as 1900s or 2000s)",
    events: [ev("0050-03-01T10:30:00Z"), ev("0099-12-31T23:59:59Z")],
    query: q("month", "0050-03-01T00:00:00Z", "0100-01-01T00:00:00Z"),
    expected: [
      ["0050-03-01T00:00:00.000Z", null, 1],
      ["0099-12-01T00:00:00.000Z", null, 1],
    ],
  },
];

/** A seeded spread of events over a few days, for comparing a store with the reference count. */
export function spreadEvents(count: number, seed = 7): StoredEvent[] {
  let x = seed;
  const next = () => (x = (x * 1103515245 + 12345) % 2147483648) / 2147483648;
  const start = T("2024-02-27T00:00:00Z");
  const plans = ["basic", "pro", "team", "free"];
  const out: StoredEvent[] = [];
  for (let i = 0; i < count; i++) {
    const r = next();
    const properties: Record<string, string> = {};
    if (r > 0.2) properties.plan = plans[Math.floor(next() * plans.length)]!;
    if (r > 0.5) properties.paid = next() > 0.5 ? "true" : "false";
    out.push({ type: "signup", at: start + Math.floor(next() * 5 * 86_400_000), properties });
  }
  return out;
}

/** The reference count in UTC: plain arithmetic over the events, no store. */
export function referenceCount(
  events: readonly StoredEvent[],
  query: StoreCase["query"],
): [string, string | null, number][] {
  const counts = new Map<string, number>();
  for (const e of events) {
    if (e.at < query.since || e.at >= query.until) continue;
    const group = query.groupBy === undefined ? null : (e.properties[query.groupBy] ?? null);
    const key = JSON.stringify([utcBucketStart(e.at, query.unit), group]);
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  return [...counts]
    .map(([key, n]) => {
      const [at, group] = JSON.parse(key) as [number, string | null];
      return [at, group, n] as const;
    })
    .sort((a, b) => a[0] - b[0] || (a[1] === b[1] ? 0 : a[1] === null ? -1 : b[1] === null ? 1 : a[1] < b[1] ? -1 : 1))
    .map(([at, group, n]) => [new Date(at).toISOString(), group, n]);
}
