/**
 * `analytics.track` against the real service: batches never above the
 * service's 1000 per call (checked on the wire), the time threshold, the
 * flush on close, and the daily cap's refusals reported to `onDrop` instead
 * of thrown from a timer.
 */
import { urlOf } from "./support.ts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startServer, type TestApp, type TestServer } from "../../test/support/harness.ts";
import { createClient, MAX_EVENTS_PER_CALL, type DropInfo, type SentInfo } from "../src/index.ts";

let t: TestServer;
let app: TestApp;

beforeAll(async () => {
  t = await startServer();
  app = await t.createApp();
  const c = createClient({ baseUrl: t.url, token: app.token });
  await c.analytics.registerType({ name: "click", properties: { button: "string" } });
});
afterAll(() => t?.close());

/** A fetch that records how many events each log call carried. */
function recordingFetch(sizes: number[]): typeof fetch {
  return (input, init) => {
    if (urlOf(input).endsWith("/v1/analytics/events"))
      sizes.push((JSON.parse(init!.body as string) as { events: unknown[] }).events.length);
    return fetch(input, init);
  };
}

async function total(token: string, type = "click"): Promise<number> {
  const c = createClient({ baseUrl: t.url, token });
  return (
    await c.analytics.query({ type, since: Date.now() - 3_600_000, until: Date.now() + 60_000, interval: "hour" })
  ).total;
}

