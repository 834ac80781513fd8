/**
 * Every screen of the dashboard, in a real Chromium against the real server,
 * at 1280×800 and 390×844, light and dark:
 *
 * - axe-core (injected through the DevTools protocol, so the page's strict
 *   CSP stays on) finds no WCAG 2.x A/AA violation;
 * - nothing is wider than the screen (tables fit a 390 px phone: rows with
 *   actions become blocks);
 * - a screenshot of each goes to test-artifacts/dashboard/screens/.
 *
 * And the behaviour every screen shares: a refresh that fails keeps the last
 * data under a banner, errors read as sentences, focus moves to the new
 * screen's heading, the skip link, stopping an app asks first, a settings
 * save sends only what was edited, the apps filter is case-insensitive and
 * starts again from page 1.
 */
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { sql } from "kysely";
import { ensureDashboardBuilt } from "../../src/dashboard/dashboard-build.ts";
import { useTestServer, type TestApp } from "../support/harness.ts";
import { launchChromium } from "../support/chromium.ts";
import { tables } from "../support/tables.ts";

const SHOTS = path.resolve(import.meta.dirname, "../../test-artifacts/dashboard/screens");
const AXE_SOURCE = fs.readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");

const t = useTestServer();
let browser: Browser;
let shop: TestApp;

/** An app with something on every screen: events, queues with a dead letter, mail, secrets, tokens. */
async function seed(): Promise<TestApp> {
  const app = await t.createApp("shop");
  const post = async (pathname: string, body: unknown) => {
    const res = await t.request("POST", pathname, { token: app.token, body });
    expect(res.status, `${pathname}: ${JSON.stringify(res.body)}`).toBe(200);
    return res.body;
  };
  await t.admin.updateApp({ appId: app.id, mailFrom: "hello@shop.example", limits: { maxDeliveries: 1 } });
  await post("/v1/analytics/types", { name: "signup", properties: { plan: "string" } });
  const now = Date.now();
  await post("/v1/analytics/events", {
    events: Array.from({ length: 40 }, (_, i) => ({
      type: "signup",
      at: now - (i % 7) * 86_400_000 - 3600_000,
      properties: { plan: ["free", "pro", "team"][i % 3] },
    })),
  });
  for (let i = 0; i < 3; i++) await post("/v1/queues/orders", { payload: { order: i, items: ["a", "b"] } });
  await post("/v1/queues/jobs", { payload: { job: "resize" } });
  await post("/v1/queues/jobs/consume", { waitSeconds: 0 });
  await sql`UPDATE queue_messages SET visible_at = now() - interval '1 millisecond' WHERE app_id = ${app.id} AND queue = 'jobs'`.execute(
    tables(t.server.deps.db),
  );
  await post("/v1/queues/jobs/consume", { waitSeconds: 0 });
  for (let i = 0; i < 3; i++)
    await post("/v1/mail/send", {
      to: `ann${i}@example.org`,
      subject: `Your order ${i}`,
      text: `Thanks for order ${i}.`,
    });
  await t.admin.declareSecrets({ appId: app.id, names: ["STRIPE_KEY", "TLS_KEY"] });
  await t.admin.setSecret({ appId: app.id, name: "STRIPE_KEY", value: "sk_test_1" });
  await t.admin.issueToken({ appId: app.id, label: "production" });
  return app;
}

beforeAll(async () => {
  await ensureDashboardBuilt();
  fs.mkdirSync(SHOTS, { recursive: true });
  browser = await launchChromium();
  shop = await seed();
});
afterAll(async () => {
  await browser?.close();
});

async function signIn(
  width: number,
  height: number,
  colorScheme: "light" | "dark",
): Promise<{ context: BrowserContext; page: Page }> {
  const context = await browser.newContext({ viewport: { width, height }, colorScheme });
  context.setDefaultTimeout(15_000);
  const page = await context.newPage();
  await page.goto(t.url + "/dashboard/");
  await page.getByLabel("Admin token").fill(t.adminToken);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("heading", { name: "Apps", level: 1 }).waitFor();
  return { context, page };
}

interface AxeViolation {
  id: string;
  impact: string;
  help: string;
  nodes: { target: string[] }[];
}

/** axe-core's WCAG 2.0/2.1 A and AA rules over the page as it stands. */
async function axeViolations(page: Page): Promise<string[]> {
  if (!(await page.evaluate(() => "axe" in window))) await page.evaluate(AXE_SOURCE);
  const violations = await page.evaluate(async () => {
    const axe = (window as unknown as { axe: { run: (ctx: unknown, opts: unknown) => Promise<unknown> } }).axe;
    const result = (await axe.run(document, {
      runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"] },
    })) as { violations: AxeViolation[] };
    return result.violations;
  });
  return violations.map(
    (v) => `${v.id} (${v.impact}): ${v.help} at ${v.nodes.map((n) => n.target.join(" ")).join(", ")}`,
  );
}

