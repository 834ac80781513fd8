/**
 * The API reference page in a real Chromium: it renders the operations of
 * `/openapi.json`, every request stays on the server's origin (the script
 * comes from the installed package, no CDN, no web fonts), and the page's
 * Content-Security-Policy reports no violation.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Browser } from "playwright-core";
import { useTestServer } from "../support/harness.ts";
import { launchChromium } from "../support/chromium.ts";

const t = useTestServer();
let browser: Browser;

beforeAll(async () => {
  browser = await launchChromium();
});
afterAll(async () => {
  await browser?.close();
});

describe("the API reference page in Chromium", () => {
  it("renders the operations offline, from this origin only, within its CSP", async () => {
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const page = await context.newPage();
    const origin = new URL(t.url).origin;
    const offOrigin: string[] = [];
    const violations: string[] = [];
    // Anything for another origin is refused here, so the page must work without it.
    await context.route(
      (url) => url.origin !== origin && url.protocol !== "data:" && url.protocol !== "blob:",
      async (route) => {
        offOrigin.push(route.request().url());
        await route.abort();
      },
    );
    page.on("console", (msg) => {
      if (/Content Security Policy/i.test(msg.text())) violations.push(msg.text());
    });

    const pageErrors: string[] = [];
    page.on("pageerror", (e) => pageErrors.push(String(e)));
    const response = (await page.goto(t.url + "/docs"))!;
    expect(response.status()).toBe(200);
    const csp = response.headers()["content-security-policy"];
    expect(csp).toContain("default-src 'self'");
    expect(csp).toContain("connect-src 'self'");

    // The reference fetched the document: every tag is open, so every operation shows.
    await page.getByText("Platform Batteries API", { exact: true }).first().waitFor({ timeout: 30_000 });
    await page.getByText("Liveness").first().waitFor();
    await page.getByText("Take one message, waiting if there is none").first().waitFor();
    await page.getByText("Read a secret").first().waitFor();
    expect(await page.title()).toBe("Platform Batteries API");

    const shot = path.join(os.tmpdir(), "api-reference.png");
    await page.screenshot({ path: shot });
    expect(fs.statSync(shot).size).toBeGreaterThan(10_000);

    expect(offOrigin).toEqual([]);
    expect(pageErrors).toEqual([]);
    expect(violations).toEqual([]);
    await context.close();
  });
});
