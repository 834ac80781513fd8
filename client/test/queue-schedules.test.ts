/**
 * Queue schedules in the client, against the real service: `schedule` sets (and replaces) one and answers
 * it with its next run, `schedules` lists them, `unschedule` deletes (false when there was none), a bad
 * cron is a `PlatformError` naming the field, and a schedule ticking every second puts its messages, which
 * `consume` takes.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { startServer, type TestApp, type TestServer } from "../../test/support/harness.ts";
import { createClient, PlatformError, type PlatformClient } from "../src/index.ts";

let t: TestServer;
let app: TestApp;
let client: PlatformClient;

beforeAll(async () => {
  t = await startServer();
  app = await t.createApp();
  client = createClient({ baseUrl: t.url, token: app.token });
});
afterAll(async () => {
  await client?.close();
  await t?.close();
});

it("sets, lists and deletes schedules; a bad cron names the field", async () => {
  const set = await client.queues.schedule("reports", "nightly", {
    cron: "30 2 * * *",
    timezone: "Europe/Berlin",
    payload: { kind: "nightly" },
    catchUp: "one",
  });
  expect(set).toMatchObject({ queue: "reports", name: "nightly", timezone: "Europe/Berlin", catchUp: "one" });
  expect(set.nextRunAt).toBeGreaterThan(Date.now());
  await client.queues.schedule("reports", "nightly", { cron: "0 3 * * *", payload: 2 });
  const listed = await client.queues.schedules("reports");
  expect(listed.map((s) => [s.name, s.cron, s.timezone])).toEqual([["nightly", "0 3 * * *", "UTC"]]);
  const bad = await client.queues.schedule("reports", "x", { cron: "nope", payload: 1 }).catch((e: unknown) => e);
  expect(bad).toBeInstanceOf(PlatformError);
  expect((bad as PlatformError).code).toBe("invalid_argument");
  expect((bad as PlatformError).message).toContain("cron");
  expect(await client.queues.unschedule("reports", "nightly")).toBe(true);
  expect(await client.queues.unschedule("reports", "nightly")).toBe(false);
  expect(await client.queues.schedules("reports")).toEqual([]);
});

it("a schedule ticking every second puts messages the client consumes", async () => {
  await client.queues.schedule("ticks", "s", { cron: "* * * * * *", payload: { tick: 1 }, endAt: Date.now() + 2500 });
  const first = await client.queues.consume<{ tick: number }>("ticks", { waitSeconds: 10 });
  expect(first?.payload).toEqual({ tick: 1 });
  await client.queues.ack(first!.receipt);
}, 30_000);
