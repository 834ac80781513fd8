/**
 * The analytics screen's extensions in a real Chromium against the real
 * server, on events logged through the API: what it computes (sum, unique
 * users), filter conditions checked against the declared kinds before they are
 * sent, two breakdowns, the server's "other" group, and the funnel view's
 * bars with their figures. Every assertion reads the text the page shows.
 * Screenshots go to test-artifacts/dashboard/analytics/.
 */
import { describe, expect, it } from "vitest";
import type { Page } from "playwright-core";
import { useDashboardBrowser } from "../support/dashboard-browser.ts";
import { useTestServer, type TestApp } from "../support/harness.ts";

const t = useTestServer();
const dashboard = useDashboardBrowser(t, "dashboard/analytics");
/** Waits (up to 15 s) for what the page shows, which changes on the page's own schedule. */
const eventually = <T>(read: () => Promise<T>) => expect.poll(read, { timeout: 15_000, interval: 100 });

const MIN = 60_000;
const HOUR = 60 * MIN;
const DAY = 24 * HOUR;

async function appWith(
  types: Record<string, Record<string, string>>,
  events: { type: string; distinctId?: string; at: number; properties?: Record<string, unknown> }[],
): Promise<TestApp> {
  const app = await t.createApp();
  for (const [name, properties] of Object.entries(types)) {
    const res = await t.request("POST", "/v1/analytics/types", { token: app.token, body: { name, properties } });
    expect(res.status).toBe(200);
  }
  const res = await t.request("POST", "/v1/analytics/events", { token: app.token, body: { events } });
  expect(res.status).toBe(200);
  return app;
}

/** The rows of a table as arrays of their cells' text. */
const rowsOf = (page: Page, testId: string) =>
  page
    .getByTestId(testId)
    .locator("tbody tr")
    .evaluateAll((trs) =>
      trs.map((tr) => Array.from(tr.querySelectorAll("td")).map((td) => td.textContent?.trim() ?? "")),
    );

