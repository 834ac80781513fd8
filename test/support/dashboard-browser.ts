/**
 * The set-up the dashboard's browser tests share (the dashboard itself is
 * built by the suite's global set-up, before any file runs): one real
 * Chromium for the test file (closed after it), a folder for the screenshots
 * a person looks at, and operators signed in the way a person does it (token
 * typed on the sign-in screen).
 */
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { afterAll, beforeAll, expect } from "vitest";
import type { Browser, BrowserContext, BrowserContextOptions, Page } from "playwright-core";
import { launchChromium } from "./chromium.ts";
import type { TestApp, TestServer } from "./harness.ts";

export interface DashboardBrowser {
  /** The file's Chromium (from its `beforeAll` on). */
  readonly browser: Browser;
  /**
   * A new context (1280×800 unless `viewport` says otherwise; waits of up to
   * 15 s) signed in as `token` (the admin token by default), on the Apps screen.
   */
  signIn(options?: BrowserContextOptions & { token?: string }): Promise<{ context: BrowserContext; page: Page }>;
  /** Where a screenshot called `name` goes. */
  shot(name: string): string;
}

/** Registers the file's `beforeAll`/`afterAll`; screenshots go to test-artifacts/`folder`. */
export function useDashboardBrowser(t: TestServer, folder = "dashboard"): DashboardBrowser {
  const shots = path.resolve(import.meta.dirname, "../../test-artifacts", folder);
  let browser: Browser | undefined;
  beforeAll(async () => {
    fs.mkdirSync(shots, { recursive: true });
    browser = await launchChromium();
  });
  afterAll(async () => {
    await browser?.close();
  });
  return {
    get browser() {
      if (!browser) throw new Error("the browser starts in beforeAll");
      return browser;
    },
    async signIn({ token = t.adminToken, ...options } = {}) {
      const context = await this.browser.newContext({ viewport: { width: 1280, height: 800 }, ...options });
      context.setDefaultTimeout(15_000);
      const page = await context.newPage();
      await page.goto(t.url + "/dashboard/#/apps");
      await page.getByLabel("Admin token").fill(token);
      await page.getByRole("button", { name: "Sign in" }).click();
      await page.getByRole("heading", { name: "Apps", level: 1 }).waitFor();
      return { context, page };
    },
    shot: (name) => path.join(shots, name),
  };
}

const AXE_SOURCE = fs.readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");

interface AxeViolation {
  id: string;
  impact: string;
  help: string;
  nodes: { target: string[] }[];
}

/** axe-core's WCAG 2.0/2.1 A and AA rules over the page as it stands: one line per violation. */
export async function axeViolations(page: Page): Promise<string[]> {
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

/**
 * A REST call as the app, the set-up of a screen's data: its body, once it answered 200 (the path and
 * the answer's body in the failure).
 */
export async function callAsApp(t: TestServer, app: TestApp, method: string, pathname: string, body?: unknown) {
  const res = await t.request(method, pathname, { token: app.token, body });
  expect(res.status, `${pathname}: ${JSON.stringify(res.body)}`).toBe(200);
  return res.body;
}
