/**
 * The queue policy on the queues screen and the overview, in real Chromium
 * against the real server, on both backends:
 * - the listing shows each queue's max deliveries; the policy panel says
 *   where it comes from (the queue's own policy or the app's default), an
 *   admin's change is saved and read by the app through /v1, a refused one
 *   shows the server's sentence, and the dead-letter panel names the policy
 *   that applies (not the app's limit); a viewer reads the policy, cannot save;
 *   the settings explain the per-app default where it is edited;
 * - the overview shows apps by status, each facility's requests with a chart
 *   by hour (its bars drawn from 0, the current hour last), errors as shares,
 *   the most active app, queue backlog and dead letters, mail and tokens of
 *   the day, and every dependency with its provider and state.
 * axe-core finds no WCAG A/AA violation; screenshots go to
 * test-artifacts/dashboard/ops/.
 */
import { beforeAll, describe, expect, it, vi } from "vitest";
import { OperatorRole } from "../../gen/platform/admin/v1/admin_pb.js";
import { axeViolations, callAsApp, useDashboardBrowser } from "../support/dashboard-browser.ts";
import { useTestServer, type TestApp } from "../support/harness.ts";

const t = useTestServer();
const dashboard = useDashboardBrowser(t, "dashboard/ops");
let app: TestApp;
const call = (method: string, pathname: string, body?: unknown) => callAsApp(t, app, method, pathname, body);

beforeAll(async () => {
  app = await t.createApp("flaky-app");
  // The app's own policy: one delivery, then the message is dead. One message dies that way.
  await call("PUT", "/v1/queues/flaky/policy", { maxDeliveries: 1 });
  await call("POST", "/v1/queues/flaky", { payload: { job: 1 } });
  await call("POST", "/v1/queues/flaky", { payload: { job: 2 } });
  const { message } = await call("POST", "/v1/queues/flaky/consume", { waitSeconds: 0 });
  await call("POST", "/v1/queues/_nack", { receipt: message.receipt });
  // The sweep buries it (every few seconds); an event, awaited, not a sleep.
  await vi.waitFor(
    async () => expect((await t.admin.listDeadLetters({ appId: app.id, queue: "flaky" })).deadLetters).toHaveLength(1),
    { timeout: 30_000, interval: 200 },
  );
});

describe("the queue policy on the queues screen", () => {
  it("shows where max deliveries comes from, saves an admin's change, and names the policy in the dead-letter panel", async () => {
    const { context, page } = await dashboard.signIn();
    await page.goto(t.url + `/dashboard/#/apps/${app.id}/queues`);
    await expect.poll(() => page.getByTestId("max-flaky").textContent()).toBe("1");
    await page.getByRole("button", { name: "Policy of flaky" }).click();
    const panel = page.getByTestId("policy-flaky");
    await expect
      .poll(() => panel.getByTestId("policy-source").textContent())
      .toBe("Max deliveries 1: set by this queue's policy (the app sets no default).");
    expect(await panel.getByText("A queue's policy decides how its messages are retried").count()).toBe(1);
    await page.screenshot({ path: dashboard.shot("queue-policy-1280.png"), fullPage: true });

    // A refused value: the server's sentence, nothing saved.
    await panel.getByLabel("Retry backoff").fill("20");
    await panel.getByRole("button", { name: "Save policy" }).click();
    await panel.getByText("The retry backoff must be a number from 1 to 10.").waitFor();
    expect((await call("GET", "/v1/queues/flaky/policy")).retryBackoff).toBe(2);

    await panel.getByLabel("Retry backoff").fill("2");
    await panel.getByLabel("Max deliveries").fill("3");
    await panel.getByLabel(/^Retry delay \(seconds\)/).fill("5");
    await panel.getByRole("button", { name: "Save policy" }).click();
    await panel.getByText("Saved: the queue's consumers follow it from their next delivery.").waitFor();
    expect(await call("GET", "/v1/queues/flaky/policy")).toMatchObject({ maxDeliveries: 3, retryDelaySeconds: 5 });
    await expect.poll(() => page.getByTestId("max-flaky").textContent()).toBe("3");
    const audit = await t.admin.listAuditEntries({ appId: app.id, action: "queue.policy", pageSize: 10 });
    expect(audit.entries.map((e) => e.outcome)).toEqual(["ok", "failed"]);

    // The dead-letter panel names the queue's policy, not the app's limit (0 here).
    await page.getByRole("button", { name: /^Dead letters of flaky/ }).click();
    await expect
      .poll(() => page.getByTestId("dead-letter-rule").textContent())
      .toContain(
        "A message dies after 3 deliveries, set by this queue's policy (the app sets no default); dead messages wait here.",
      );
    expect(await axeViolations(page)).toEqual([]);
    await page.screenshot({ path: dashboard.shot("queue-dead-letters-policy-1280.png"), fullPage: true });

    // The settings explain the per-app default where it is edited.
    await page.goto(t.url + `/dashboard/#/apps/${app.id}/settings`);
    await page
      .getByText(
        "The default of every queue of the app and the ceiling of a queue's own policy (set on the Queues tab), which may only lower it.",
      )
      .waitFor();
    await context.close();
  });

  it("lets a viewer read the policy but not change it", async () => {
    const created = await t.admin.createOperator({ name: "policy-reader", role: OperatorRole.VIEWER });
    const { context, page } = await dashboard.signIn({ token: created.token, viewport: { width: 390, height: 844 } });
    await page.goto(t.url + `/dashboard/#/apps/${app.id}/queues`);
    await page.getByLabel("Policy of any queue").fill("flaky");
    await page.getByRole("button", { name: "Show policy" }).click();
    const panel = page.getByTestId("policy-flaky");
    await expect.poll(() => panel.getByLabel("Max deliveries").inputValue()).toBe("3");
    expect(await panel.getByLabel("Max deliveries").isDisabled()).toBe(true);
    expect(await panel.getByRole("button", { name: "Save policy" }).count()).toBe(0);
    await panel.getByText("Your operator role reads only: the policy cannot be changed here.").waitFor();
    await page.screenshot({ path: dashboard.shot("queue-policy-viewer-390.png"), fullPage: true });
    await context.close();
  });
});