describe("the analytics screen's measures, filters and breakdowns", () => {
  it("sums, counts unique users, filters by kind, breaks down by two properties and folds the rest into other", async () => {
    const at = Date.now() - 2 * DAY;
    const order = (distinctId: string, plan: string, country: string, amount: number) => ({
      type: "order",
      distinctId,
      at,
      properties: { plan, country, amount },
    });
    const app = await appWith(
      {
        order: { plan: "string", country: "string", amount: "number" },
        visit: { country: "string", device: "string" },
      },
      [
        order("u1", "pro", "de", 10),
        order("u1", "pro", "de", 12.5),
        order("u2", "free", "fr", 5),
        order("u3", "pro", "fr", 15),
        // Visits from 7 countries, 7 to 1 of them: the top 5 and 2 more folded into "other" (3 visits).
        ...["c1", "c2", "c3", "c4", "c5", "c6", "c7"].flatMap((country, i) =>
          Array.from({ length: 7 - i }, () => ({ type: "visit", at, properties: { country, device: "web" } })),
        ),
      ],
    );
    const { context, page } = await dashboard.signIn({ timezoneId: "UTC", locale: "en-US" });
    await page.goto(t.url + `/dashboard/#/apps/${app.id}/analytics`);
    await page.getByLabel("Time zone").fill("UTC");
    await page.getByLabel("Event type").selectOption("order");
    await page.getByLabel("Range").selectOption({ label: "Last 7 days" });
    const total = page.getByTestId("analytics-total");
    const summary = page.locator(".page-head p");
    await eventually(() => total.textContent()).toBe("4");

    // The sum of the one number property (the only one offered for sums).
    await page.getByLabel("Measure").selectOption({ label: "Sum" });
    await eventually(() => page.getByLabel(/^Of/).locator("option").allTextContents()).toEqual(["amount"]);
    await eventually(() => total.textContent()).toBe("42.5");
    expect(await summary.textContent()).toMatch(/^42\.5 sum of amount over 4 events/);

    // Unique users: three people placed the four orders.
    await page.getByLabel("Measure").selectOption({ label: "Unique (users or values)" });
    await eventually(() => total.textContent()).toBe("3");
    expect(await summary.textContent()).toMatch(/^3 unique users over 4 events/);

    // A filter: the operators follow the kind, and a value is checked against it before anything is sent.
    await page.getByRole("button", { name: "Add filter" }).click();
    await page.getByLabel("Filter 1 property").selectOption("amount");
    const ops = await page.getByLabel("Filter 1 operator").locator("option").allTextContents();
    expect(ops).toEqual(["is", "is not", "is one of", ">", "≥", "<", "≤", "is set / not set"]);
    await page.getByLabel("Filter 1 value").fill("ten");
    await eventually(() => page.getByRole("alert").textContent()).toBe(
      "Filter 1: amount is declared number: enter a number",
    );
    await page.getByLabel("Filter 1 operator").selectOption({ label: "≥" });
    await page.getByLabel("Filter 1 value").fill("12");
    // Orders of 12 and more: u1's 12.5 and u3's 15.
    await eventually(() => total.textContent()).toBe("2");
    await page.getByLabel("Filter 1 property").selectOption("plan");
    expect(await page.getByLabel("Filter 1 operator").locator("option").allTextContents()).toEqual([
      "is",
      "is not",
      "is one of",
      "contains",
      "is set / not set",
    ]);
    await page.getByLabel("Filter 1 operator").selectOption({ label: "is" });
    await page.getByLabel("Filter 1 value").fill("pro");
    await eventually(() => total.textContent()).toBe("2");
    await page.getByLabel("Measure").selectOption({ label: "Sum" });
    await eventually(() => total.textContent()).toBe("37.5");
    expect(await page.getByRole("alert").count()).toBe(0);
    await page.screenshot({ path: dashboard.shot("trends-filter-sum-1280.png"), fullPage: true });

    // Two breakdowns: the sum per plan and country.
    await page.getByRole("button", { name: "Remove filter 1" }).click();
    await eventually(() => total.textContent()).toBe("42.5");
    await page.getByLabel("Group by").selectOption("plan");
    await page.getByLabel("Then by").selectOption("country");
    await eventually(() => rowsOf(page, "group-totals")).toEqual([
      ["pro · de", "2", "22.5"],
      ["pro · fr", "1", "15"],
      ["free · fr", "1", "5"],
    ]);
    expect(await page.getByTestId("group-totals").locator("th").allTextContents()).toEqual([
      "plan · country",
      "Events",
      "Sum of amount",
    ]);
    await eventually(() => page.locator(".u-legend .u-series .u-label").allTextContents()).toEqual([
      "Time",
      "pro · de",
      "pro · fr",
      "free · fr",
    ]);
    await page.screenshot({ path: dashboard.shot("trends-two-breakdowns-1280.png"), fullPage: true });

    // The top 5 countries, the other 2 as one "other" group, said as such (counts of one breakdown are all
    // answered, so the CSV has every group, and summed here).
    await page.getByLabel("Event type").selectOption("visit");
    await page.getByLabel("Measure").selectOption({ label: "Events (count)" });
    await page.getByLabel("Group by").selectOption("country");
    await page.getByLabel("Groups shown").selectOption({ label: "Top 5 and other" });
    await eventually(() => rowsOf(page, "group-totals")).toEqual([
      ["c1", "7"],
      ["c2", "6"],
      ["c3", "5"],
      ["c4", "4"],
      ["c5", "3"],
      ["other (2 groups)", "3"],
    ]);
    expect(await total.textContent()).toBe("28");
    expect(await summary.textContent()).toContain("2 more groups shown as “other”");
    await eventually(() => page.locator(".u-legend .u-series .u-label").last().textContent()).toBe("other (2 groups)");
    expect(await rowsOf(page, "buckets")).toContainEqual([expect.any(String), "c7", "1"]);

    // Two breakdowns: the server folds the groups beyond the limit into its "other" buckets.
    await page.getByLabel("Then by").selectOption("device");
    await eventually(() => rowsOf(page, "group-totals")).toEqual([
      ["c1 · web", "7"],
      ["c2 · web", "6"],
      ["c3 · web", "5"],
      ["c4 · web", "4"],
      ["c5 · web", "3"],
      ["other (2 groups)", "3"],
    ]);
    expect(await rowsOf(page, "buckets")).toContainEqual([expect.any(String), "other (2 groups)", "3"]);
    expect(await summary.textContent()).toContain("2 more groups shown as “other”");
    await page.screenshot({ path: dashboard.shot("trends-other-group-1280.png"), fullPage: true });
    await context.close();

    // On a phone, dark: the sum of amount by plan, the form and the totals fit the width.
    const phone = await dashboard.signIn({
      timezoneId: "UTC",
      locale: "en-US",
      viewport: { width: 390, height: 844 },
      colorScheme: "dark",
    });
    await phone.page.goto(t.url + `/dashboard/#/apps/${app.id}/analytics`);
    await phone.page.getByLabel("Time zone").fill("UTC");
    await phone.page.getByLabel("Event type").selectOption("order");
    await phone.page.getByLabel("Measure").selectOption({ label: "Average" });
    await phone.page.getByLabel("Group by").selectOption("plan");
    // The average order per plan: pro (10 + 12.5 + 15) / 3, free 5; over all four orders 10.63.
    await eventually(() => rowsOf(phone.page, "group-totals")).toEqual([
      ["pro", "3", "12.5"],
      ["free", "1", "5"],
    ]);
    expect(await phone.page.getByTestId("analytics-total").textContent()).toBe("10.63");
    const overflow = await phone.page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    expect(overflow).toBeLessThanOrEqual(0);
    await phone.page.screenshot({ path: dashboard.shot("trends-average-390-dark.png"), fullPage: true });
    await phone.context.close();
  });
});

