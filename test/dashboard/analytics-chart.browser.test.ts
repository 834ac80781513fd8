/**
 * The analytics chart draws what happened, read from the drawn chart in a
 * real Chromium against the real server: the x-axis spans exactly the chosen
 * range, its ticks are calendar boundaries no finer than the buckets (days
 * for a daily chart) in the chosen zone, y starts at 0, buckets without
 * events are drawn as 0 (the API answers only non-empty ones), and two groups
 * with the same counts stay two visible lines. One bucket, many buckets with
 * gaps, hours, and zones east and west of UTC across a summer-time change.
 *
 * The chart writes its scale and ticks onto its element from uPlot's own draw
 * (`data-x-min`, `data-x-max`, `data-y-min`, `data-x-splits`, `data-x-ticks`);
 * the counts are read from the legend while the pointer is over a bucket.
 */
import { describe, expect, it } from "vitest";
import type { Locator, Page } from "playwright-core";
import { useDashboardBrowser } from "../support/dashboard-browser.ts";
import { useTestServer, type TestApp } from "../support/harness.ts";

const t = useTestServer();
const dashboard = useDashboardBrowser(t);
/** Waits (up to 15 s) for what the page shows, which changes on the page's own schedule. */
const eventually = <T>(read: () => Promise<T>) => expect.poll(read, { timeout: 15_000, interval: 100 });

const DAY = 86_400;
const HOUR = 3600;

async function appWithEvents(events: { at: number; plan: string }[]): Promise<TestApp> {
  const app = await t.createApp();
  const rest = (pathname: string, body: unknown) =>
    t.request("POST", pathname, { token: app.token, body }).then((res) => expect(res.status).toBe(200));
  await rest("/v1/analytics/types", { name: "signup", properties: { plan: "string" } });
  await rest("/v1/analytics/events", {
    events: events.map((e) => ({ type: "signup", at: e.at, properties: { plan: e.plan } })),
  });
  return app;
}

interface Axis {
  min: number;
  max: number;
  yMin: number;
  splits: number[];
  labels: string[];
}

/** The drawn axis of the analytics chart, once it shows `total` events. */
async function axisOf(page: Page, total: number): Promise<{ chart: Locator; axis: Axis }> {
  await eventually(() => page.getByTestId("analytics-total").textContent()).toBe(String(total));
  const chart = page.getByRole("img", { name: "Events per bucket" });
  await chart.locator(".u-over").waitFor();
  await eventually(() => chart.getAttribute("data-x-ticks")).not.toBeNull();
  const read = async (name: string) => (await chart.getAttribute(name))!;
  return {
    chart,
    axis: {
      min: Number(await read("data-x-min")),
      max: Number(await read("data-x-max")),
      yMin: Number(await read("data-y-min")),
      splits: JSON.parse(await read("data-x-splits")) as number[],
      // Labels as read: ICU puts a narrow no-break space before AM/PM.
      labels: (JSON.parse(await read("data-x-ticks")) as string[]).map((l) => l.replace(/\s/g, " ")),
    },
  };
}

/** The legend's values (one per series; the time's is left out) with the pointer over time `at` (seconds). */
async function valuesAt(page: Page, chart: Locator, axis: Axis, at: number): Promise<string[]> {
  const box = (await chart.locator(".u-over").boundingBox())!;
  await page.mouse.move(box.x + ((at - axis.min) / (axis.max - axis.min)) * box.width, box.y + box.height / 2);
  return (await chart.locator(".u-legend .u-series .u-value").allTextContents()).slice(1);
}

/** Midnights of `zone` in `[min, max]` (seconds), found hour by hour. */
function midnights(min: number, max: number, zone: string): number[] {
  const f = new Intl.DateTimeFormat("en-US", { timeZone: zone, hourCycle: "h23", hour: "2-digit", minute: "2-digit" });
  const out: number[] = [];
  for (let s = Math.ceil(min / 1800) * 1800; s <= max; s += 1800) if (f.format(s * 1000) === "00:00") out.push(s);
  return out;
}

