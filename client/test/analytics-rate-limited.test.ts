/**
 * The tracker and the app's rate limit (429 `rate_limited`, docs/api.md#rate-limits):
 * a batch refused because the app is past its events a second is kept and
 * sent again by the retry timer, not dropped as a spent daily cap (it was,
 * before: every 429 was `daily_cap`).
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { startServer, type TestServer } from "../../test/support/harness.ts";
import { createClient, type DropInfo } from "../src/index.ts";
import { appWithClicks, storedClicks } from "./support.ts";

let t: TestServer;

beforeAll(async () => {
  t = await startServer();
});
afterAll(() => t?.close());

it("keeps a batch refused for the rate limit and stores it once the bucket refills", async () => {
  const a = await appWithClicks(t);
  // 10 events fit at once, then 5 a second.
  await t.admin.updateApp({ appId: a.id, limits: { eventsPerSecond: 5, eventsBurst: 10 } });
  const drops: DropInfo[] = [];
  let refused = 0;
  const c = createClient({
    baseUrl: t.url,
    token: a.token,
    fetch: async (input, init) => {
      const res = await fetch(input, init);
      if (res.status === 429) refused++;
      return res;
    },
    analytics: { batchSize: 10, flushIntervalMs: 200, onDrop: (d) => drops.push(d) },
  });
  for (let i = 0; i < 20; i++) c.analytics.track("click", { button: `b${i}` });
  await c.analytics.flush();
  // The second batch of 10 was refused at first, and waited for the bucket.
  await expect.poll(() => storedClicks(t, a.token), { timeout: 10_000 }).toBe(20);
  expect(refused).toBeGreaterThan(0);
  expect(drops).toEqual([]);
  expect(c.analytics.pending).toBe(0);
  await c.close();
});
