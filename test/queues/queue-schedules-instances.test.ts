/**
 * A schedule's ticks are put exactly once with two instances on one database (docs/queues.md
 * "Schedules"): both tickers race for the due schedules every 200 ms; the claim (`FOR UPDATE SKIP LOCKED`)
 * and the put commit together, so every tick between the first run and `endAt` gives one message: none
 * twice, none missing, whichever instance put it.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { startInstances, type Instances, type TestApp, type TestServer } from "../support/harness.ts";
import { metricValue } from "../support/server-state.ts";
import { drain } from "../support/drain-queue.ts";

let instances: Instances;
let a: TestServer;
let b: TestServer;
let app: TestApp;

beforeAll(async () => {
  instances = await startInstances(2);
  [a, b] = instances.servers as [TestServer, TestServer];
  app = await a.createApp();
});
afterAll(() => instances?.close());

it("two instances put every tick of a 1-second schedule exactly once", async () => {
  // Room for a slow PUT on a loaded machine: at least 5 ticks remain between its answer and endAt.
  const endAt = Date.now() + 8000;
  const put = await b.request("PUT", "/v1/queues/shared/schedules/every-second", {
    token: app.token,
    body: { cron: "* * * * * *", payload: "tick", endAt },
  });
  expect(put.status, JSON.stringify(put.body)).toBe(200);
  const expected = Math.floor(endAt / 1000) - (put.body.nextRunAt as number) / 1000 + 1;
  expect(expected).toBeGreaterThanOrEqual(5);

  const got = await drain(a, app, "shared", expected, 60_000);
  // The schedule ends (no next run) once its last tick is put; then nothing more comes.
  for (;;) {
    const res = await a.request("GET", "/v1/queues/shared/schedules", { token: app.token });
    const s = res.body.schedules[0] as { nextRunAt: number | null; fired: number; missed: number; skippedFull: number };
    if (s.nextRunAt === null) {
      expect(s).toMatchObject({ fired: expected, missed: 0, skippedFull: 0 });
      break;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  got.push(...(await drain(a, app, "shared", 1, 1500)));
  expect(got.length).toBe(expected);
  expect(new Set(got.map((m) => m.id)).size).toBe(expected);
  const ticks = (s: TestServer) => metricValue(s, "queue_schedule_ticks_total");
  expect(ticks(a) + ticks(b)).toBe(expected);
}, 90_000);