const dayLabel = (s: number, zone: string) =>
  new Intl.DateTimeFormat("en-US", { timeZone: zone, month: "short", day: "numeric" }).format(s * 1000);

describe("the analytics chart", () => {
  it("one bucket in 'Last 7 days': the axis spans the 7 days, ticks are the days, y from 0, the other days 0", async () => {
    const now = Date.now();
    const app = await appWithEvents([{ at: now - 2 * DAY * 1000, plan: "pro" }]);
    const { context, page } = await dashboard.signIn({ timezoneId: "UTC", locale: "en-US" });
    await page.goto(t.url + `/dashboard/#/apps/${app.id}/analytics`);
    await page.getByLabel("Time zone").fill("UTC");
    await page.getByLabel("Range").selectOption({ label: "Last 7 days" });
    await page.getByLabel("Interval").selectOption({ label: "Day" });
    const { chart, axis } = await axisOf(page, 1);

    // Exactly the range: 7 days ending at the minute after the page asked.
    expect(axis.max - axis.min).toBe(7 * DAY);
    expect(Math.abs(axis.max - now / 1000)).toBeLessThan(180);
    expect(axis.yMin).toBe(0);
    // One tick per UTC midnight of the range, labelled with its date (the year under the first), never a time.
    const expected = midnights(axis.min, axis.max, "UTC");
    expect(expected.length).toBe(7);
    expect(axis.splits).toEqual(expected);
    expect(axis.labels).toEqual(
      expected.map((s, i) => dayLabel(s, "UTC") + (i === 0 ? ` ${new Date(s * 1000).getUTCFullYear()}` : "")),
    );
    for (const label of axis.labels) expect(label).not.toMatch(/AM|PM|:/);

    // The event's day counts 1, the days around it 0 (drawn as 0, not skipped).
    const eventDay = Math.floor((now / 1000 - 2 * DAY) / DAY) * DAY;
    await eventually(() => valuesAt(page, chart, axis, eventDay)).toEqual(["1"]);
    expect(await chart.locator(".u-legend .u-series").first().textContent()).toContain(
      new Intl.DateTimeFormat("en-US", { timeZone: "UTC", month: "short", day: "numeric" }).format(eventDay * 1000),
    );
    await eventually(() => valuesAt(page, chart, axis, eventDay - DAY)).toEqual(["0"]);
    await eventually(() => valuesAt(page, chart, axis, eventDay + DAY)).toEqual(["0"]);
    await page.mouse.move(0, 0);
    await page.screenshot({ path: dashboard.shot("analytics-chart-one-bucket-1280.png"), fullPage: true });

    // By the hour, the last 24 hours (one more event, 3 hours ago): ticks are whole hours, and the axis still
    // spans exactly the range.
    const res = await t.request("POST", "/v1/analytics/events", {
      token: app.token,
      body: { events: [{ type: "signup", at: Date.now() - 3 * HOUR * 1000, properties: { plan: "pro" } }] },
    });
    expect(res.status).toBe(200);
    await page.getByLabel("Range").selectOption({ label: "Last 24 hours" });
    await page.getByLabel("Interval").selectOption({ label: "Hour" });
    await eventually(
      async () => Number(await chart.getAttribute("data-x-max")) - Number(await chart.getAttribute("data-x-min")),
    ).toBe(24 * HOUR);
    const hourly = (await axisOf(page, 1)).axis;
    expect(hourly.splits.length).toBeGreaterThanOrEqual(6);
    for (const s of hourly.splits) expect(s % HOUR).toBe(0);
    expect(new Set(hourly.splits.slice(1).map((s, i) => s - hourly.splits[i])).size).toBe(1);
    for (const label of hourly.labels) expect(label).toMatch(/^\d{1,2}:00 (AM|PM)/);
    await context.close();
  });

  it("many buckets with gaps in 'Last 30 days': every day drawn, 0 where nothing happened, ticks by days", async () => {
    const now = Date.now();
    const at = (days: number) => now - days * DAY * 1000;
    const app = await appWithEvents([
      { at: at(25), plan: "pro" },
      { at: at(25), plan: "pro" },
      { at: at(10), plan: "pro" },
      { at: at(1), plan: "pro" },
      { at: at(1), plan: "pro" },
      { at: at(1), plan: "pro" },
    ]);
    const { context, page } = await dashboard.signIn({ timezoneId: "UTC", locale: "en-US" });
    await page.goto(t.url + `/dashboard/#/apps/${app.id}/analytics`);
    await page.getByLabel("Time zone").fill("UTC");
    await page.getByLabel("Range").selectOption({ label: "Last 30 days" });
    await page.getByLabel("Interval").selectOption({ label: "Day" });
    const { chart, axis } = await axisOf(page, 6);

    expect(axis.max - axis.min).toBe(30 * DAY);
    expect(axis.yMin).toBe(0);
    // Ticks on midnights only (days, or weeks where days do not fit), labelled as dates.
    const all = midnights(axis.min, axis.max, "UTC");
    expect(axis.splits.length).toBeGreaterThanOrEqual(4);
    for (const s of axis.splits) expect(all).toContain(s);
    for (const label of axis.labels) expect(label).toMatch(/^[A-Z][a-z]{2} \d{1,2}( \d{4})?$/);

    const day = (days: number) => Math.floor(at(days) / 1000 / DAY) * DAY;
    await eventually(() => valuesAt(page, chart, axis, day(25))).toEqual(["2"]);
    await eventually(() => valuesAt(page, chart, axis, day(20))).toEqual(["0"]);
    await eventually(() => valuesAt(page, chart, axis, day(10))).toEqual(["1"]);
    await eventually(() => valuesAt(page, chart, axis, day(5))).toEqual(["0"]);
    await eventually(() => valuesAt(page, chart, axis, day(1))).toEqual(["3"]);
    await page.mouse.move(0, 0);
    await page.screenshot({ path: dashboard.shot("analytics-chart-gaps-1280.png"), fullPage: true });
    await context.close();
  });

  it("two groups with the same counts are two lines: distinct dashes and markers, both in the legend", async () => {
    const now = Date.now();
    const app = await appWithEvents([
      { at: now - 3 * DAY * 1000, plan: "pro" },
      { at: now - 3 * DAY * 1000, plan: "free" },
      { at: now - DAY * 1000, plan: "pro" },
      { at: now - DAY * 1000, plan: "free" },
    ]);
    const { context, page } = await dashboard.signIn({ timezoneId: "UTC", locale: "en-US" });
    await page.goto(t.url + `/dashboard/#/apps/${app.id}/analytics`);
    await page.getByLabel("Time zone").fill("UTC");
    await page.getByLabel("Range").selectOption({ label: "Last 7 days" });
    await page.getByLabel("Group by").selectOption("plan");
    const { chart, axis } = await axisOf(page, 4);
    const legend = chart.locator(".u-legend .u-series");
    await eventually(() => legend.count()).toBe(3);
    expect(await legend.nth(1).locator(".u-label").textContent()).toBe("free");
    expect(await legend.nth(2).locator(".u-label").textContent()).toBe("pro");
    const style = (i: number) =>
      legend
        .nth(i)
        .locator(".u-marker")
        .evaluate((el) => [getComputedStyle(el).borderStyle, getComputedStyle(el).borderColor].join(" "));
    expect(await style(1)).not.toBe(await style(2));
    const eventDay = Math.floor((now / 1000 - DAY) / DAY) * DAY;
    await eventually(() => valuesAt(page, chart, axis, eventDay)).toEqual(["1", "1"]);
    await page.mouse.move(0, 0);
    await page.screenshot({ path: dashboard.shot("analytics-chart-equal-groups-1280.png"), fullPage: true });
    await context.close();
  });

  it("days of the chosen zone, not the browser's: Asia/Tokyo from a Los Angeles browser", async () => {
    const now = Date.now();
    const app = await appWithEvents([{ at: now - 4 * DAY * 1000, plan: "pro" }]);
    const { context, page } = await dashboard.signIn({ timezoneId: "America/Los_Angeles", locale: "en-US" });
    await page.goto(t.url + `/dashboard/#/apps/${app.id}/analytics`);
    await page.getByLabel("Range").selectOption({ label: "Last 7 days" });
    await page.getByLabel("Interval").selectOption({ label: "Day" });
    await page.getByLabel("Time zone").fill("Asia/Tokyo");
    await eventually(() => page.getByTestId("buckets").locator("th").first().textContent()).toBe(
      "Bucket start (Asia/Tokyo)",
    );
    const { chart, axis } = await axisOf(page, 1);
    await eventually(() => chart.getAttribute("data-x-splits")).toBe(
      JSON.stringify(midnights(axis.min, axis.max, "Asia/Tokyo")),
    );
    const tokyo = (await axisOf(page, 1)).axis;
    // Tokyo's midnight is 15:00 UTC.
    for (const s of tokyo.splits) expect(s % DAY).toBe(15 * HOUR);
    expect(tokyo.labels.map((l) => l.split(" ").slice(0, 2).join(" "))).toEqual(
      tokyo.splits.map((s) => dayLabel(s, "Asia/Tokyo")),
    );
    await page.mouse.move(0, 0);
    await page.screenshot({ path: dashboard.shot("analytics-chart-tokyo-1280.png"), fullPage: true });
    await context.close();
  });

  it("a custom range across the end of summer time in Berlin: every local day, ticks at local midnights", async () => {
    // 25 October 2026: Berlin goes from UTC+2 to UTC+1, so that day is 25 hours long.
    const app = await appWithEvents([
      { at: Date.UTC(2026, 9, 22, 10), plan: "pro" },
      { at: Date.UTC(2026, 9, 27, 10), plan: "pro" },
      { at: Date.UTC(2026, 9, 27, 11), plan: "pro" },
    ]);
    const { context, page } = await dashboard.signIn({ timezoneId: "Europe/Berlin", locale: "en-US" });
    await page.goto(t.url + `/dashboard/#/apps/${app.id}/analytics`);
    await page.getByLabel("Time zone").fill("Europe/Berlin");
    await page.getByLabel("Range").selectOption({ label: "Custom range" });
    await page.getByLabel("From (your browser's time)").fill("2026-10-20T00:00");
    await page.getByLabel("To (your browser's time)").fill("2026-10-30T00:00");
    await page.getByLabel("Interval").selectOption({ label: "Day" });
    const { chart, axis } = await axisOf(page, 3);
    // From Berlin's midnight of 20 October (22:00 UTC the day before) to that of 30 October (23:00 UTC).
    expect(axis.min).toBe(Date.UTC(2026, 9, 19, 22) / 1000);
    expect(axis.max).toBe(Date.UTC(2026, 9, 29, 23) / 1000);
    expect(axis.splits).toEqual(midnights(axis.min, axis.max, "Europe/Berlin"));
    expect(axis.splits).toHaveLength(11);
    expect(axis.splits).toContain(Date.UTC(2026, 9, 24, 22) / 1000); // 25 October, summer time
    expect(axis.splits).toContain(Date.UTC(2026, 9, 25, 23) / 1000); // 26 October, winter time
    expect(axis.labels[0]).toBe("Oct 20 2026");
    expect(axis.labels.slice(1)).toEqual(Array.from({ length: 10 }, (_, i) => `Oct ${21 + i}`));
    await eventually(() => valuesAt(page, chart, axis, Date.UTC(2026, 9, 21, 22) / 1000)).toEqual(["1"]);
    await eventually(() => valuesAt(page, chart, axis, Date.UTC(2026, 9, 24, 22) / 1000)).toEqual(["0"]);
    await eventually(() => valuesAt(page, chart, axis, Date.UTC(2026, 9, 26, 23) / 1000)).toEqual(["2"]);
    await page.mouse.move(0, 0);
    await page.screenshot({ path: dashboard.shot("analytics-chart-berlin-dst-1280.png"), fullPage: true });
    await context.close();
  });
});
