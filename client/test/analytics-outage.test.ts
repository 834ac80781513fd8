/**
 * The tracker keeps what it cannot deliver, against the real service: a
 * batch that finds the service unreachable for longer than the transport's
 * retry budget (a small `budgetMs` here; 30 s by default) is kept, not
 * dropped, and sent again by a timer, first and under the same
 * Idempotency-Key, so a first attempt that was stored with its answer lost is
 * not stored twice. Kept events count toward `maxBuffer`, and `close()` gives
 * up on them (`error`) after one more attempt. The outage is a `fetch` in
 * front of the service that fails the log calls as a dropped network would.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startServer, type TestServer } from "../../test/support/harness.ts";
import { createClient, type DropInfo, type RetryOptions, type SentInfo } from "../src/index.ts";
import { appWithClicks, storedClicks, urlOf } from "./support.ts";

let t: TestServer;

beforeAll(async () => {
  t = await startServer();
});
afterAll(() => t?.close());

/** The transport gives up on a log call within about 300 ms, instead of 30 s. */
const shortBudget: RetryOptions = { budgetMs: 300, minDelayMs: 20, maxDelayMs: 100 };

/** A fresh app with the `click` type registered. */
const appWithClick = () => appWithClicks(t);

const stored = (token: string) => storedClicks(t, token);

interface Delivered {
  key: string;
  buttons: unknown[];
  status: number;
  replayed: boolean;
}

/**
 * A network in front of the service for the log calls: while `down`, each
 * call fails as an unreachable service does; `loseNextAnswer` lets the next
 * call reach the service and loses its answer. Records the key of every
 * attempt, and what reached the service and was answered.
 */
function network() {
  const net = {
    down: false,
    loseNextAnswer: false,
    /** The Idempotency-Key of every log call attempted. */
    keys: [] as string[],
    /** The log calls answered. */
    delivered: [] as Delivered[],
    /** Resolves once `n` log calls were attempted. */
    attempted(n: number): Promise<void> {
      if (net.keys.length >= n) return Promise.resolve();
      return new Promise((resolve) => waiters.push({ n, resolve }));
    },
    fetch: (async (input, init) => {
      if (!urlOf(input).endsWith("/v1/analytics/events")) return fetch(input, init);
      net.keys.push(new Headers(init?.headers).get("idempotency-key") ?? "");
      for (const w of waiters.filter((w) => net.keys.length >= w.n)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve();
      }
      if (net.loseNextAnswer) {
        net.loseNextAnswer = false;
        await (await fetch(input, init)).text();
        throw new TypeError("fetch failed", { cause: { code: "ECONNRESET" } });
      }
      if (net.down) throw new TypeError("fetch failed", { cause: { code: "ECONNREFUSED" } });
      const res = await fetch(input, init);
      const body = JSON.parse(init?.body as string) as { events: { properties?: { button?: unknown } }[] };
      net.delivered.push({
        key: net.keys.at(-1)!,
        buttons: body.events.map((e) => e.properties?.button),
        status: res.status,
        replayed: res.headers.get("idempotent-replayed") === "true",
      });
      return res;
    }) as typeof fetch,
  };
  const waiters: { n: number; resolve: () => void }[] = [];
  return net;
}

/** Resolves once `onSent` has counted `n` events recorded. */
function recordedCounter(n: number) {
  let recorded = 0;
  let resolve!: () => void;
  const done = new Promise<void>((r) => (resolve = r));
  return {
    done,
    onSent: (s: SentInfo) => {
      recorded += s.recorded;
      if (recorded >= n) resolve();
    },
  };
}

const buttons = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => `b${from + i}`);

