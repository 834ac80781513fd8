/**
 * The operator dashboard in a real Chromium against the real server: every
 * main flow through the page, checked against the API from the test (the
 * issued token works over REST, events show in the chart, messages in the
 * queue view, mail in the outbox, a secret link sets a secret, a stopped app
 * gets 403). Also: the page's headers (CSP, frame denial, caching), that no
 * request leaves the origin, that the admin token is never in a URL, and no
 * console errors. A screenshot of each main screen goes to
 * test-artifacts/dashboard/ (not committed).
 */
import fs from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { chromium, type Browser, type BrowserContext, type Page } from "playwright-core";
import { sql } from "kysely";
import { startServer, type TestServer } from "../support/harness.ts";
import { tables } from "../support/tables.ts";

const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
const SHOTS = path.resolve(import.meta.dirname, "../../test-artifacts/dashboard");

let t: TestServer;
let browser: Browser;
let context: BrowserContext;
let page: Page;
const requests: string[] = [];
const consoleErrors: string[] = [];

beforeAll(async () => {
  fs.mkdirSync(SHOTS, { recursive: true });
  t = await startServer();
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--no-first-run",
      "--disable-quic",
    ],
  });
  context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  context.setDefaultTimeout(15_000);
  page = await context.newPage();
  page.on("request", (req) => requests.push(req.url()));
  page.on("console", (msg) => {
    if (msg.type() === "error") consoleErrors.push(msg.text());
  });
  page.on("pageerror", (err) => consoleErrors.push(String(err)));
  page.on("response", (res) => {
    if (res.status() >= 400) consoleErrors.push(`(${res.status()} from ${new URL(res.url()).pathname})`);
  });
});
afterAll(async () => {
  await browser?.close();
  await t?.close();
});

/** Waits (up to 15 s) for what the page shows, which changes on the page's own schedule. */
const eventually = <T>(read: () => Promise<T>) => expect.poll(read, { timeout: 15_000, interval: 100 });
const shot = async (name: string, p: Page = page) => {
  await p.evaluate(() => window.scrollTo(0, 0));
  await p.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });
};
const tab = async (name: string) => {
  await page.getByRole("navigation", { name: "App sections" }).getByRole("link", { name }).click();
  await page.waitForFunction((n) => document.querySelector('.tabs a[aria-current="page"]')?.textContent === n, name);
};

