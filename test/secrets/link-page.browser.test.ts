/**
 * The secret-link page in a real Chromium: open it (twice, still usable),
 * fill and submit the form, see the confirmation without the value, read the
 * value through the API, reopen the link and get the 404 page. Also: the
 * response headers, no request leaves the origin, no CSP violation.
 */
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

describe("the secret-link page in Chromium", () => {
  it("sets the value once through the form and never shows it", async () => {
    const app = await t.createApp();
    await t.admin.declareSecrets({ appId: app.id, names: ["STRIPE_KEY"] });
    const created = await t.request("POST", "/v1/secrets/STRIPE_KEY/link", { token: app.token });
    const linkUrl = t.url + new URL(created.body.url).pathname;

    const context = await browser.newContext();
    const page = await context.newPage();
    const requests: string[] = [];
    const consoleErrors: string[] = [];
    page.on("request", (req) => requests.push(req.url()));
    page.on("console", (msg) => {
      if (msg.type() === "error" && !/favicon|404 \(Not Found\)/.test(msg.text() + (msg.location().url ?? "")))
        consoleErrors.push(msg.text());
    });

    // Open it twice: both show the form; the link stays usable.
    for (let i = 0; i < 2; i++) {
      const response = (await page.goto(linkUrl))!;
      expect(response.status()).toBe(200);
      const headers = response.headers();
      expect(headers["cache-control"]).toBe("no-store");
      expect(headers["referrer-policy"]).toBe("no-referrer");
      expect(headers["content-security-policy"]).toContain("frame-ancestors 'none'");
      expect(headers["content-security-policy"]).toContain("default-src 'none'");
      expect(headers["content-type"]).toBe("text/html; charset=utf-8");
      await expect(page.getByRole("heading", { level: 1 }).textContent()).resolves.toBe("Set a secret");
      expect(await page.locator("main").textContent()).toContain(app.name);
      expect(await page.locator("time").getAttribute("datetime")).toBe(new Date(created.body.expiresAt).toISOString());
    }

    // The field is reachable by its label, and is a masked multi-line field.
    const field = page.getByLabel("Value of STRIPE_KEY");
    expect(await field.evaluate((el) => el.tagName)).toBe("TEXTAREA");
    expect(await field.evaluate((el) => getComputedStyle(el).getPropertyValue("-webkit-text-security"))).toBe("disc");
    // The inline style applied (the CSP allows it by hash): the button is styled.
    const background = await page
      .getByRole("button", { name: "Set secret" })
      .evaluate((el) => getComputedStyle(el).backgroundColor);
    expect(background).toBe("rgb(31, 111, 235)");

    const value = "sk_live_browser_" + Date.now();
    await field.fill(value);
    const [submitted] = await Promise.all([
      page.waitForResponse((res) => res.request().method() === "POST"),
      page.getByRole("button", { name: "Set secret" }).click(),
    ]);
    expect(submitted.status()).toBe(200);
    expect(submitted.headers()["cache-control"]).toBe("no-store");
    await page.waitForLoadState();
    expect(await page.getByRole("heading", { level: 1 }).textContent()).toBe("Secret set");
    expect(await page.getByRole("status").textContent()).toContain("STRIPE_KEY");
    expect(await page.content()).not.toContain(value);

    const read = await t.request("GET", "/v1/secrets/STRIPE_KEY", { token: app.token });
    expect(read.body).toMatchObject({ name: "STRIPE_KEY", value, version: 1 });

    const again = (await page.goto(linkUrl))!;
    expect(again.status()).toBe(404);
    expect(again.headers()["cache-control"]).toBe("no-store");
    expect(await page.getByRole("heading", { level: 1 }).textContent()).toBe("This link is not available");
    expect(await page.content()).not.toContain(value);

    const origin = new URL(t.url).origin;
    expect(requests.filter((url) => new URL(url).origin !== origin)).toEqual([]);
    expect(consoleErrors.filter((text) => /Content Security Policy/i.test(text))).toEqual([]);
    await context.close();
  });

  it("keeps a pasted multi-line PEM key byte for byte", async () => {
    const app = await t.createApp();
    await t.admin.declareSecrets({ appId: app.id, names: ["TLS_KEY"] });
    const created = await t.request("POST", "/v1/secrets/TLS_KEY/link", { token: app.token });
    const context = await browser.newContext();
    const page = await context.newPage();
    await page.goto(t.url + new URL(created.body.url).pathname);
    const field = page.getByLabel("Value of TLS_KEY");
    await field.fill(PEM_KEY);
    // Masked until "Show the value" is ticked (no script: the page's CSS does it).
    await page.getByLabel("Show the value").check();
    expect(await field.evaluate((el) => getComputedStyle(el).getPropertyValue("-webkit-text-security"))).toBe("none");
    await page.getByRole("button", { name: "Set secret" }).click();
    await page.getByRole("heading", { name: "Secret set", level: 1 }).waitFor();
    const read = await t.request("GET", "/v1/secrets/TLS_KEY", { token: app.token });
    expect(read.body.value).toBe(PEM_KEY);
    expect(read.body.value.split("\n")).toHaveLength(4);
    await context.close();
  });
});

/** A 4-line PEM block (test data, not a real key): its line breaks must survive the form. */
const PEM_KEY = [
  "-----BEGIN PRIVATE KEY-----",
  "MC4CAQAwBQYDK2VwBCIEIJ+DYvh6SEqVTm50DFtMDoQikTmiCqirVv9mWG9qfSnF",
  "MC4CAQAwBQYDK2VwBCIEIOk3HfZ4pCVjsbmhGbbVyqO4WcKzu5wpcHKKvKo7UtZA",
  "-----END PRIVATE KEY-----",
].join("\n");