/** The screens, each with what shows once its data is there. */
const SCREENS: { name: string; hash: (app: TestApp) => string; ready: (page: Page) => Promise<unknown> }[] = [
  { name: "apps", hash: () => "#/apps", ready: (p) => p.getByRole("link", { name: "shop", exact: true }).waitFor() },
  {
    name: "settings",
    hash: (a) => `#/apps/${a.id}/settings`,
    ready: (p) => p.getByRole("button", { name: "Save settings" }).waitFor(),
  },
  { name: "tokens", hash: (a) => `#/apps/${a.id}/tokens`, ready: (p) => p.getByText("production").waitFor() },
  {
    name: "usage",
    hash: (a) => `#/apps/${a.id}/usage`,
    ready: (p) => p.locator(".uplot").nth(1).waitFor(),
  },
  {
    name: "analytics",
    hash: (a) => `#/apps/${a.id}/analytics`,
    ready: async (p) => {
      await p.getByLabel("Group by").selectOption("plan");
      await p.getByTestId("group-totals").waitFor();
    },
  },
  {
    name: "queues",
    hash: (a) => `#/apps/${a.id}/queues`,
    ready: async (p) => {
      await p.getByTestId("depth-orders").waitFor();
      await p.getByRole("button", { name: "Peek at orders" }).click();
      await p.locator(".messages pre").first().waitFor();
    },
  },
  {
    name: "dead-letters",
    hash: (a) => `#/apps/${a.id}/queues`,
    ready: async (p) => {
      await p.getByRole("button", { name: "Dead letters of jobs" }).click();
      await p.getByRole("heading", { name: "Dead letters of jobs" }).waitFor();
    },
  },
  {
    name: "mail",
    hash: (a) => `#/apps/${a.id}/mail`,
    ready: async (p) => {
      await p.getByRole("button", { name: "Your order 1" }).click();
      await p.getByTestId("mail-body").waitFor();
    },
  },
  {
    name: "secrets",
    hash: (a) => `#/apps/${a.id}/secrets`,
    ready: (p) => p.getByTestId("secret-TLS_KEY").waitFor(),
  },
];

const LAYOUTS = [
  { label: "1280", width: 1280, height: 800 },
  { label: "390", width: 390, height: 844 },
] as const;

describe("every screen, at both widths, light and dark", () => {
  for (const layout of LAYOUTS) {
    for (const scheme of ["light", "dark"] as const) {
      it(`${layout.label} px ${scheme}: no WCAG A/AA violation, nothing wider than the screen`, async () => {
        const { context, page } = await signIn(layout.width, layout.height, scheme);
        const found: Record<string, string[]> = {};
        for (const screen of SCREENS) {
          await page.goto(t.url + "/dashboard/" + screen.hash(shop));
          await screen.ready(page);
          const violations = await axeViolations(page);
          if (violations.length) found[screen.name] = violations;
          const overflow = await page.evaluate(() => ({
            page: document.documentElement.scrollWidth - document.documentElement.clientWidth,
            tables: Array.from(document.querySelectorAll(".table-wrap"))
              .filter((el) => el.scrollWidth > el.clientWidth + 1)
              .map((el) => el.querySelector("caption, th")?.textContent ?? "a table"),
          }));
          expect(overflow, screen.name).toEqual({ page: 0, tables: [] });
          await page.screenshot({
            path: path.join(SHOTS, `${screen.name}-${layout.label}-${scheme}.png`),
            fullPage: true,
          });
        }
        expect(found).toEqual({});
        await context.close();
      });
    }
  }
  it("the sign-in screen has no violation either", async () => {
    for (const scheme of ["light", "dark"] as const) {
      const context = await browser.newContext({ viewport: { width: 390, height: 844 }, colorScheme: scheme });
      const page = await context.newPage();
      await page.goto(t.url + "/dashboard/");
      await page.getByLabel("Admin token").waitFor();
      expect(await axeViolations(page)).toEqual([]);
      await page.screenshot({ path: path.join(SHOTS, `sign-in-390-${scheme}.png`) });
      await context.close();
    }
  });
});

