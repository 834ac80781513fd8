/**
 * The app's queue schedules and a queue's rate limit on the queues screen, in real Chromium against the real
 * server, on both backends:
 * - the Schedules card lists each schedule (queue, name, cron, time zone, next run, last run, ticks put, missed,
 *   skipped) as AdminService ListQueueSchedules has it, runs shown in the schedule's own zone: a daily 09:00 in
 *   Europe/Berlin shows its next run at 09:00:00 Berlin time on the date the server computed, and a
 *   one-second schedule that ended shows its last run and "none (ended)";
 * - the policy panel sets `maxDeliveriesPerSecond` ("Rate limit"), which the app then reads through /v1, and a
 *   refused value shows the server's sentence.
 * axe-core finds no WCAG A/AA violation; screenshots go to test-artifacts/dashboard/schedules/.
 */
import { beforeAll, describe, expect, it, vi } from "vitest";
import { axeViolations, callAsApp, useDashboardBrowser } from "../support/dashboard-browser.ts";
import { useTestServer, type TestApp } from "../support/harness.ts";

const t = useTestServer();
const dashboard = useDashboardBrowser(t, "dashboard/schedules");
let app: TestApp;
const call = (method: string, pathname: string, body?: unknown) => callAsApp(t, app, method, pathname, body);

interface Listed {
  queue: string;
  name: string;
  nextRunAt: number | null;
  lastRunAt: number | null;
  fired: number;
}

let daily: Listed;
let ended: Listed;

beforeAll(async () => {
  app = await t.createApp("scheduled-app");
  await call("PUT", "/v1/queues/reports/schedules/daily-report", {
    cron: "0 9 * * *",
    timezone: "Europe/Berlin",
    payload: { report: "daily" },
  });
  // Ticks every second for about three seconds, then ends: a last run and no next one.
  await call("PUT", "/v1/queues/pings/schedules/heartbeat", {
    cron: "* * * * * *",
    payload: "ping",
    endAt: Date.now() + 3000,
  });
  // The ticker puts them; awaited through the listing, not slept.
  await vi.waitFor(
    async () => {
      const { schedules } = (await call("GET", "/v1/queues/pings/schedules")) as { schedules: Listed[] };
      expect(schedules[0].nextRunAt).toBeNull();
      expect(schedules[0].lastRunAt).not.toBeNull();
      ended = schedules[0];
    },
    { timeout: 30_000, interval: 250 },
  );
  daily = ((await call("GET", "/v1/queues/reports/schedules")) as { schedules: Listed[] }).schedules[0];
}, 60_000);

/** "30 Nov 2026" in `timeZone`, as the card writes a run's date. */
const dateIn = (ms: number, timeZone: string) =>
  new Date(ms).toLocaleDateString("en-GB", { timeZone, day: "numeric", month: "short", year: "numeric" });
const timeIn = (ms: number, timeZone: string) =>
  new Date(ms).toLocaleTimeString("en-GB", { timeZone, hour: "2-digit", minute: "2-digit", second: "2-digit" });

describe("the queues screen", () => {
  it("lists the app's schedules with their cron, zone, next and last run", async () => {
    const { context, page } = await dashboard.signIn();
    await page.goto(t.url + `/dashboard/#/apps/${app.id}/queues`);
    const card = page.getByTestId("queue-schedules");
    await card.getByRole("heading", { name: "Schedules" }).waitFor();

    const report = card.getByTestId("schedule-reports-daily-report");
    await report.waitFor();
    const cells = await report.locator("td").allTextContents();
    expect(cells.slice(0, 4)).toEqual(["reports", "daily-report", "0 9 * * *", "Europe/Berlin"]);
    // 09:00:00 in Berlin, on the day the server's next run falls there.
    expect(daily.nextRunAt).not.toBeNull();
    expect(timeIn(daily.nextRunAt!, "Europe/Berlin")).toBe("09:00:00");
    const next = cells[4];
    expect(next).toContain(dateIn(daily.nextRunAt!, "Europe/Berlin"));
    expect(next).toContain("09:00:00");
    expect(next).toMatch(/CES?T|GMT\+[12]/);
    expect(cells.slice(5)).toEqual(["—", "0", "0", "0"]);

    const heartbeat = card.getByTestId("schedule-pings-heartbeat");
    const hb = await heartbeat.locator("td").allTextContents();
    expect(hb.slice(0, 5)).toEqual(["pings", "heartbeat", "* * * * * *", "UTC", "none (ended)"]);
    expect(hb[5]).toContain(dateIn(ended.lastRunAt!, "UTC"));
    expect(hb[5]).toContain(timeIn(ended.lastRunAt!, "UTC"));
    expect(Number(hb[6])).toBe(ended.fired);
    expect(ended.fired).toBeGreaterThanOrEqual(2);

    expect(await axeViolations(page)).toEqual([]);
    await card.scrollIntoViewIfNeeded();
    await page.screenshot({ path: dashboard.shot("queue-schedules-1280.png"), fullPage: true });

    // A narrow screen stacks the rows; the values stay.
    await page.setViewportSize({ width: 390, height: 844 });
    await expect.poll(() => report.getByTestId("next-run").textContent()).toBe(next);
    await page.screenshot({ path: dashboard.shot("queue-schedules-390.png"), fullPage: true });
    await context.close();
  });

  it("sets a queue's rate limit in the policy panel; a refused one shows why", async () => {
    const { context, page } = await dashboard.signIn();
    await page.goto(t.url + `/dashboard/#/apps/${app.id}/queues`);
    await page.getByLabel("Policy of any queue").fill("reports");
    await page.getByRole("button", { name: "Show policy" }).click();
    const panel = page.getByTestId("policy-reports");
    const field = panel.getByLabel("Rate limit (deliveries a second)");
    await expect.poll(() => field.inputValue()).toBe("0");

    await field.fill("0.001");
    await panel.getByRole("button", { name: "Save policy" }).click();
    await panel.getByText("The rate limit must be 0 (no limit) or at least 0.01.").waitFor();
    expect((await call("GET", "/v1/queues/reports/policy")).maxDeliveriesPerSecond).toBe(0);

    await field.fill("2.5");
    await panel.getByRole("button", { name: "Save policy" }).click();
    await panel.getByText("Saved: the queue's consumers follow it from their next delivery.").waitFor();
    expect((await call("GET", "/v1/queues/reports/policy")).maxDeliveriesPerSecond).toBe(2.5);
    await page.screenshot({ path: dashboard.shot("queue-policy-rate-1280.png"), fullPage: true });
    await context.close();
  });
});
