/**
 * An app's queue schedules as the operator sees them: `AdminService.ListQueueSchedules` (all the app's
 * queues, or one) and the CLI's `queues schedules NAME [QUEUE]` as a real child process against the real
 * server, each schedule with its next run (docs/queues.md "Schedules").
 */
import { afterAll, beforeAll, expect, it, vi } from "vitest";
import { cliAgainst } from "../support/service-process.ts";
import { startServer, type TestServer } from "../support/harness.ts";

// The test spawns the CLI; on a busy machine a spawn takes seconds.
vi.setConfig({ testTimeout: 180_000 });

let t: TestServer;
const run = cliAgainst(() => t);

beforeAll(async () => {
  t = await startServer();
});
afterAll(() => t?.close());

it("lists an app's schedules over AdminService and in the CLI, all queues or one", async () => {
  const app = await t.createApp("cli-schedules");
  for (const [queue, name] of [
    ["reports", "nightly"],
    ["mail", "digest"],
  ]) {
    const res = await t.request("PUT", `/v1/queues/${queue}/schedules/${name}`, {
      token: app.token,
      body: { cron: "0 3 * * *", timezone: "Europe/Berlin", payload: { name } },
    });
    expect(res.status).toBe(200);
  }
  const all = await t.admin.listQueueSchedules({ appId: app.id });
  expect(all.schedules.map((s) => `${s.queue}/${s.name}`)).toEqual(["mail/digest", "reports/nightly"]);
  expect(all.schedules.every((s) => s.nextRunAt !== undefined && s.timezone === "Europe/Berlin")).toBe(true);
  const one = await t.admin.listQueueSchedules({ appId: app.id, queue: "reports" });
  expect(one.schedules.map((s) => s.name)).toEqual(["nightly"]);

  const out = await run(["queues", "schedules", "cli-schedules"]);
  expect(out.code, out.stderr).toBe(0);
  const shown = JSON.parse(out.stdout) as { schedules: { queue: string; name: string; nextRunAt: string }[] };
  expect(shown.schedules.map((s) => s.name)).toEqual(["digest", "nightly"]);
  expect(shown.schedules[0].nextRunAt).toBeTruthy();
  const filtered = await run(["queues", "schedules", "cli-schedules", "mail"]);
  expect((JSON.parse(filtered.stdout) as { schedules: unknown[] }).schedules.length).toBe(1);
  const unknown = await run(["queues", "schedules", "no-such-app"]);
  expect(unknown.code).toBe(1);
});