describe("what every screen shares", () => {
  it("keeps the data on screen with a banner when a refresh fails, and recovers", async () => {
    const { context, page } = await signIn(1280, 800, "light");
    await page.goto(t.url + `/dashboard/#/apps/${shop.id}/queues`);
    await page.getByTestId("depth-orders").waitFor();
    // The server becomes unreachable: every call fails at the network level.
    await page.route("**/platform.admin.v1.AdminService/**", (route) => route.abort("connectionrefused"));
    const banner = page.getByTestId("stale-banner").filter({ hasText: "Could not refresh queues." });
    await banner.waitFor({ timeout: 30_000 });
    expect(await banner.textContent()).toContain("The server did not answer.");
    expect(await page.getByTestId("depth-orders").textContent()).toBe("3");
    await page.screenshot({ path: path.join(SHOTS, "refresh-failed-1280-light.png"), fullPage: true });
    await page.unroute("**/platform.admin.v1.AdminService/**");
    await page.getByTestId("stale-banner").first().waitFor({ state: "detached", timeout: 30_000 });
    expect(await page.getByTestId("depth-orders").textContent()).toBe("3");
    await context.close();
  });

  it("says errors as sentences, not field paths and patterns", async () => {
    const { context, page } = await signIn(1280, 800, "light");
    await page.getByLabel("New app name").fill("Bad Name");
    await page.getByRole("button", { name: "Create app" }).click();
    const alert = page.getByRole("alert");
    await alert.waitFor();
    expect(await alert.textContent()).toContain("A name starts with a lowercase letter");
    expect(await alert.textContent()).not.toContain("^[a-z]");
    await page.goto(t.url + `/dashboard/#/apps/${shop.id}/settings`);
    await page.getByLabel("Events per day").fill("-5");
    await page.getByRole("button", { name: "Save settings" }).click();
    await expect
      .poll(() => page.getByRole("alert").textContent())
      .toMatch(/^Not saved: Events per day must be an integer from 0 to [\d,]+\.$/);
    await context.close();
  });

  it("moves the focus to the new screen's heading, and offers a skip link", async () => {
    const { context, page } = await signIn(1280, 800, "light");
    await page.getByRole("link", { name: "shop", exact: true }).click();
    await expect.poll(() => page.evaluate(() => document.activeElement?.tagName)).toBe("H1");
    expect(await page.evaluate(() => document.activeElement?.textContent)).toContain("shop");
    await page.getByRole("navigation", { name: "App sections" }).getByRole("link", { name: "Queues" }).click();
    await page.getByTestId("depth-orders").waitFor();
    await expect.poll(() => page.evaluate(() => document.activeElement?.tagName)).toBe("H1");
    // On a fresh load the first Tab reaches the skip link; following it puts the focus on the content.
    await page.reload();
    await page.getByTestId("depth-orders").waitFor();
    await page.keyboard.press("Tab");
    expect(await page.evaluate(() => document.activeElement?.textContent)).toBe("Skip to content");
    await page.keyboard.press("Enter");
    expect(await page.evaluate(() => document.activeElement?.id)).toBe("main");
    expect(new URL(page.url()).hash).toBe(`#/apps/${shop.id}/queues`);
    await context.close();
  });

  it("asks before stopping an app", async () => {
    const other = await t.createApp();
    const { context, page } = await signIn(1280, 800, "light");
    await page.goto(t.url + `/dashboard/#/apps/${other.id}/settings`);
    await page.getByRole("button", { name: "Stop app" }).click();
    const dialog = page.getByRole("dialog", { name: `Stop ${other.name}?` });
    await dialog.waitFor();
    await dialog.getByRole("button", { name: "Cancel" }).click();
    expect((await t.request("GET", "/v1/queues", { token: other.token })).status).toBe(200);
    await page.getByRole("button", { name: "Stop app" }).click();
    await dialog.getByRole("button", { name: "Stop app" }).click();
    await page.getByRole("button", { name: "Start app" }).waitFor();
    expect((await t.request("GET", "/v1/queues", { token: other.token })).status).toBe(403);
    await context.close();
  });

  it("saving one field keeps a limit set elsewhere while the form was open", async () => {
    const other = await t.createApp();
    const { context, page } = await signIn(1280, 800, "light");
    await page.goto(t.url + `/dashboard/#/apps/${other.id}/settings`);
    await page.getByRole("button", { name: "Save settings" }).waitFor();
    await t.admin.updateApp({ appId: other.id, limits: { eventsPerDay: 500 } });
    await page.getByLabel("Mail per day").fill("42");
    await page.getByRole("button", { name: "Save settings" }).click();
    await page.getByText("Saved.").waitFor();
    const { app } = await t.admin.getApp({ appId: other.id });
    expect([app?.limits?.eventsPerDay, app?.limits?.mailPerDay]).toEqual([500, 42]);
    await expect.poll(() => page.getByLabel("Events per day").inputValue()).toBe("500");
    await context.close();
  });

  it("filters apps case-insensitively and starts again from page 1", async () => {
    await Promise.all(Array.from({ length: 120 }, (_, i) => t.admin.createApp({ name: `bulk-${i}` })));
    const { context, page } = await signIn(1280, 800, "light");
    await page.getByRole("button", { name: "Next" }).click();
    await page.getByRole("button", { name: "Next" }).click();
    await page.getByText(/^Page 3 of/).waitFor();
    await page.getByLabel("Filter").fill("BULK-1");
    // bulk-1, bulk-10..19, bulk-100..119: 31 apps, so 1 page shows from its start.
    await expect.poll(() => page.locator(".table-wrap tbody tr").count()).toBe(31);
    await context.close();
  });
});
