/**
 * The dashboard keeps what the operator typed and shows times where the
 * operator is, in a real Chromium against the real server:
 *
 * - a 4-line PEM key set through "Set value" is read back by the app
 *   (`GET /v1/secrets/NAME`) byte for byte (a password input dropped its line
 *   breaks);
 * - "Last 24 hours" by the hour works in a browser outside UTC (the API
 *   refuses a zone with hourly buckets, and the screen sent the browser's);
 * - bucket times are shown in the zone chosen on the screen, not the
 *   browser's, and the usage chart labels UTC days as UTC days west of UTC.
 */
import fs from "node:fs";
import { describe, expect, it } from "vitest";
import type { BrowserContext, Page } from "playwright-core";
import { useDashboardBrowser } from "../support/dashboard-browser.ts";
import { useTestServer, type TestApp } from "../support/harness.ts";

const t = useTestServer();
const dashboard = useDashboardBrowser(t);
/** Waits (up to 15 s) for what the page shows, which changes on the page's own schedule. */
const eventually = <T>(read: () => Promise<T>) => expect.poll(read, { timeout: 15_000, interval: 100 });

/** A 4-line PEM block (test data, not a real key). */
const PEM_KEY = [
  "-----BEGIN PRIVATE KEY-----",
  "MC4CAQAwBQYDK2VwBCIEIJ+DYvh6SEqVTm50DFtMDoQikTmiCqirVv9mWG9qfSnF",
  "MC4CAQAwBQYDK2VwBCIEIOk3HfZ4pCVjsbmhGbbVyqO4WcKzu5wpcHKKvKo7UtZA",
  "-----END PRIVATE KEY-----",
].join("\n");

const signedIn = (options: { timezoneId?: string } = {}): Promise<{ context: BrowserContext; page: Page }> =>
  dashboard.signIn(options);

async function appWithEvents(times: number[]): Promise<TestApp> {
  const app = await t.createApp();
  const rest = (pathname: string, body: unknown) =>
    t.request("POST", pathname, { token: app.token, body }).then((res) => expect(res.status).toBe(200));
  await rest("/v1/analytics/types", { name: "signup", properties: { plan: "string" } });
  await rest("/v1/analytics/events", {
    events: times.map((at, i) => ({ type: "signup", at, properties: { plan: i % 2 ? "free" : "pro" } })),
  });
  return app;
}

describe("secret values in the dashboard", () => {
  it("keeps a 4-line PEM key set through 'Set value' byte for byte", async () => {
    const app = await t.createApp();
    await t.admin.declareSecrets({ appId: app.id, names: ["TLS_KEY"] });
    const { context, page } = await signedIn();
    await page.goto(t.url + `/dashboard/#/apps/${app.id}/secrets`);
    await page.getByRole("button", { name: "Set value of TLS_KEY" }).click();
    const field = page.getByRole("textbox", { name: "Value of TLS_KEY" });
    await field.fill(PEM_KEY);
    // Masked while typing: the characters are not on screen.
    expect(await field.evaluate((el) => getComputedStyle(el).getPropertyValue("-webkit-text-security"))).toBe("disc");
    await page.screenshot({ path: dashboard.shot("secrets-set-value-1280.png") });
    await page.getByRole("button", { name: "Set value", exact: true }).click();
    await eventually(() => page.getByTestId("secret-TLS_KEY").textContent()).toContain("set1");
    const read = await t.request("GET", "/v1/secrets/TLS_KEY", { token: app.token });
    expect(read.status).toBe(200);
    expect(read.body.value).toBe(PEM_KEY);
    expect(await page.content()).not.toContain(PEM_KEY.split("\n")[1]);
    await context.close();
  });
});

