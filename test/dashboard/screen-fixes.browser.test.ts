/**
 * What the screens got wrong, in a real Chromium against the real server:
 *
 * - Peek on one queue, then Activity on another, shows each panel once, also
 *   after the queue list's refresh;
 * - Settings says mail cannot be sent only while the app has no sender;
 * - the built-in operator "owner" (the ADMIN_TOKEN) is on the Operators
 *   screen and in the audit log's operator filter, which finds its entries.
 */
import { describe, expect, it } from "vitest";
import { useDashboardBrowser } from "../support/dashboard-browser.ts";
import { useTestServer } from "../support/harness.ts";

const t = useTestServer();
const dashboard = useDashboardBrowser(t);
const eventually = <T>(read: () => Promise<T>) => expect.poll(read, { timeout: 15_000, interval: 100 });

describe("screen fixes", () => {
  it("Peek on emails, then Activity on jobs: each panel once, also after the refresh", async () => {
    const app = await t.createApp();
    for (const queue of ["emails", "jobs"]) {
      const res = await t.request("POST", `/v1/queues/${queue}`, { token: app.token, body: { payload: { queue } } });
      expect(res.status).toBe(200);
    }
    const { context, page } = await dashboard.signIn();
    await page.goto(t.url + `/dashboard/#/apps/${app.id}/queues`);
    await page.getByTestId("depth-jobs").waitFor();
    await page.getByRole("button", { name: "Peek at emails" }).click();
    await page.getByRole("heading", { name: "Waiting in emails" }).waitFor();
    await page.getByRole("button", { name: "Activity of jobs" }).click();
    await page.getByRole("heading", { name: "Activity of jobs" }).waitFor();
    const panels = () => page.locator("main h2").allTextContents();
    const shown = (headings: string[]) => headings.filter((h) => /^(Waiting in|Activity of) /.test(h)).sort();
    expect(shown(await panels())).toEqual(["Activity of jobs", "Waiting in emails"]);
    // The queue list refreshes on its own: the panels stay as they were.
    await page.waitForResponse((r) => r.url().endsWith("/ListQueues"), { timeout: 20_000 });
    await page.waitForResponse((r) => r.url().endsWith("/ListQueues"), { timeout: 20_000 });
    expect(shown(await panels())).toEqual(["Activity of jobs", "Waiting in emails"]);
    await page.screenshot({ path: dashboard.shot("queues-peek-and-activity-1280.png"), fullPage: true });
    await context.close();
  });

  it("Settings names a missing sender only while the sender is missing", async () => {
    const app = await t.createApp();
    await t.admin.updateApp({ appId: app.id, mailFrom: "" });
    const { context, page } = await dashboard.signIn();
    await page.goto(t.url + `/dashboard/#/apps/${app.id}/settings`);
    const warning = page.getByText("Mail cannot be sent until the app has a sender address.");
    await warning.waitFor();
    const sender = page.getByLabel("Mail sender (mailFrom)");
    await sender.fill("hello@apps.example.com");
    await eventually(() => warning.count()).toBe(0);
    await page.getByRole("button", { name: "Save settings" }).click();
    await eventually(async () => (await t.admin.getApp({ appId: app.id })).app?.mailFrom).toBe(
      "hello@apps.example.com",
    );
    await page.reload();
    expect(await sender.inputValue()).toBe("hello@apps.example.com");
    expect(await warning.count()).toBe(0);
    await page.screenshot({ path: dashboard.shot("settings-sender-set-1280.png"), fullPage: true });
    await context.close();
  });

  it("the owner is on the Operators screen and in the audit log's operator filter", async () => {
    await t.createApp("by-owner");
    const { context, page } = await dashboard.signIn();
    await page.goto(t.url + "/dashboard/#/operators");
    const row = page.getByTestId("operator-owner");
    await row.waitFor();
    expect(await row.textContent()).toContain("admin");
    expect(await row.textContent()).toContain("the bootstrap ADMIN_TOKEN");
    await page.screenshot({ path: dashboard.shot("operators-owner-1280.png"), fullPage: true });

    await page.goto(t.url + "/dashboard/#/audit");
    const filter = page.getByLabel(/^Operator\(anyone\)/);
    await eventually(() => filter.locator("option").allTextContents()).toContain("owner");
    await filter.selectOption({ label: "owner" });
    await eventually(() => page.getByText("by-owner").count()).toBeGreaterThan(0);
    await page.screenshot({ path: dashboard.shot("audit-owner-filter-1280.png"), fullPage: true });
    await context.close();
  });
});