describe("tracker during an outage longer than the retry budget", () => {
  it("keeps the batch and the retry timer sends it again under the same key, before newer events, stored once", async () => {
    const a = await appWithClick();
    const net = network();
    net.down = true;
    const drops: DropInfo[] = [];
    const counter = recordedCounter(30);
    const c = createClient({
      baseUrl: t.url,
      token: a.token,
      fetch: net.fetch,
      retry: shortBudget,
      analytics: { flushIntervalMs: 200, onDrop: (d) => drops.push(d), onSent: counter.onSent },
    });
    for (const b of buttons(0, 25)) c.analytics.track("click", { button: b });
    // The transport retried, then gave up: nothing recorded, nothing dropped, all still waiting.
    expect(await c.analytics.flush()).toEqual({ recorded: 0, dropped: 0 });
    expect(c.analytics.pending).toBe(25);
    expect(net.keys.length).toBeGreaterThan(1);
    const key = net.keys[0];
    // With nothing new tracked, the retry timer tries again.
    await net.attempted(net.keys.length + 1);
    // Newer events wait behind the kept batch.
    for (const b of buttons(25, 30)) c.analytics.track("click", { button: b });
    net.down = false;
    await counter.done;

    expect(drops).toEqual([]);
    expect(net.delivered.map((d) => [d.buttons, d.status, d.replayed])).toEqual([
      [buttons(0, 25), 200, false],
      [buttons(25, 30), 200, false],
    ]);
    expect(net.delivered[0].key).toBe(key);
    expect(net.delivered[1].key).not.toBe(key);
    // Every attempt at the kept batch used its key.
    expect(net.keys.slice(0, net.keys.lastIndexOf(key) + 1).every((k) => k === key)).toBe(true);
    expect(c.analytics.pending).toBe(0);
    expect(await c.analytics.flush()).toEqual({ recorded: 30, dropped: 0 });
    expect(await stored(a.token)).toBe(30);
    await c.close();
  });

  it("a first attempt stored with its answer lost, then an outage past the budget: stored once, not twice", async () => {
    const a = await appWithClick();
    const net = network();
    net.loseNextAnswer = true;
    net.down = true;
    const counter = recordedCounter(40);
    const drops: DropInfo[] = [];
    const c = createClient({
      baseUrl: t.url,
      token: a.token,
      fetch: net.fetch,
      retry: shortBudget,
      analytics: { flushIntervalMs: 200, onDrop: (d) => drops.push(d), onSent: counter.onSent },
    });
    for (const b of buttons(0, 40)) c.analytics.track("click", { button: b });
    expect(await c.analytics.flush()).toEqual({ recorded: 0, dropped: 0 });
    expect(c.analytics.pending).toBe(40);
    // The first attempt was stored; the client could not know.
    expect(await stored(a.token)).toBe(40);
    net.down = false;
    await counter.done;

    // The kept batch went again under its key: the service answered the first result.
    expect(net.delivered).toEqual([{ key: net.keys[0], buttons: buttons(0, 40), status: 200, replayed: true }]);
    expect(new Set(net.keys)).toEqual(new Set([net.keys[0]]));
    expect(drops).toEqual([]);
    expect(await c.analytics.flush()).toEqual({ recorded: 40, dropped: 0 });
    expect(await stored(a.token)).toBe(40);
    await c.close();
  });

  it("kept events count toward maxBuffer: the oldest are dropped (buffer_full), the rest delivered", async () => {
    const a = await appWithClick();
    const net = network();
    net.down = true;
    const drops: DropInfo[] = [];
    const c = createClient({
      baseUrl: t.url,
      token: a.token,
      fetch: net.fetch,
      retry: shortBudget,
      analytics: { batchSize: 10, maxBuffer: 20, flushIntervalMs: 3_600_000, onDrop: (d) => drops.push(d) },
    });
    for (const b of buttons(0, 10)) c.analytics.track("click", { button: b });
    expect(await c.analytics.flush()).toEqual({ recorded: 0, dropped: 0 });
    // While a batch is kept, new ones wait for the retry (an hour away here), not sent one by one.
    for (const b of buttons(10, 20)) c.analytics.track("click", { button: b });
    expect(c.analytics.pending).toBe(20);
    expect(drops).toEqual([]);
    // The 21st: the kept batch, the oldest, goes (whole: its key is only good for all of it).
    c.analytics.track("click", { button: "b20" });
    expect(await c.analytics.flush()).toEqual({ recorded: 0, dropped: 10 });
    expect(drops.map((d) => [d.reason, d.events.map((e) => e.properties?.button)])).toEqual([
      ["buffer_full", buttons(0, 10)],
    ]);
    expect(c.analytics.pending).toBe(11);
    const kept = net.keys.at(-1);
    net.down = false;
    expect(await c.analytics.flush()).toEqual({ recorded: 11, dropped: 0 });
    expect(net.delivered.map((d) => d.buttons)).toEqual([buttons(10, 20), ["b20"]]);
    expect(net.delivered[0].key).toBe(kept);
    expect(net.delivered.map((d) => d.key)).not.toContain(net.keys[0]);
    expect(drops).toHaveLength(1);
    expect(c.analytics.pending).toBe(0);
    expect(await stored(a.token)).toBe(11);
    await c.close();
  });

  it("close() tries the kept events once more, then drops them as error and resolves", async () => {
    const a = await appWithClick();
    const net = network();
    net.down = true;
    const drops: DropInfo[] = [];
    const c = createClient({
      baseUrl: t.url,
      token: a.token,
      fetch: net.fetch,
      retry: shortBudget,
      analytics: { flushIntervalMs: 3_600_000, onDrop: (d) => drops.push(d) },
    });
    for (const b of buttons(0, 15)) c.analytics.track("click", { button: b });
    expect(await c.analytics.flush()).toEqual({ recorded: 0, dropped: 0 });
    const attempts = net.keys.length;
    expect((await c.close()).analytics).toEqual({ recorded: 0, dropped: 15 });
    // One more attempt (the transport's retries included), under the same key.
    expect(net.keys.length).toBeGreaterThan(attempts);
    expect(new Set(net.keys)).toEqual(new Set([net.keys[0]]));
    expect(drops).toHaveLength(1);
    expect(drops[0].reason).toBe("error");
    expect(drops[0].events.map((e) => e.properties?.button)).toEqual(buttons(0, 15));
    expect(drops[0].error).toMatchObject({ status: 0, code: "unavailable" });
    expect(c.analytics.pending).toBe(0);
    expect(await stored(a.token)).toBe(0);
  });

  it("a kept batch later cut by a 400 sends its good events under a new key", async () => {
    const a = await appWithClick();
    const net = network();
    net.down = true;
    const drops: DropInfo[] = [];
    const c = createClient({
      baseUrl: t.url,
      token: a.token,
      fetch: net.fetch,
      retry: shortBudget,
      analytics: { flushIntervalMs: 3_600_000, onDrop: (d) => drops.push(d) },
    });
    for (const b of buttons(0, 5)) c.analytics.track("click", { button: b });
    c.analytics.track("never.registered");
    expect(await c.analytics.flush()).toEqual({ recorded: 0, dropped: 0 });
    const key = net.keys[0];
    net.down = false;
    expect(await c.analytics.flush()).toEqual({ recorded: 5, dropped: 1 });
    expect(drops.map((d) => [d.reason, d.events.map((e) => e.type)])).toEqual([["rejected", ["never.registered"]]]);
    // The kept batch under its key (refused), then its good events: other events, so another key.
    expect(net.delivered.map((d) => [d.key === key, d.status, d.buttons.length])).toEqual([
      [true, 400, 6],
      [false, 200, 5],
    ]);
    expect(await stored(a.token)).toBe(5);
    await c.close();
  });

  it("other failures (a 500) are still dropped as error at once, not kept", async () => {
    const a = await appWithClick();
    const drops: DropInfo[] = [];
    let calls = 0;
    const failing: typeof fetch = async (input, init) => {
      if (!urlOf(input).endsWith("/v1/analytics/events")) return fetch(input, init);
      calls++;
      return new Response(JSON.stringify({ error: { code: "internal", message: "boom" } }), {
        status: 500,
        headers: { "content-type": "application/json" },
      });
    };
    const c = createClient({
      baseUrl: t.url,
      token: a.token,
      fetch: failing,
      retry: shortBudget,
      analytics: { flushIntervalMs: 3_600_000, onDrop: (d) => drops.push(d) },
    });
    for (const b of buttons(0, 7)) c.analytics.track("click", { button: b });
    expect(await c.analytics.flush()).toEqual({ recorded: 0, dropped: 7 });
    expect(c.analytics.pending).toBe(0);
    expect(calls).toBe(1);
    expect(drops.map((d) => [d.reason, d.events.length])).toEqual([["error", 7]]);
    expect(drops[0].error).toMatchObject({ status: 500, code: "internal" });
    await c.close();
  });
});