describe("analytics.track", () => {
  it("sends full batches of at most 1000 events, and the rest on flush()", async () => {
    const a = await t.createApp();
    const setup = createClient({ baseUrl: t.url, token: a.token });
    await setup.analytics.registerType({ name: "click", properties: { button: "string" } });
    const sizes: number[] = [];
    const sent: SentInfo[] = [];
    const c = createClient({
      baseUrl: t.url,
      token: a.token,
      fetch: recordingFetch(sizes),
      analytics: { batchSize: MAX_EVENTS_PER_CALL, flushIntervalMs: 60_000, onSent: (info) => sent.push(info) },
    });
    for (let i = 0; i < 2500; i++) c.analytics.track("click", { button: i % 2 ? "ok" : "cancel" });
    const result = await c.analytics.flush();
    expect(c.analytics.pending).toBe(0);
    expect(sizes).toEqual([1000, 1000, 500]);
    expect(sent.map((s) => [s.events, s.recorded])).toEqual([
      [1000, 1000],
      [1000, 1000],
      [500, 500],
    ]);
    expect(sent.at(-1)!.remainingToday).toBe(100000 - 2500);
    expect(result).toEqual({ recorded: 2500, dropped: 0 });
    expect(await total(a.token)).toBe(2500);
    await c.close();
  });

  it("keeps sending after a flush of an empty buffer", async () => {
    const c = createClient({ baseUrl: t.url, token: app.token, analytics: { flushIntervalMs: 3_600_000 } });
    const before = await total(app.token);
    expect(await c.analytics.flush()).toEqual({ recorded: 0, dropped: 0 });
    c.analytics.track("click");
    expect(await c.analytics.flush()).toEqual({ recorded: 1, dropped: 0 });
    expect(await total(app.token)).toBe(before + 1);
    await c.close();
  });

  it("refuses a batch size above the service's maximum", () => {
    expect(() => createClient({ baseUrl: t.url, token: app.token, analytics: { batchSize: 1001 } })).toThrow(
      /1 to 1000/,
    );
  });

  it("sends a partial batch when the time threshold passes", async () => {
    const sizes: number[] = [];
    let onSent!: (info: SentInfo) => void;
    const sentOnce = new Promise<SentInfo>((resolve) => (onSent = resolve));
    const c = createClient({
      baseUrl: t.url,
      token: app.token,
      fetch: recordingFetch(sizes),
      analytics: { batchSize: 100, flushIntervalMs: 50, onSent },
    });
    const before = await total(app.token);
    const at = Date.now() - 60_000;
    c.analytics.track("click", { button: "a" }, at);
    c.analytics.track("click", { button: "b" });
    c.analytics.track("click");
    expect(sizes).toEqual([]);
    expect(await sentOnce).toEqual({ events: 3, recorded: 3, remainingToday: expect.any(Number) });
    expect(sizes).toEqual([3]);
    expect(await total(app.token)).toBe(before + 3);
    await c.close();
  });

  it("keeps each event's properties as they were when tracked, whatever the caller changes afterwards", async () => {
    const a = await t.createApp();
    const c = createClient({ baseUrl: t.url, token: a.token, analytics: { flushIntervalMs: 3_600_000 } });
    await c.analytics.registerType({ name: "click", properties: { button: "string" } });
    // One object, reused and changed between calls (as a loop over a mutable state would).
    const props = { button: "first" };
    c.analytics.track("click", props);
    props.button = "second";
    c.analytics.track("click", props);
    await c.analytics.flush();
    const result = await c.analytics.query({
      type: "click",
      since: Date.now() - 3_600_000,
      until: Date.now() + 60_000,
      interval: "hour",
      groupBy: "button",
    });
    const counts = Object.fromEntries(result.buckets.map((b) => [b.group, b.count]));
    expect(counts).toEqual({ first: 1, second: 1 });
    await c.close();
  });

  it("flushes what is waiting on close(), and reports later events as dropped", async () => {
    const drops: DropInfo[] = [];
    const c = createClient({
      baseUrl: t.url,
      token: app.token,
      analytics: { flushIntervalMs: 3_600_000, onDrop: (d) => drops.push(d) },
    });
    const before = await total(app.token);
    for (let i = 0; i < 5; i++) c.analytics.track("click", { button: `b${i}` });
    await c.close();
    expect(c.analytics.pending).toBe(0);
    expect(await total(app.token)).toBe(before + 5);
    c.analytics.track("click");
    expect(drops).toEqual([{ reason: "closed", events: [{ type: "click", at: expect.any(Number) }] }]);
  });

  it("fills the daily cap exactly from the last answer's remainingToday, and sends nothing past it", async () => {
    const a = await t.createApp();
    await t.admin.updateApp({ appId: a.id, limits: { eventsPerDay: 5 } });
    const setup = createClient({ baseUrl: t.url, token: a.token });
    await setup.analytics.registerType({ name: "click", properties: { button: "string" } });
    const drops: DropInfo[] = [];
    const sent: SentInfo[] = [];
    const sizes: number[] = [];
    const c = createClient({
      baseUrl: t.url,
      token: a.token,
      fetch: recordingFetch(sizes),
      analytics: {
        batchSize: 3,
        flushIntervalMs: 3_600_000,
        onDrop: (d) => drops.push(d),
        onSent: (s) => sent.push(s),
      },
    });
    for (let i = 1; i <= 8; i++) c.analytics.track("click", { button: `b${i}` });
    const result = await c.analytics.flush();
    // 3 fit (2 left); of the next 3 the 2 left are sent; the last batch is not sent at all.
    expect(sizes).toEqual([3, 2]);
    expect(sent.map((s) => [s.events, s.remainingToday])).toEqual([
      [3, 2],
      [2, 0],
    ]);
    expect(drops.map((d) => [d.reason, d.events.map((e) => e.properties?.button)])).toEqual([
      ["daily_cap", ["b6"]],
      ["daily_cap", ["b7", "b8"]],
    ]);
    expect(result).toEqual({ recorded: 5, dropped: 3 });
    expect(await total(a.token)).toBe(5);
    await c.close();
  });

  it("a batch refused from a timer is reported, never thrown", async () => {
    let onDrop!: (d: DropInfo) => void;
    const dropped = new Promise<DropInfo>((resolve) => (onDrop = resolve));
    const c = createClient({ baseUrl: t.url, token: app.token, analytics: { flushIntervalMs: 10, onDrop } });
    c.analytics.track("never-registered", { x: 1 });
    const d = await dropped;
    expect(d.reason).toBe("rejected");
    expect(d.events).toEqual([{ type: "never-registered", at: expect.any(Number), properties: { x: 1 } }]);
    expect(d.error).toMatchObject({ status: 400, code: "invalid_argument" });
    await c.close();
  });
});