describe("the overview", () => {
  it("shows apps, requests per facility with a chart by hour, errors, top apps, queues, mail, tokens, dependencies", async () => {
    await t.createApp("stopped-one").then((a) => a.stop());
    await t.admin.updateApp({ appId: app.id, mailFrom: "flaky@example.com" });
    await call("POST", "/v1/mail/send", { to: "ada@example.com", subject: "Hello", text: "Hi" });
    await call("POST", "/v1/inference/generate", { prompt: "Say hello" });
    for (let i = 0; i < 5; i++) await call("GET", "/v1/analytics/types");
    // One refused (400) of nine analytics calls in all... four more refused.
    for (let i = 0; i < 4; i++)
      expect((await t.request("POST", "/v1/analytics/events", { token: app.token, body: {} })).status).toBe(400);
    await t.server.requestCounts.flush();
    const o = await t.admin.getOverview({});

    const { context, page } = await dashboard.signIn();
    await page.goto(t.url + "/dashboard/#/");
    await expect.poll(() => page.getByTestId("apps-running").textContent()).toBe("1 running");
    await page.getByText("1 stopped").waitFor();
    expect(await page.getByTestId("queue-backlog").textContent()).toBe(`${Number(o.queueBacklog)} queued`);
    await page.getByText("1 dead letter, all apps").waitFor();
    expect(await page.getByTestId("mail-today").textContent()).toBe("1 sent");
    expect(await page.getByTestId("tokens-today").textContent()).toBe(
      Number(o.fastTokensToday + o.embedTokensToday).toLocaleString("en-US"),
    );
    // analytics: 5 answered, 4 refused: 44.4 % 4xx, in the last hour and the chart's current hour.
    const analytics = page.getByTestId("requests-analytics");
    const cells = await analytics.locator("td").allTextContents();
    expect([cells[0], cells[1], cells[3], cells[4]]).toEqual(["9", "9", "44.4 %", "0.0 %"]);
    const chart = analytics.getByRole("img", { name: /^Requests per hour of analytics/ });
    expect(await chart.getAttribute("data-bars")).toBe("24");
    // The bars are the hours GetOverview answered: one bar per hour with requests (one, the current hour, unless
    // the test ran across an hour's end), the last at the right edge, the busiest full height: drawn from 0.
    const hourly = o.facilities.find((f) => f.facility === "analytics")!.hourly.map(Number);
    expect(await chart.getAttribute("data-max")).toBe(String(Math.max(...hourly)));
    const bars = chart.locator("rect");
    expect(await bars.count()).toBe(hourly.filter((h) => h > 0).length);
    const frame = (await chart.boundingBox())!;
    const boxes = await Promise.all((await bars.all()).map((b) => b.boundingBox()));
    const last = boxes.at(-1)!;
    expect(last.x + last.width).toBeGreaterThan(frame.x + frame.width - 6);
    expect(Math.max(...boxes.map((b) => b!.height))).toBeGreaterThan(frame.height - 4);
    expect(await page.getByTestId("requests-secrets").locator("td").first().textContent()).toBe("0");
    // The most active app, linking to its usage.
    const top = page.getByTestId("top-apps").locator("tbody tr").first();
    expect(await top.locator("td").first().textContent()).toBe("flaky-app");
    expect(await top.getByRole("link").getAttribute("href")).toBe(`#/apps/${app.id}/usage`);
    // Every dependency, with what serves it.
    expect(await page.getByTestId("ready-database").textContent()).toBe(
      process.env.DATABASE_URL ? "ready database · PostgreSQL" : "ready database · PGlite (embedded)",
    );
    expect(await page.getByTestId("ready-mail").textContent()).toBe(
      "embedded mail · outbox (embedded, never delivers)",
    );
    expect(await axeViolations(page)).toEqual([]);
    await page.screenshot({ path: dashboard.shot("overview-1280.png"), fullPage: true });
    await page.setViewportSize({ width: 390, height: 844 });
    await page.screenshot({ path: dashboard.shot("overview-390.png"), fullPage: true });
    await context.close();
  });
});
