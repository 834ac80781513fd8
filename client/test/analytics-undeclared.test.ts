/**
 * `undeclaredProperties` against the real service, which refuses an event
 * with an undeclared property whole: by default the tracker sends such an
 * event again without the property; with "drop-event" it drops the event.
 * Either way each (type, property) is reported once, loudly, and counted.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startServer, type TestServer } from "../../test/support/harness.ts";
import { createClient, type DropInfo, type UndeclaredInfo } from "../src/index.ts";
import { appWithClicks, storedClicks } from "./support.ts";

let t: TestServer;
beforeAll(async () => {
  t = await startServer();
});
afterAll(() => t?.close());

describe("undeclared properties in the tracker", () => {
  it("drop-property (the default) keeps all 11 events, sends them without the property, reports it once", async () => {
    const a = await appWithClicks(t);
    const reports: UndeclaredInfo[] = [];
    const drops: DropInfo[] = [];
    const c = createClient({
      baseUrl: t.url,
      token: a.token,
      analytics: {
        batchSize: 11,
        flushIntervalMs: 3_600_000,
        onUndeclared: (u) => reports.push(u),
        onDrop: (d) => drops.push(d),
      },
    });
    // 6 of 11 events carry properties the type does not declare (one carries two).
    for (let i = 0; i < 11; i++) {
      if (i % 2 === 1) c.analytics.track("click", { button: `b${i}`, ref: "ad" });
      else if (i === 4) c.analytics.track("click", { button: "b4", ref: "x", "utm.source": "y" });
      else c.analytics.track("click", { button: `b${i}` });
    }
    expect(await c.analytics.flush()).toEqual({ recorded: 11, dropped: 0 });
    expect(drops).toEqual([]);
    expect(await storedClicks(t, a.token)).toBe(11);
    // Each property reported once, its events counted.
    expect(reports).toEqual([
      { type: "click", property: "ref", action: "drop-property" },
      { type: "click", property: "utm.source", action: "drop-property" },
    ]);
    expect(c.analytics.undeclared).toEqual({ click: { ref: 6, "utm.source": 1 } });
    // A later batch with the same property is not reported again, only counted.
    c.analytics.track("click", { button: "b", ref: "again" });
    expect(await c.analytics.flush()).toEqual({ recorded: 1, dropped: 0 });
    expect(reports).toHaveLength(2);
    expect(c.analytics.undeclared).toEqual({ click: { ref: 7, "utm.source": 1 } });
    // The stored events kept their declared property.
    const q = await c.analytics.query({
      type: "click",
      since: Date.now() - 3_600_000,
      until: Date.now() + 60_000,
      groupBy: "button",
      interval: "month",
    });
    expect(q.buckets.map((b) => b.group).sort()).toEqual([
      "b",
      "b0",
      "b1",
      "b10",
      "b2",
      "b3",
      "b4",
      "b5",
      "b6",
      "b7",
      "b8",
      "b9",
    ]);
    await c.close();
  });

  it("drop-event drops those events (reason undeclared), reports each property once, stores the rest", async () => {
    const a = await appWithClicks(t);
    const reports: UndeclaredInfo[] = [];
    const drops: DropInfo[] = [];
    const c = createClient({
      baseUrl: t.url,
      token: a.token,
      analytics: {
        batchSize: 11,
        flushIntervalMs: 3_600_000,
        undeclaredProperties: "drop-event",
        onUndeclared: (u) => reports.push(u),
        onDrop: (d) => drops.push(d),
      },
    });
    for (let i = 0; i < 11; i++) c.analytics.track("click", i < 6 ? { button: "b", ref: "ad" } : { button: "b" });
    expect(await c.analytics.flush()).toEqual({ recorded: 5, dropped: 6 });
    expect(await storedClicks(t, a.token)).toBe(5);
    expect(reports).toEqual([{ type: "click", property: "ref", action: "drop-event" }]);
    expect(drops.map((d) => [d.reason, d.events.length])).toEqual([["undeclared", 6]]);
    expect(c.analytics.undeclared).toEqual({ click: { ref: 6 } });
    await c.close();
  });

  it("says it loudly by default: one console.error per type and property, no warning per batch", async () => {
    const a = await appWithClicks(t);
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    try {
      const c = createClient({
        baseUrl: t.url,
        token: a.token,
        analytics: { batchSize: 2, flushIntervalMs: 3_600_000, undeclaredProperties: "drop-event" },
      });
      for (let i = 0; i < 4; i++) c.analytics.track("click", { ref: "ad" });
      expect(await c.analytics.flush()).toEqual({ recorded: 0, dropped: 4 });
      expect(error.mock.calls.map((call) => String(call[0]))).toEqual([
        'analytics: event type "click" does not declare property "ref": its events are dropped (undeclaredProperties: "drop-event"); declare it (POST /v1/analytics/types) to keep it. Reported once; counted in analytics.undeclared.',
      ]);
      expect(warn).not.toHaveBeenCalled();
      await c.close();
    } finally {
      error.mockRestore();
      warn.mockRestore();
    }
  });

  it("refuses an unknown mode at once", () => {
    expect(() =>
      createClient({ baseUrl: t.url, token: "x", analytics: { undeclaredProperties: "keep" as "drop-event" } }),
    ).toThrow(/undeclaredProperties/);
  });

  it("sends the identify()'d user, and a track's own over it", async () => {
    const a = await appWithClicks(t);
    const c = createClient({ baseUrl: t.url, token: a.token, analytics: { flushIntervalMs: 3_600_000 } });
    c.analytics.identify("user-1");
    c.analytics.track("click", { button: "a" });
    c.analytics.track("click", { button: "b" }, { distinctId: "user-2" });
    c.analytics.track("click", { button: "c" }, { distinctId: null });
    c.analytics.identify(undefined);
    c.analytics.track("click", { button: "d" }, Date.now());
    expect(await c.analytics.flush()).toEqual({ recorded: 4, dropped: 0 });
    const unique = await c.analytics.aggregate({
      type: "click",
      since: Date.now() - 3_600_000,
      until: Date.now() + 60_000,
      interval: "month",
      aggregate: "unique",
    });
    expect(unique.total).toBe(2);
    const funnel = await c.analytics.funnel({
      steps: [{ type: "click", where: [{ property: "button", op: "eq", value: "a" }] }, { type: "click" }],
      since: Date.now() - 3_600_000,
      until: Date.now() + 60_000,
    });
    // user-1 clicked a, then nothing more of their own; user-2's click is a start of nobody's.
    expect(funnel.steps.map((s) => s.users)).toEqual([1, 0]);
    await c.close();
  });
});
