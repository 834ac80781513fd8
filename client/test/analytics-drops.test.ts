/**
 * The tracker never loses what the service would store, against the real
 * service: a batch with bad events is sent again without them, every drop is
 * counted in `flush()` and reported once per batch, and at the daily cap
 * (a small `eventsPerDay` set through AdminService) the allowance is filled
 * exactly and nothing more is sent for `capRecheckMs`; after it the service is
 * asked again, so a cap raised meanwhile is used the same day.
 */
import { appWithClicks, storedClicks, urlOf } from "./support.ts";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startServer, type TestServer } from "../../test/support/harness.ts";
import { createClient, type DropInfo } from "../src/index.ts";

let t: TestServer;

beforeAll(async () => {
  t = await startServer();
});
afterAll(() => t?.close());

/** A fresh app with the `click` type registered, and its daily event cap. */
const appWithCap = (eventsPerDay?: number) => appWithClicks(t, eventsPerDay);

const stored = (token: string) => storedClicks(t, token);

/** Today's events counted by the service for the app, and its cap. */
async function usage(appId: string): Promise<{ used: number; cap: number }> {
  const { events } = await t.admin.getUsage({ appId });
  return { used: Number(events!.used), cap: Number(events!.cap) };
}

/**
 * Resolves once `ms` have passed since `from` (epoch ms): the tracker's cap
 * recheck interval elapsing is the behaviour under test, and no event marks it.
 */
async function elapsed(from: number, ms: number): Promise<void> {
  while (Date.now() <= from + ms) await new Promise((r) => setTimeout(r, from + ms - Date.now() + 1));
}

/** A fetch that records the status of every log call. */
function statusRecorder(statuses: number[]): typeof fetch {
  return async (input, init) => {
    const res = await fetch(input, init);
    if (urlOf(input).endsWith("/v1/analytics/events")) statuses.push(res.status);
    return res;
  };
}