describe("the operator dashboard in Chromium", () => {
  let appId = "";
  let token = "";

  it("is served with a strict CSP, no framing, and cache headers for the shell and the hashed assets", async () => {
    const redirect = await fetch(t.url + "/dashboard", { redirect: "manual" });
    expect(redirect.status).toBe(301);
    expect(redirect.headers.get("location")).toBe("/dashboard/");
    const response = (await page.goto(t.url + "/dashboard/#/apps"))!;
    expect(response.status()).toBe(200);
    const headers = response.headers();
    expect(headers["content-security-policy"]).toContain("default-src 'none'");
    expect(headers["content-security-policy"]).toContain("script-src 'self'");
    expect(headers["content-security-policy"]).toContain("connect-src 'self'");
    expect(headers["content-security-policy"]).toContain("frame-ancestors 'none'");
    expect(headers["content-security-policy"]).not.toContain("unsafe-inline");
    expect(headers["x-frame-options"]).toBe("DENY");
    expect(headers["cache-control"]).toBe("no-cache");
    // The sign-in form is usable soon after navigation starts (the budget is 1 s on a quiet machine;
    // the bound here leaves room for a loaded CI box).
    await page.getByLabel("Admin token").waitFor();
    const interactiveMs = await page.evaluate(() => performance.now());
    console.log(`dashboard: sign-in form interactive ${Math.round(interactiveMs)} ms after navigation start`);
    expect(interactiveMs).toBeLessThan(2000);
    const html = await response.text();
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/); // no inline script
    const asset = html.match(/\/dashboard\/assets\/[^"]+\.js/)![0];
    const assetResponse = await fetch(t.url + asset);
    expect(assetResponse.status).toBe(200);
    expect(assetResponse.headers.get("cache-control")).toBe("public, max-age=31536000, immutable");
  });

  it("refuses a wrong token with a clear message, then signs in", async () => {
    await page.getByLabel("Admin token").fill("pba_wrong_token");
    await page.getByRole("button", { name: "Sign in" }).click();
    await eventually(() => page.getByRole("alert").textContent()).toContain("That token was refused");
    expect(await page.evaluate(() => sessionStorage.length)).toBe(0);
    await shot("01-sign-in-refused");
    // The refused call is logged by Chromium as a failed resource; that one is expected.
    expect(consoleErrors.filter((e) => !e.startsWith("("))).toEqual([expect.stringContaining("401")]);
    consoleErrors.length = 0;

    // By keyboard: the field, then Enter.
    await page.getByLabel("Admin token").focus();
    await page.keyboard.press("ControlOrMeta+A");
    await page.keyboard.type(t.adminToken);
    await page.keyboard.press("Enter");
    await page.getByRole("heading", { name: "Apps", level: 1 }).waitFor();
    await page.getByText("No apps yet").waitFor();
    await shot("02-apps-empty");
  });

  it("creates an app and shows the API's validation message for a bad limit", async () => {
    await page.getByLabel("New app name").fill("Bad Name");
    await page.getByRole("button", { name: "Create app" }).click();
    await eventually(() => page.getByRole("alert").textContent()).toContain("A name starts with a lowercase letter");
    await page.getByLabel("New app name").fill("shop");
    await page.getByRole("button", { name: "Create app" }).click();
    await page.getByRole("heading", { name: /shop/, level: 1 }).waitFor();
    appId = decodeURIComponent(new URL(page.url()).hash.split("/")[2]);
    expect((await t.admin.getApp({ appId })).app?.name).toBe("shop");

    await page.getByLabel("Events per day").fill("-5");
    await page.getByRole("button", { name: "Save settings" }).click();
    await eventually(() => page.getByRole("alert").textContent()).toContain(
      "Events per day must be an integer from 0 to",
    );
    await page.getByLabel("Events per day").fill("5000");
    await page.getByLabel("Mail sender (mailFrom)").fill("hello@shop.example");
    await page.getByRole("button", { name: "Save settings" }).click();
    await page.getByText("Saved.").waitFor();
    // The two refusals above, and nothing else.
    expect(consoleErrors.filter((e) => !e.startsWith("("))).toEqual([
      expect.stringContaining("400"),
      expect.stringContaining("400"),
    ]);
    consoleErrors.length = 0;
    const { app } = await t.admin.getApp({ appId });
    expect(app?.limits?.eventsPerDay).toBe(5000);
    expect(app?.mailFrom).toBe("hello@shop.example");
    await shot("03-app-settings");
  });

  it("issues a token shown once, which works against /v1, and shows its last use", async () => {
    await tab("Tokens");
    await page.getByText("No tokens").waitFor();
    await page.getByLabel("Token label").fill("production");
    await page.getByRole("button", { name: "Issue token" }).click();
    token = (await page.getByTestId("issued-token").textContent())!;
    expect(token).toMatch(/^\S{20,}$/);
    const used = await fetch(t.url + "/v1/queues", { headers: { authorization: `Bearer ${token}` } });
    expect(used.status).toBe(200);
    await page.getByRole("button", { name: "Done" }).click();
    expect(await page.getByTestId("issued-token").count()).toBe(0);
    // The last-use mark shows on the next refresh of the list.
    await eventually(() => page.locator(".table-wrap tbody tr").first().locator("td").nth(2).textContent()).not.toBe(
      "never",
    );
    expect(await page.locator(".table-wrap tbody").textContent()).toContain("production");
    await shot("04-tokens");
  });

  it("shows logged events in the analytics chart and table", async () => {
    await fetch(t.url + "/v1/analytics/types", {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ name: "signup", properties: { plan: "string" } }),
    });
    const at = Date.now() - 2 * 3600_000;
    const events = [..."ppfpfp"].map((c, i) => ({
      type: "signup",
      at: at - i * 86_400_000,
      properties: { plan: c === "p" ? "pro" : "free" },
    }));
    const logged = await fetch(t.url + "/v1/analytics/events", {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ events }),
    });
    expect(logged.status).toBe(200);
    await tab("Analytics");
    await page.getByLabel("Group by").selectOption("plan");
    await eventually(() => page.getByTestId("analytics-total").textContent()).toBe("6");
    await page.locator(".uplot canvas").first().waitFor();
    // The ungrouped answer stays on screen until the grouped one arrives (same total): wait for the groups.
    await eventually(() => page.locator(".u-legend").textContent()).toContain("pro");
    const legend = await page.locator(".u-legend").textContent();
    expect(legend).toContain("pro");
    expect(legend).toContain("free");
    expect(await page.getByTestId("buckets").locator("tbody").textContent()).toContain("pro");
    expect(await page.getByTestId("group-totals").locator("tbody").textContent()).toMatch(/pro\s*4.*free\s*2/);
    await shot("05-analytics");
  });

  it("shows queue depth and a peek that does not lease", async () => {
    for (const payload of [{ order: 1, items: ["a", "b"] }, { order: 2 }]) {
      const put = await fetch(t.url + "/v1/queues/orders", {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify({ payload }),
      });
      expect(put.status).toBe(200);
    }
    await tab("Queues");
    await eventually(() => page.getByTestId("depth-orders").textContent()).toBe("2");
    await page.getByRole("button", { name: "Peek at orders" }).click();
    await page.locator(".messages pre").first().waitFor();
    expect(await page.locator(".messages pre").first().textContent()).toBe(
      JSON.stringify({ order: 1, items: ["a", "b"] }, null, 2),
    );
    expect(Number((await t.admin.listQueues({ appId })).queues[0].depth)).toBe(2);
    await shot("06-queues");
  });

  it("sets maxDeliveries and a rate limit in the settings, shows a queue's dead letters, replays one and purges one after confirming", async () => {
    await tab("Settings");
    await page.getByLabel("Max deliveries (0 = no limit)").fill("1");
    await page.getByLabel("Events per second (0 = no limit)").fill("3000");
    await page.getByRole("button", { name: "Save settings" }).click();
    await page.getByText("Saved.").waitFor();
    expect((await t.admin.getApp({ appId })).app?.limits).toMatchObject({ maxDeliveries: 1, eventsPerSecond: 3000 });
    const rest = (pathname: string, body: unknown) =>
      fetch(t.url + pathname, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      });
    /** Delivers the waiting message once; its lease lapses (without waiting for it); the next consume buries it. */
    const deliverAndBury = async () => {
      const consume = async () =>
        ((await (await rest("/v1/queues/jobs/consume", { waitSeconds: 0 })).json()) as { message: unknown }).message;
      expect(await consume()).not.toBeNull();
      await sql`UPDATE queue_messages SET visible_at = now() - interval '1 millisecond' WHERE app_id = ${appId} AND queue = 'jobs'`.execute(
        tables(t.server.deps.db),
      );
      expect(await consume()).toBeNull();
    };
    expect((await rest("/v1/queues/jobs", { payload: { job: "resize" }, groupKey: "customer-7" })).status).toBe(200);
    await deliverAndBury();
    await tab("Queues");
    await page.getByRole("button", { name: "Dead letters of jobs" }).click();
    await page.getByRole("heading", { name: "Dead letters of jobs" }).waitFor();
    const [dead] = (await t.admin.listDeadLetters({ appId, queue: "jobs" })).deadLetters;
    expect(await page.locator(".messages pre").first().textContent()).toBe(JSON.stringify({ job: "resize" }, null, 2));
    // Its last lease lapsed: the panel says why it failed, as the API does.
    expect(dead.failureReason).toBe("lease expired");
    expect(await page.locator(".messages .failure-reason").first().textContent()).toBe("last failure: lease expired");
    // And which ordered group it was in (its death released the group).
    expect(dead.groupKey).toBe("customer-7");
    expect(await page.locator(".messages li p.muted").first().textContent()).toContain("group customer-7");
    await shot("06b-dead-letters");
    await page.getByRole("button", { name: `Replay ${dead.id}` }).click();
    await page.getByText("Replayed 1.").waitFor();
    await eventually(() => page.getByTestId("dead-jobs").textContent()).toBe("0");
    const jobs = (await t.admin.listQueues({ appId })).queues.find((q) => q.name === "jobs");
    expect([Number(jobs?.depth), Number(jobs?.deadLetters)]).toEqual([1, 0]);

    // Dead again; purging one is confirmed first (it purged at the click), and Cancel keeps it.
    await deliverAndBury();
    const [again] = (await t.admin.listDeadLetters({ appId, queue: "jobs" })).deadLetters;
    await page.getByRole("button", { name: "Close" }).click();
    await page.getByRole("button", { name: "Dead letters of jobs" }).click();
    await page.getByRole("button", { name: `Purge ${again.id}` }).click();
    const dialog = page.getByRole("dialog", { name: `Purge dead letter ${again.id}?` });
    await dialog.waitFor();
    await shot("06c-purge-one-dead-letter");
    await dialog.getByRole("button", { name: "Cancel" }).click();
    await dialog.waitFor({ state: "hidden" });
    expect((await t.admin.listDeadLetters({ appId, queue: "jobs" })).deadLetters.map((d) => d.id)).toEqual([again.id]);
    await page.getByRole("button", { name: `Purge ${again.id}` }).click();
    await dialog.getByRole("button", { name: "Purge", exact: true }).click();
    await page.getByText("Purged 1.").waitFor();
    expect((await t.admin.listDeadLetters({ appId, queue: "jobs" })).deadLetters).toHaveLength(0);
    await t.admin.updateApp({ appId, limits: { maxDeliveries: 0 } });
  });

  it("reads a sent mail in the outbox", async () => {
    const sent = await fetch(t.url + "/v1/mail/send", {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ to: "ann@example.org", subject: "Your order", text: "Thanks for order 1." }),
    });
    expect(sent.status).toBe(200);
    await tab("Mail");
    await page.getByRole("button", { name: "Your order" }).click();
    await eventually(() => page.getByTestId("mail-body").textContent()).toBe("Thanks for order 1.");
    expect(await page.getByTestId("mail-subject").textContent()).toBe("Your order");
    await shot("07-mail");
  });

  it("declares a secret, creates a link, uses the link page, and sees it set without the value", async () => {
    await tab("Secrets");
    await page.getByText("No secrets declared").waitFor();
    await page.getByLabel("Declare a secret name").fill("STRIPE_KEY");
    await page.getByRole("button", { name: "Declare" }).click();
    await eventually(() => page.getByTestId("secret-STRIPE_KEY").textContent()).toContain("not set");
    await page.getByRole("button", { name: "Create link for STRIPE_KEY" }).click();
    const link = (await page.getByTestId("secret-link").textContent())!;
    expect(link).toMatch(/\/secret-links\//);
    await shot("08-secrets-link");

    const linkPage = await context.newPage();
    await linkPage.goto(t.url + new URL(link).pathname);
    const value = "sk_live_dashboard_" + Date.now();
    await linkPage.getByLabel("Value of STRIPE_KEY").fill(value);
    await linkPage.getByRole("button", { name: "Set secret" }).click();
    await linkPage.getByRole("heading", { name: "Secret set", level: 1 }).waitFor();
    await linkPage.close();

    await eventually(() => page.getByTestId("secret-STRIPE_KEY").textContent()).toContain("set1");
    expect(await page.content()).not.toContain(value);
    await shot("09-secrets");
  });

  it("shows today's use against the caps and the 30-day history", async () => {
    await tab("Usage");
    await page.getByRole("meter", { name: "Events" }).waitFor();
    await eventually(() => page.getByRole("meter", { name: "Events" }).getAttribute("aria-valuenow")).toBe("6");
    expect(await page.getByRole("meter", { name: "Events" }).getAttribute("aria-valuemax")).toBe("5000");
    // Today's use and the history are two requests: the charts may come after the meters.
    await page.getByRole("img", { name: "Events and mail per day, last 30 days" }).locator(".uplot").waitFor();
    await page.getByRole("img", { name: "Model tokens per day, last 30 days" }).locator(".uplot").waitFor();
    expect(await page.locator(".uplot").count()).toBe(2);
    await shot("10-usage");
    await page.getByRole("link", { name: "Apps", exact: true }).first().click();
    await page.getByRole("link", { name: "shop" }).waitFor();
    // The list cached from before shows first, then its refetch (stale-while-revalidate).
    await eventually(() => page.locator(".table-wrap tbody tr").first().textContent()).toContain("6 / 5,000");
    await shot("11-apps");
  });

  it("stops the app from the page, and /v1 answers 403", async () => {
    await page.getByRole("link", { name: "shop" }).click();
    await page.getByRole("button", { name: "Stop app" }).click();
    // Stopping asks first.
    await page.getByRole("dialog", { name: "Stop shop?" }).getByRole("button", { name: "Stop app" }).click();
    await page.getByRole("button", { name: "Start app" }).waitFor();
    const refused = await fetch(t.url + "/v1/queues", { headers: { authorization: `Bearer ${token}` } });
    expect(refused.status).toBe(403);
    expect((await refused.json()).error.code).toBe("app_stopped");
  });

  it("works at a phone's width and in dark mode", async () => {
    const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, colorScheme: "dark" });
    const p = await phone.newPage();
    p.on("console", (msg) => msg.type() === "error" && consoleErrors.push(msg.text()));
    p.on("request", (req) => requests.push(req.url()));
    await p.goto(t.url + "/dashboard/#/apps");
    await p.getByLabel("Admin token").fill(t.adminToken);
    await p.getByRole("button", { name: "Sign in" }).click();
    await p.getByRole("link", { name: "shop" }).waitFor();
    const overflow = await p.evaluate(
      () => document.documentElement.scrollWidth - document.documentElement.clientWidth,
    );
    expect(overflow).toBeLessThanOrEqual(0);
    const background = await p.evaluate(() => getComputedStyle(document.body).backgroundColor);
    expect(background).toBe("rgb(13, 17, 23)");
    await shot("12-phone-dark-apps", p);
    await p.goto(t.url + `/dashboard/#/apps/${appId}/queues`);
    await p.getByTestId("depth-orders").waitFor();
    await shot("13-phone-dark-queues", p);
    await phone.close();
  });

  it("deletes the app after its name is typed, and signs out", async () => {
    await page.getByRole("button", { name: "Delete app" }).click();
    const confirm = page.getByRole("button", { name: "Delete forever" });
    expect(await confirm.isDisabled()).toBe(true);
    // The dialog took the focus; the confirmation is typed and sent with Enter.
    await page.getByLabel("Type shop to confirm").fill("shop");
    await page.keyboard.press("Enter");
    await page.getByText("No apps yet").waitFor();
    expect((await t.admin.listApps({})).apps).toEqual([]);

    await page.getByRole("button", { name: "Sign out" }).click();
    await page.getByLabel("Admin token").waitFor();
    expect(await page.evaluate(() => sessionStorage.length)).toBe(0);
  });

  it("pages through 1000 apps, filters them, and makes no requests while the tab is hidden", async () => {
    for (let i = 0; i < 1000; i += 50) {
      await Promise.all(
        Array.from({ length: 50 }, (_, j) => t.admin.createApp({ name: `bulk-${String(i + j).padStart(4, "0")}` })),
      );
    }
    // The page's timers run on Playwright's clock, so the test moves time on instead of waiting for it.
    await page.clock.install();
    await page.getByLabel("Admin token").fill(t.adminToken);
    const started = Date.now();
    const listed = page.waitForResponse((res) => res.url().endsWith("/platform.admin.v1.AdminService/ListApps"));
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByText("Page 1 of 20 (1,000 in all)").waitFor();
    const renderMs = Date.now() - started;
    console.log(`dashboard: 1000 apps listed (first page rendered) ${renderMs} ms after sign-in`);
    // The server pages the list: one page of 50 travels, not 1000 apps.
    const body = (await (await listed).body()).length;
    console.log(`dashboard: ListApps answer ${(body / 1024).toFixed(1)} kB for the first page of 1000 apps`);
    expect(body).toBeLessThan(60_000);
    expect(await page.locator(".table-wrap tbody tr").count()).toBe(50);
    expect(await page.locator(".table-wrap tbody tr").first().textContent()).toContain("bulk-0000");
    await page.getByRole("button", { name: "Next" }).click();
    // The next page comes from the server.
    await eventually(() => page.locator(".table-wrap tbody tr").first().textContent()).toContain("bulk-0050");
    await page.getByLabel("Filter").fill("bulk-0999");
    await eventually(() => page.locator(".table-wrap tbody tr").count()).toBe(1);
    await shot("14-apps-1000");

    // Hidden: TanStack Query stops its refresh intervals (it watches visibilitychange).
    await page.evaluate(() => {
      Object.defineProperty(document, "visibilityState", { configurable: true, get: () => "hidden" });
      document.dispatchEvent(new Event("visibilitychange"));
    });
    const before = requests.length;
    // Longer than the 5 s refresh interval: with the tab visible, a refresh would have gone out.
    await page.clock.runFor(6000);
    expect(requests.slice(before)).toEqual([]);
    await page.evaluate(() => {
      Object.defineProperty(document, "visibilityState", { configurable: true, get: () => "visible" });
      document.dispatchEvent(new Event("visibilitychange"));
    });
    const refreshed = page.waitForRequest((req) => req.url().endsWith("/platform.admin.v1.AdminService/ListApps"));
    await page.clock.runFor(6000);
    await refreshed;
  });

  it("sent nothing anywhere but the service, never put the admin token in a URL, and logged no console errors", () => {
    const origin = new URL(t.url).origin;
    expect(requests.length).toBeGreaterThan(10);
    expect(requests.filter((url) => !url.startsWith("data:") && new URL(url).origin !== origin)).toEqual([]);
    expect(requests.filter((url) => url.includes(t.adminToken))).toEqual([]);
    expect(consoleErrors).toEqual([]);
  });
});
