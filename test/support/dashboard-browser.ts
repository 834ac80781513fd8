/**
 * The set-up the dashboard's browser tests share (the dashboard itself is
 * built by the suite's global set-up, before any file runs): one real
 * Chromium for the test file (closed after it), a folder for the screenshots
 * a person looks at, and operators signed in the way a person does it (token
 * typed on the sign-in screen).
 */
import fs from "node:fs";
import path from "node:path";
import { afterAll, beforeAll } from "vitest";
import type { Browser, BrowserContext, BrowserContextOptions, Page } from "playwright-core";
import { launchChromium } from "./chromium.ts";
import type { TestServer } from "./harness.ts";

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