describe("the funnel view", () => {
  it("draws each step's users with conversions from the first and previous step and the median time", async () => {
    const start = Date.now() - 3 * DAY;
    const events: { type: string; distinctId: string; at: number; properties?: Record<string, unknown> }[] = [];
    for (let i = 0; i < 10; i++) {
      const user = `user-${i}`;
      const at = start + i * MIN;
      events.push({ type: "signup", distinctId: user, at, properties: { plan: i < 5 ? "pro" : "free" } });
      // Users 0 to 5 create a project an hour later; users 0 to 2 then invite someone 30 minutes after that.
      if (i < 6) events.push({ type: "project", distinctId: user, at: at + HOUR });
      if (i < 3) events.push({ type: "invite", distinctId: user, at: at + HOUR + 30 * MIN });
    }
    const app = await appWith({ signup: { plan: "string" }, project: {}, invite: {} }, events);
    const { context, page } = await dashboard.signIn({ timezoneId: "UTC", locale: "en-US" });
    await page.goto(t.url + `/dashboard/#/apps/${app.id}/analytics`);
    await page.getByRole("button", { name: "Funnel" }).click();
    await page.getByLabel("Step 1 event type").selectOption("signup");
    await page.getByLabel("Step 2 event type").selectOption("project");
    await page.getByRole("button", { name: "Add step" }).click();
    await page.getByLabel("Step 3 event type").selectOption("invite");
    expect(await page.getByLabel("Conversion window").inputValue()).toBe(String(7 * 86_400));

    const funnel = page.getByTestId("funnel");
    const read = async () => ({
      users: await funnel.getByTestId("funnel-users").allTextContents(),
      fromFirst: await funnel.getByTestId("funnel-from-first").allTextContents(),
      fromPrevious: await funnel.getByTestId("funnel-from-previous").allTextContents(),
      median: await funnel.getByTestId("funnel-median").allTextContents(),
    });
    await eventually(read).toEqual({
      users: ["10", "6", "3"],
      fromFirst: ["60%", "30%"],
      fromPrevious: ["60%", "50%"],
      median: ["1 h", "30 min"],
    });
    // The bars are as long as each step's share of the first.
    const widths = await funnel
      .locator(".funnel-bar")
      .evaluateAll((bars) => bars.map((b) => Math.round(b.getBoundingClientRect().width)));
    const area = await funnel
      .locator(".funnel-bar-area")
      .first()
      .evaluate((a) => a.getBoundingClientRect().width);
    expect(widths[0]).toBe(Math.round(area));
    expect(Math.abs(widths[1] - 0.6 * area)).toBeLessThanOrEqual(1);
    expect(Math.abs(widths[2] - 0.3 * area)).toBeLessThanOrEqual(1);
    await page.screenshot({ path: dashboard.shot("funnel-1280.png"), fullPage: true });

    // A breakdown by the first step's plan: a row per group, and the bars of one group on demand.
    await page.getByLabel("Breakdown").selectOption("plan");
    await eventually(() => rowsOf(page, "funnel-groups")).toEqual([
      // Ranked by users at the first step (a tie in the groups' order).
      ["free", "5", "1 (20%)", "0 (0%)"],
      ["pro", "5", "5 (100%)", "3 (60%)"],
    ]);
    await page.getByLabel("Bars for").selectOption({ label: "plan: free" });
    await eventually(read).toEqual({
      users: ["5", "1", "0"],
      fromFirst: ["20%", "0%"],
      fromPrevious: ["20%", "0%"],
      median: ["1 h", "—"],
    });
    await page.screenshot({ path: dashboard.shot("funnel-breakdown-1280.png"), fullPage: true });
    await page.getByLabel("Bars for").selectOption({ label: "all users" });

    // A step's condition: only pro signups start.
    await page.getByRole("button", { name: "Add a condition to step 1" }).click();
    await page.getByLabel("Step 1 condition 1 property").selectOption("plan");
    await page.getByLabel("Step 1 condition 1 value").fill("pro");
    await eventually(read).toEqual({
      users: ["5", "5", "3"],
      fromFirst: ["100%", "60%"],
      fromPrevious: ["100%", "60%"],
      median: ["1 h", "30 min"],
    });
    // At most 8 steps, at least 2.
    for (let i = 3; i < 8; i++) await page.getByRole("button", { name: "Add step" }).click();
    expect(await page.getByRole("button", { name: "Add step" }).isDisabled()).toBe(true);
    for (let i = 8; i > 2; i--) await page.getByRole("button", { name: `Remove step ${i}` }).click();
    expect(await page.getByRole("button", { name: "Remove step 2" }).isDisabled()).toBe(true);
    await eventually(() => funnel.getByTestId("funnel-users").allTextContents()).toEqual(["5", "5"]);
    await context.close();

    // On a phone, dark: the bars and their figures still fit.
    const phone = await dashboard.signIn({
      timezoneId: "UTC",
      locale: "en-US",
      viewport: { width: 390, height: 844 },
      colorScheme: "dark",
    });
    await phone.page.goto(t.url + `/dashboard/#/apps/${app.id}/analytics`);
    await phone.page.getByRole("button", { name: "Funnel" }).click();
    await phone.page.getByLabel("Step 1 event type").selectOption("signup");
    await phone.page.getByLabel("Step 2 event type").selectOption("project");
    await eventually(() => phone.page.getByTestId("funnel-users").allTextContents()).toEqual(["10", "6"]);
    const overflow = await phone.page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    expect(overflow).toBeLessThanOrEqual(0);
    await phone.page.screenshot({ path: dashboard.shot("funnel-390-dark.png"), fullPage: true });
    await phone.context.close();
  });
});