describe("tracker drops", () => {
  it("250 tracked with 2 bad events: the 248 good ones are stored, the 2 bad reported once", async () => {
    const a = await appWithCap();
    const drops: DropInfo[] = [];
    const c = createClient({
      baseUrl: t.url,
      token: a.token,
      // An undeclared property drops its event here (the default sends the event without it: see analytics-undeclared.test.ts).
      analytics: {
        batchSize: 250,
        flushIntervalMs: 3_600_000,
        onDrop: (d) => drops.push(d),
        undeclaredProperties: "drop-event",
        onUndeclared: () => {},
      },
    });
    for (let i = 0; i < 250; i++) {
      if (i === 17) c.analytics.track("never.registered", { button: "x" });
      else if (i === 200) c.analytics.track("click", { undeclared: "y" });
      else c.analytics.track("click", { button: `b${i}` });
    }
    expect(await c.analytics.flush()).toEqual({ recorded: 248, dropped: 2 });
    expect(drops.map((d) => [d.reason, d.events.map((e) => e.type)])).toEqual([
      ["rejected", ["never.registered"]],
      ["undeclared", ["click"]],
    ]);
    expect(drops[0].error).toMatchObject({ status: 400, code: "invalid_argument" });
    expect(await stored(a.token)).toBe(248);
    await c.close();
  });

  it("more bad events than one answer names (20) are all found, and every good event stored", async () => {
    const a = await appWithCap();
    const c = createClient({
      baseUrl: t.url,
      token: a.token,
      analytics: { batchSize: 100, flushIntervalMs: 3_600_000, onDrop: () => {} },
    });
    for (let i = 0; i < 100; i++) c.analytics.track(i % 3 === 0 ? "unknown.type" : "click");
    expect(await c.analytics.flush()).toEqual({ recorded: 66, dropped: 34 });
    expect(await stored(a.token)).toBe(66);
    await c.close();
  });

  it("a burst of 20,000 with defaults: flush() counts every drop, reported in a few lines, not one per event", async () => {
    const a = await appWithCap();
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    try {
      const c = createClient({ baseUrl: t.url, token: a.token });
      for (let i = 0; i < 20_000; i++) c.analytics.track("click", { button: "b" });
      const result = await c.analytics.flush();
      expect(result.recorded + result.dropped).toBe(20_000);
      expect(result.dropped).toBeGreaterThan(0);
      expect(await stored(a.token)).toBe(result.recorded);
      expect(warn.mock.calls.length).toBeGreaterThan(0);
      expect(warn.mock.calls.length).toBeLessThanOrEqual(5);
      await c.close();
    } finally {
      warn.mockRestore();
    }
  });

  it("cap 5,000, 6,000 tracked: exactly 5,000 stored, 1,000 counted as dropped, no 429 spent", async () => {
    const a = await appWithCap(5000);
    const statuses: number[] = [];
    const drops: DropInfo[] = [];
    const c = createClient({
      baseUrl: t.url,
      token: a.token,
      fetch: statusRecorder(statuses),
      analytics: { flushIntervalMs: 3_600_000, maxBuffer: 6000, onDrop: (d) => drops.push(d) },
    });
    for (let i = 0; i < 6000; i++) c.analytics.track("click", { button: "b" });
    expect(await c.analytics.flush()).toEqual({ recorded: 5000, dropped: 1000 });
    expect(statuses.every((s) => s === 200)).toBe(true);
    expect(statuses).toHaveLength(50);
    expect(drops.every((d) => d.reason === "daily_cap")).toBe(true);
    expect(await stored(a.token)).toBe(5000);
    await c.close();
  });

  it("at a 429 the batch is cut to what the service says is left, then nothing is sent for capRecheckMs", async () => {
    const a = await appWithCap(5000);
    // Someone else spent 4,950 of the 5,000: this client does not know it.
    const other = createClient({ baseUrl: t.url, token: a.token });
    for (let i = 0; i < 5; i++) await other.analytics.log(Array.from({ length: 990 }, () => ({ type: "click" })));
    await other.close();
    const statuses: number[] = [];
    const c = createClient({
      baseUrl: t.url,
      token: a.token,
      fetch: statusRecorder(statuses),
      analytics: { batchSize: 1000, flushIntervalMs: 3_600_000, onDrop: () => {} },
    });
    for (let i = 0; i < 1000; i++) c.analytics.track("click");
    expect(await c.analytics.flush()).toEqual({ recorded: 50, dropped: 950 });
    expect(statuses).toEqual([429, 200]);
    // Capped for capRecheckMs (default 60 s): later batches are dropped without a call.
    for (let i = 0; i < 2000; i++) c.analytics.track("click");
    expect(await c.analytics.flush()).toEqual({ recorded: 0, dropped: 2000 });
    expect(statuses).toEqual([429, 200]);
    expect(await stored(a.token)).toBe(5000);
    await c.close();
  });

  it("without a count in the 429, halves the batch until what fits is found", async () => {
    const a = await appWithCap(1000);
    const other = createClient({ baseUrl: t.url, token: a.token });
    await other.analytics.log(Array.from({ length: 937 }, () => ({ type: "click" })));
    await other.close();
    // A proxy in front of the service that keeps the 429 but drops its details.
    const stripping: typeof fetch = async (input, init) => {
      const res = await fetch(input, init);
      if (res.status !== 429) return res;
      const body = (await res.json()) as { error: { code: string; message: string } };
      return new Response(JSON.stringify({ error: { code: body.error.code, message: body.error.message } }), {
        status: 429,
        headers: res.headers,
      });
    };
    const c = createClient({
      baseUrl: t.url,
      token: a.token,
      fetch: stripping,
      analytics: { batchSize: 100, flushIntervalMs: 3_600_000, onDrop: () => {} },
    });
    for (let i = 0; i < 100; i++) c.analytics.track("click");
    expect(await c.analytics.flush()).toEqual({ recorded: 63, dropped: 37 });
    expect(await stored(a.token)).toBe(1000);
    await c.close();
  });

  it("after a 429 with nothing left, a cap raised meanwhile is used once capRecheckMs has passed", async () => {
    const a = await appWithCap(5);
    // Someone else spent the 5: this client learns it from a 429 ("0 of 5 left today").
    const other = createClient({ baseUrl: t.url, token: a.token });
    await other.analytics.log(Array.from({ length: 5 }, () => ({ type: "click" })));
    await other.close();
    const statuses: number[] = [];
    const drops: DropInfo[] = [];
    const capRecheckMs = 500;
    const c = createClient({
      baseUrl: t.url,
      token: a.token,
      fetch: statusRecorder(statuses),
      analytics: { flushIntervalMs: 3_600_000, capRecheckMs, onDrop: (d) => drops.push(d) },
    });
    for (let i = 0; i < 3; i++) c.analytics.track("click");
    expect(await c.analytics.flush()).toEqual({ recorded: 0, dropped: 3 });
    const cappedAt = Date.now();
    expect(statuses).toEqual([429]);
    // Within capRecheckMs the cap is trusted: dropped without a call.
    c.analytics.track("click");
    expect(await c.analytics.flush()).toEqual({ recorded: 0, dropped: 1 });
    expect(statuses).toEqual([429]);
    expect(drops.map((d) => d.reason)).toEqual(["daily_cap", "daily_cap"]);

    await t.admin.updateApp({ appId: a.id, limits: { eventsPerDay: 1000 } });
    await elapsed(cappedAt, capRecheckMs);
    for (let i = 0; i < 10; i++) c.analytics.track("click");
    expect(await c.analytics.flush()).toEqual({ recorded: 10, dropped: 0 });
    expect(statuses).toEqual([429, 200]);
    expect(await usage(a.id)).toEqual({ used: 15, cap: 1000 });
    expect(await stored(a.token)).toBe(15);
    await c.close();
  });

  it("after an answer of remainingToday 0, a cap raised meanwhile is used once capRecheckMs has passed", async () => {
    const a = await appWithCap(5);
    const statuses: number[] = [];
    const sent: number[] = [];
    const capRecheckMs = 500;
    const c = createClient({
      baseUrl: t.url,
      token: a.token,
      fetch: statusRecorder(statuses),
      analytics: {
        flushIntervalMs: 3_600_000,
        capRecheckMs,
        onSent: (s) => sent.push(s.remainingToday),
        onDrop: () => {},
      },
    });
    // Exactly the cap: one call, answered with remainingToday 0 (no 429 involved).
    for (let i = 0; i < 5; i++) c.analytics.track("click");
    expect(await c.analytics.flush()).toEqual({ recorded: 5, dropped: 0 });
    const cappedAt = Date.now();
    expect(sent).toEqual([0]);
    // Within capRecheckMs that 0 is trusted: dropped without a call.
    for (let i = 0; i < 3; i++) c.analytics.track("click");
    expect(await c.analytics.flush()).toEqual({ recorded: 0, dropped: 3 });
    expect(statuses).toEqual([200]);

    await t.admin.updateApp({ appId: a.id, limits: { eventsPerDay: 1000 } });
    await elapsed(cappedAt, capRecheckMs);
    for (let i = 0; i < 10; i++) c.analytics.track("click");
    expect(await c.analytics.flush()).toEqual({ recorded: 10, dropped: 0 });
    expect(statuses).toEqual([200, 200]);
    expect(sent).toEqual([0, 985]);
    expect(await usage(a.id)).toEqual({ used: 15, cap: 1000 });
    expect(await stored(a.token)).toBe(15);
    await c.close();
  });
});
