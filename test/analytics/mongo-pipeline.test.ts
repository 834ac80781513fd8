/**
 * The MongoDB store's pipelines, run without a server: every pipeline that
 * `buildCountPipeline` builds for the shared store cases is executed by mingo
 * (an in-process MongoDB query engine) over the documents `toDocuments` would
 * insert. Only UTC cases: mingo truncates zoned dates wrongly, so zoned
 * pipelines are checked for their shape here and for their results in the
 * real-MongoDB store suite.
 */
import { describe, expect, it } from "vitest";
import { aggregate } from "mingo";
import { buildCountPipeline, fieldName, toDocuments } from "../../src/analytics/mongo-event-store.ts";
import type { CountQuery, StoredEvent } from "../../src/analytics/event-store.ts";
import { STORE_CASES, T, referenceCount, spreadEvents } from "./store-cases.ts";

const APP = "0b7f6c0e-0000-4000-8000-000000000001";
const OTHER = "0b7f6c0e-0000-4000-8000-000000000002";

function countWithMingo(events: StoredEvent[], query: CountQuery) {
  const docs = [
    ...toDocuments(APP, events, "batch-1"),
    ...toDocuments(OTHER, events, "batch-2"),
    ...toDocuments(
      APP,
      events.map((e) => ({ ...e, type: "other" })),
      "batch-3",
    ),
  ];
  const rows = aggregate(docs, buildCountPipeline(query)) as { at: Date; group: string | null; count: number }[];
  return rows.map((r) => [r.at.toISOString(), r.group ?? null, r.count]);
}

describe("buildCountPipeline on mingo (UTC cases of the store suite)", () => {
  for (const c of STORE_CASES.filter((c) => !c.zoned)) {
    it(c.name, () => {
      expect(countWithMingo(c.events, { appId: APP, type: "signup", ...c.query })).toEqual(c.expected);
    });
  }

  it("agrees with the reference count on a spread of events, for every unit, grouped or not", () => {
    const events = spreadEvents(600);
    for (const unit of ["hour", "day", "week", "month"] as const) {
      for (const groupBy of [undefined, "plan", "paid"]) {
        const query = { unit, since: T("2024-02-27T07:20:00Z"), until: T("2024-03-03T15:40:00Z"), groupBy };
        expect(countWithMingo(events, { appId: APP, type: "signup", ...query }), `${unit} ${groupBy}`).toEqual(
          referenceCount(events, query),
        );
      }
    }
  });
});

describe("buildCountPipeline shape", () => {
  const base: CountQuery = {
    appId: APP,
    type: "signup",
    unit: "day",
    since: T("2024-03-01T00:00:00Z"),
    until: T("2024-04-01T00:00:00Z"),
  };
  const truncOf = (q: CountQuery) =>
    (buildCountPipeline(q)[1] as { $group: { _id: { at: { $dateTrunc: Record<string, unknown> } } } }).$group._id.at
      .$dateTrunc;

  it("matches on the meta field and the time range first, so MongoDB can use its bucket index", () => {
    expect(buildCountPipeline(base)[0]).toEqual({
      $match: { "meta.app": APP, "meta.type": "signup", at: { $gte: new Date(base.since), $lt: new Date(base.until) } },
    });
  });

  it("asks for Monday weeks only for week buckets", () => {
    expect(truncOf({ ...base, unit: "week" }).startOfWeek).toBe("monday");
    expect(truncOf(base).startOfWeek).toBeUndefined();
  });

  it("passes the time zone to $dateTrunc, and none for UTC", () => {
    expect(truncOf({ ...base, timezone: "Europe/Berlin" }).timezone).toBe("Europe/Berlin");
    expect(truncOf(base).timezone).toBeUndefined();
    expect(truncOf({ ...base, timezone: "UTC" }).timezone).toBeUndefined();
  });

  it("is pure: the same query gives the same pipeline", () => {
    expect(buildCountPipeline({ ...base, groupBy: "plan" })).toEqual(buildCountPipeline({ ...base, groupBy: "plan" }));
  });

  it("stores dotted property names so they are not read as paths", () => {
    expect(fieldName("utm.source")).toBe("utm:source");
    const [doc] = toDocuments(APP, [{ type: "signup", at: 0, properties: { "utm.source": "mail" } }], "b");
    expect(doc).toEqual({ at: new Date(0), meta: { app: APP, type: "signup" }, p: { "utm:source": "mail" }, b: "b" });
  });
});