describe("analytics and usage outside UTC", () => {
  it("shows hourly buckets in a Europe/Berlin browser, labelled in Berlin time", async () => {
    const now = Date.now();
    const app = await appWithEvents([now - 2 * 3600_000, now - 2 * 3600_000 - 60_000, now - 5 * 3600_000]);
    const { context, page } = await signedIn({ timezoneId: "Europe/Berlin" });
    await page.goto(t.url + `/dashboard/#/apps/${app.id}/analytics`);
    expect(await page.getByLabel("Time zone").inputValue()).toBe("Europe/Berlin");
    await page.getByLabel("Range").selectOption({ label: "Last 24 hours" });
    await page.getByLabel("Interval").selectOption({ label: "Hour" });
    await eventually(() => page.getByTestId("analytics-total").textContent()).toBe("3");
    expect(await page.getByRole("alert").count()).toBe(0);
    const hour = Math.floor((now - 5 * 3600_000) / 3600_000) * 3600_000;
    const berlin = new Intl.DateTimeFormat("en-US", {
      timeZone: "Europe/Berlin",
      dateStyle: "medium",
      timeStyle: "short",
    });
    const table = page.getByTestId("buckets");
    expect(await table.locator("th").first().textContent()).toBe("Bucket start (Europe/Berlin)");
    expect(await table.locator("tbody tr").first().locator("td").first().textContent()).toBe(
      berlin.format(new Date(hour)),
    );
    await page.screenshot({ path: dashboard.shot("analytics-berlin-hourly-1280.png"), fullPage: true });
    await context.close();
  });

  it("labels buckets in the chosen zone, not the browser's, and UTC days as UTC days (America/Los_Angeles)", async () => {
    const now = Date.now();
    const app = await appWithEvents([now - 3 * 86_400_000, now - 3600_000]);
    const { context, page } = await signedIn({ timezoneId: "America/Los_Angeles" });
    await page.goto(t.url + `/dashboard/#/apps/${app.id}/analytics`);
    await page.getByLabel("Range").selectOption({ label: "Last 7 days" });
    await page.getByLabel("Interval").selectOption({ label: "Day" });
    await page.getByLabel("Time zone").fill("Asia/Tokyo");
    const table = page.getByTestId("buckets");
    await eventually(() => table.locator("th").first().textContent()).toBe("Bucket start (Asia/Tokyo)");
    await eventually(() => page.getByTestId("analytics-total").textContent()).toBe("2");
    // Day buckets start at midnight in Tokyo, and say so (in the browser's zone they would read 7:00 or 8:00 AM).
    const cells = await table.locator("tbody tr td:first-child").allTextContents();
    expect(cells.length).toBe(2);
    for (const cell of cells) expect(cell).toMatch(/, 12:00\sAM$/);

    // A zone this browser does not know is named, and the last answer stays.
    await page.getByLabel("Time zone").fill("Mars/Olympus");
    await page.getByText('"Mars/Olympus" is not a time zone this browser knows').waitFor();
    expect(await page.getByTestId("analytics-total").textContent()).toBe("2");

    // The usage chart's days are UTC days: hovering the last point names today's UTC date.
    await page.getByRole("navigation", { name: "App sections" }).getByRole("link", { name: "Usage" }).click();
    // The usage chart's own plot: the analytics chart's may still be on the page for a moment.
    const usageChart = page.getByRole("img", { name: "Events and mail per day, last 30 days" });
    const over = usageChart.locator(".u-over");
    await over.waitFor();
    const box = (await over.boundingBox())!;
    await page.mouse.move(box.x + box.width - 2, box.y + box.height / 2);
    // The legend names the bucket as a UTC day (in the browser's language; the tests' Chromium speaks en-US).
    const today = new Intl.DateTimeFormat("en-US", {
      timeZone: "UTC",
      weekday: "short",
      month: "short",
      day: "numeric",
      year: "numeric",
    }).format(new Date());
    await eventually(() => usageChart.locator(".u-legend .u-series").first().textContent()).toContain(today);
    await context.close();
  });

  it("draws the top 10 groups and 'other', totals each group, and exports the buckets as CSV", async () => {
    const app = await t.createApp();
    await t.request("POST", "/v1/analytics/types", {
      token: app.token,
      body: { name: "visit", properties: { page: "string" } },
    });
    const at = Date.now() - 3600_000;
    // 30 pages: page-00 visited 30 times, page-01 29 times, ... page-29 once.
    const events = Array.from({ length: 30 }, (_, p) =>
      Array.from({ length: 30 - p }, () => ({
        type: "visit",
        at,
        properties: { page: `page-${String(p).padStart(2, "0")}` },
      })),
    ).flat();
    expect((await t.request("POST", "/v1/analytics/events", { token: app.token, body: { events } })).status).toBe(200);
    const { context, page } = await signedIn({ timezoneId: "UTC" });
    await page.goto(t.url + `/dashboard/#/apps/${app.id}/analytics`);
    await page.getByLabel("Group by").selectOption("page");
    const totals = page.getByTestId("group-totals");
    await eventually(() => totals.locator("tbody tr").count()).toBe(11);
    const rows = await totals.locator("tbody tr").allTextContents();
    expect(rows[0]).toBe("page-0030");
    expect(rows[9]).toBe("page-0921");
    // The 20 smaller groups summed: 20 + 19 + ... + 1.
    expect(rows[10]).toBe("other (20 groups)210");
    await eventually(() => page.locator(".u-legend .u-series").count()).toBe(12); // time + 10 groups + other
    const [download] = await Promise.all([
      page.waitForEvent("download"),
      page.getByRole("button", { name: "Export CSV" }).click(),
    ]);
    const csv = fs
      .readFileSync(await download.path(), "utf8")
      .trim()
      .split("\r\n");
    expect(csv[0]).toBe("bucket_start_utc,bucket_start_UTC,group,count");
    expect(csv).toHaveLength(31);
    expect(csv.slice(1).reduce((n, line) => n + Number(line.split(",").at(-1)), 0)).toBe(465);
    expect(download.suggestedFilename()).toBe(`${app.name}-visit.csv`);
    await context.close();
  });
});