describe("the analytics screen's address", () => {
  it("keeps the chosen query in the link: a reload or another browser shows the same chart, and a bad link the defaults", async () => {
    const at = Date.now() - 2 * DAY;
    const order = (distinctId: string, plan: string, amount: number) => ({
      type: "order",
      distinctId,
      at,
      properties: { plan, amount },
    });
    const app = await appWith({ visit: {}, order: { plan: "string", amount: "number" } }, [
      order("u1", "pro", 10),
      order("u2", "pro", 20),
      order("u3", "free", 5),
      { type: "visit", distinctId: "u1", at },
      { type: "order", distinctId: "u1", at: at + HOUR, properties: { plan: "pro", amount: 1 } },
    ]);
    const base = t.url + `/dashboard/#/apps/${app.id}/analytics`;
    const { context, page } = await dashboard.signIn({ timezoneId: "UTC", locale: "en-US" });
    await page.goto(base);
    // Untouched, the address is the plain one.
    expect(new URL(page.url()).hash).toBe(`#/apps/${app.id}/analytics`);
    await page.getByLabel("Time zone").fill("UTC");
    await page.getByLabel("Event type").selectOption("order");
    await page.getByLabel("Range").selectOption({ label: "Last 30 days" });
    await page.getByLabel("Measure").selectOption({ label: "Sum" });
    await page.getByRole("button", { name: "Add filter" }).click();
    await page.getByLabel("Filter 1 property").selectOption("plan");
    await page.getByLabel("Filter 1 operator").selectOption({ label: "is" });
    await page.getByLabel("Filter 1 value").fill("pro");
    const total = page.getByTestId("analytics-total");
    await eventually(() => total.textContent()).toBe("31");
    const link = page.url();
    expect(new URL(link).hash).toMatch(/^#\/apps\/[^?]+\/analytics\?/);

    // Another browser opening the link: the same controls and the same figure.
    const other = await dashboard.signIn({ timezoneId: "UTC", locale: "en-US" });
    await other.page.goto(link);
    await eventually(() => other.page.getByTestId("analytics-total").textContent()).toBe("31");
    expect(await other.page.getByLabel("Event type").inputValue()).toBe("order");
    expect(await other.page.getByLabel("Measure").inputValue()).toBe("sum");
    expect(await other.page.getByLabel("Range").inputValue()).toBe(String(24 * 30));
    expect(await other.page.getByLabel("Filter 1 value").inputValue()).toBe("pro");
    await other.page.screenshot({ path: dashboard.shot("trends-from-link-1280.png"), fullPage: true });

    // The funnel's choices too, beside the trends' (each view keeps its own).
    await other.page.getByRole("button", { name: "Funnel" }).click();
    await other.page.getByLabel("Step 1 event type").selectOption("visit");
    await other.page.getByLabel("Step 2 event type").selectOption("order");
    await other.page.getByLabel("Conversion window").selectOption(String(86_400));
    await eventually(() => other.page.getByTestId("funnel-users").allTextContents()).toEqual(["1", "1"]);
    await other.page.reload();
    await eventually(() => other.page.getByTestId("funnel-users").allTextContents()).toEqual(["1", "1"]);
    expect(await other.page.getByLabel("Conversion window").inputValue()).toBe(String(86_400));
    expect(await other.page.getByLabel("Step 1 event type").inputValue()).toBe("visit");
    await other.page.getByRole("button", { name: "Trends" }).click();
    await eventually(() => other.page.getByTestId("analytics-total").textContent()).toBe("31");
    await other.context.close();

    // Another tab of the app leaves the choices behind; Back returns to them (the choices replaced, not pushed).
    await page.getByRole("navigation", { name: "App sections" }).getByRole("link", { name: "Queues" }).click();
    expect(new URL(page.url()).hash).toBe(`#/apps/${app.id}/queues`);
    await page.goBack();
    await eventually(() => total.textContent()).toBe("31");

    // A link edited by hand: what does not parse reads as the default, and nothing breaks.
    await page.goto(`${base}?measure=median&range=5&where=%7Bnot-json&limit=7&type=order`);
    await eventually(() => total.textContent()).toBe("4");
    expect(await page.getByLabel("Measure").inputValue()).toBe("count");
    expect(await page.getByLabel("Range").inputValue()).toBe(String(24 * 7));
    expect(await page.getByRole("button", { name: "Remove filter 1" }).count()).toBe(0);
    await context.close();
  });
});
