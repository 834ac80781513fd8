/**
 * One app cannot slow another down (docs/api.md#rate-limits), over real sockets:
 * - when the process is saturated, the app asking for more than its share of the calls is refused at
 *   the call's head (429 `rate_limited`, before its body is parsed), while the other app's calls are all
 *   let in; before, a flood within the app's own limits was served whatever it cost the others;
 * - a call past its rate is refused before its body is parsed when the bucket cannot pay for a call like
 *   the app's last one (before, only an empty bucket refused early: a flood of 1000-event batches on a
 *   bucket refilling 5000 a second had every refused batch parsed first);
 * - a client that ignores `Retry-After` gets its next refusal only after a pause, so its retries cannot
 *   become a flood of refusals (before, each was answered at once).
 *
 * The server counts as saturated above 1% load here (FAIR_SHARE_UTILIZATION), so that the flood of this
 * test saturates it on any machine; nothing is asserted about how fast anything is, only who is refused
 * and that a refusal is not answered sooner than its pause.
 */
import { describe, expect, it } from "vitest";
import { useTestServer, type TestApp } from "../support/harness.ts";

const t = useTestServer({ env: { FAIR_SHARE_UTILIZATION: "1", FAIR_SHARE_MIN_RATE: "50" } });

async function appWith(limits: Record<string, number>): Promise<TestApp> {
  const app = await t.createApp();
  if (Object.keys(limits).length > 0) await t.admin.updateApp({ appId: app.id, limits });
  return app;
}

type ErrorBody = { error: { code: string; message: string } };

describe("a saturated process", () => {
  it("refuses the app asking for more than its share at the head, and lets the other app's calls in", async () => {
    const flooder = await appWith({});
    const steady = await appWith({});
    const stop = new AbortController();
    const flood = { answers: 0, shed: 0, other: new Map<number, number>() };
    // The flood's bodies are not JSON: a call let in is a 400, so a 429 shows the refusal came before the parse.
    const loop = async () => {
      while (!stop.signal.aborted) {
        const res = await t
          .request("POST", "/v1/queues/flood", { token: flooder.token, body: "{", signal: stop.signal })
          .catch(() => undefined);
        if (!res) return;
        flood.answers++;
        if (res.status === 429) {
          const { error } = res.body as ErrorBody;
          expect(error.code).toBe("rate_limited");
          expect(error.message).toContain("share");
          expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
          flood.shed++;
        } else flood.other.set(res.status, (flood.other.get(res.status) ?? 0) + 1);
      }
    };
    const loops = Array.from({ length: 100 }, loop);
    try {
      const steadyStatuses: number[] = [];
      let shedSeen = 0;
      // The steady app keeps calling, one call at a time, until the flood was refused a while.
      while (shedSeen === 0 || steadyStatuses.length < shedSeen + 40) {
        const put = await t.request("POST", "/v1/queues/steady", { token: steady.token, body: { payload: 1 } });
        const list = await t.request("GET", "/v1/queues", { token: steady.token });
        steadyStatuses.push(put.status, list.status);
        if (shedSeen === 0 && flood.shed > 0) shedSeen = steadyStatuses.length;
        // A flood never refused (as before fair shares) ends the test here.
        if (shedSeen === 0 && flood.answers >= 5000) break;
      }
      expect(flood.shed).toBeGreaterThan(0);
      expect(steadyStatuses.filter((s) => s !== 200)).toEqual([]);
      // What the flood got in was parsed and refused for its body.
      expect([...flood.other.keys()]).toEqual([400]);
    } finally {
      stop.abort();
      await Promise.all(loops);
    }
    const metric = await t.server.deps.metrics.registry.getSingleMetricAsString("rate_limited_total");
    expect(metric).toMatch(/rate_limited_total\{limit="fairShare"\} [1-9]/);
  }, 120_000);
});

describe("a refusal", () => {
  it("comes before the body is parsed when the bucket cannot pay for a call like the app's last", async () => {
    const app = await appWith({ eventsPerSecond: 1, eventsBurst: 100 });
    const token = app.token;
    expect(
      (await t.request("POST", "/v1/analytics/types", { token, body: { name: "click", properties: {} } })).status,
    ).toBe(200);
    const batch = { events: Array.from({ length: 60 }, () => ({ type: "click" })) };
    expect((await t.request("POST", "/v1/analytics/events", { token, body: batch })).status).toBe(200);
    // About 40 tokens left: not enough for another 60, so the next call is refused unread (a 429, not a 400).
    const unread = await t.request("POST", "/v1/analytics/events", { token, body: "{" });
    expect(unread.status).toBe(429);
    expect((unread.body as ErrorBody).error.code).toBe("rate_limited");
  });

  it("to a client that ignored the last Retry-After is answered only after a pause", async () => {
    // A bucket that takes a minute to pay for the call below: every call here is refused, however slow the machine.
    const app = await appWith({ eventsPerSecond: 1, eventsBurst: 100 });
    const token = app.token;
    expect(
      (await t.request("POST", "/v1/analytics/types", { token, body: { name: "view", properties: {} } })).status,
    ).toBe(200);
    const events = (n: number) => ({ events: Array.from({ length: n }, () => ({ type: "view" })) });
    expect((await t.request("POST", "/v1/analytics/events", { token, body: events(100) })).status).toBe(200);
    const first = await t.request("POST", "/v1/analytics/events", { token, body: events(60) });
    expect(first.status).toBe(429);
    // Called again at once, ignoring Retry-After: refused again, and answered only after a pause.
    const started = performance.now();
    const again = await t.request("POST", "/v1/analytics/events", { token, body: events(60) });
    const waited = performance.now() - started;
    expect(again.status).toBe(429);
    expect((again.body as ErrorBody).error.code).toBe("rate_limited");
    expect(waited).toBeGreaterThanOrEqual(500);
  });
});
