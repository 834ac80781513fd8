/**
 * The queues screen's activity, test message and peek paging
 * in real Chromium against the real server, on both backends: the
 * puts and acks made through /v1 show in the hourly counts (text, table and
 * chart); a test message sent from the screen is consumed through /v1; peek
 * pages past the first 20; a viewer sees the activity but no send form.
 * axe-core finds no WCAG A/AA violation; screenshots at 1280x800 and 390x844
 * go to test-artifacts/dashboard/screens/.
 */
import { beforeAll, describe, expect, it } from "vitest";
import type { BrowserContext, Page } from "playwright-core";
import { OperatorRole } from "../../gen/platform/admin/v1/admin_pb.js";
import { axeViolations, useDashboardBrowser } from "../support/dashboard-browser.ts";
import { useTestServer, type TestApp } from "../support/harness.ts";

const t = useTestServer();
const dashboard = useDashboardBrowser(t, "dashboard/screens");
let app: TestApp;

async function post(pathname: string, body: unknown, token = app.token) {
  const res = await t.request("POST", pathname, { token, body });
  expect(res.status, `${pathname}: ${JSON.stringify(res.body)}`).toBe(200);
  return res.body;
}

beforeAll(async () => {
  app = await t.createApp("activity");
  // 45 put in one batch, 5 leased, 3 of them acked: 40 wait.
  await post("/v1/queues/line/batch", { messages: Array.from({ length: 45 }, (_, i) => ({ payload: { i } })) });
  const { messages } = await post("/v1/queues/line/consume", { max: 5, waitSeconds: 0 });
  await post("/v1/queues/_ack", { receipts: messages.slice(0, 3).map((m: { receipt: string }) => m.receipt) });
});

/** Signed in at `width`×`height`, on the app's queues screen. */
async function signIn(
  width: number,
  height: number,
  token = t.adminToken,
): Promise<{ context: BrowserContext; page: Page }> {
  const { context, page } = await dashboard.signIn({ viewport: { width, height }, token });
  await page.goto(t.url + `/dashboard/#/apps/${app.id}/queues`);
  await page.getByTestId("depth-line").waitFor();
  return { context, page };
}

describe("the queues screen", () => {
  it("shows the puts and acks made through the API, per hour, as text, chart and table", async () => {
    const { context, page } = await signIn(1280, 800);
    await page.getByRole("button", { name: "Activity of line" }).click();
    await expect
      .poll(() => page.getByTestId("activity-total-line").textContent())
      .toBe("45 put, 3 acked in the last 24 hours.");
    await page.getByRole("img", { name: "Puts and acks per hour of line" }).locator("canvas").waitFor();
    await page.getByText("The counts per hour").click();
    const rows = page.locator("table", { has: page.locator("caption", { hasText: "Puts and acks per hour of line" }) });
    expect(await rows.locator("tbody tr").count()).toBe(24);
    // The current hour comes first in the table.
    expect((await rows.locator("tbody tr").first().locator("td").allTextContents()).slice(1)).toEqual(["45", "3"]);
    expect(await axeViolations(page)).toEqual([]);
    await page.screenshot({ path: dashboard.shot("queue-activity-1280-light.png"), fullPage: true });
    // A drained queue is not listed, but its activity is there by name.
    const { messages } = await post("/v1/queues/drained", { payload: 1 }).then(() =>
      post("/v1/queues/drained/consume", { max: 1, waitSeconds: 0 }),
    );
    await post("/v1/queues/_ack", { receipt: messages[0].receipt });
    await page.getByLabel("Activity of any queue").fill("drained");
    await page.getByRole("button", { name: "Show activity" }).click();
    await expect
      .poll(() => page.getByTestId("activity-total-drained").textContent())
      .toBe("1 put, 1 acked in the last 24 hours.");
    await context.close();
  });

  it("sends a test message that a consumer of the app gets through /v1; bad JSON is refused in a sentence", async () => {
    const { context, page } = await signIn(390, 844);
    const form = page.getByRole("form", { name: "Send a test message" });
    // The server's refusal, said as a sentence (not a pattern).
    await form.getByLabel("Queue").fill("Bad Name");
    await form.getByRole("button", { name: "Send test message" }).click();
    expect(await form.getByRole("alert").textContent()).toBe(
      "Not sent: A name starts with a lowercase letter and has at most 63 lowercase letters, digits, dots, hyphens or underscores (no spaces or capitals).",
    );
    await form.getByLabel("Queue").fill("tests");
    await form.getByLabel("Payload (JSON)").fill("{oops");
    await form.getByRole("button", { name: "Send test message" }).click();
    expect(await form.getByRole("alert").textContent()).toMatch(/^The payload is not valid JSON \(.+\)\.$/);
    await form.getByLabel("Payload (JSON)").fill('{"from": "the dashboard", "n": 1}');
    await form.getByRole("button", { name: "Send test message" }).click();
    const sent = (await form.getByRole("status").textContent())!;
    const id = /^Sent \(id ([0-9a-f-]{36})\)\.$/.exec(sent)?.[1];
    expect(id).toBeDefined();
    const consumed = await post("/v1/queues/tests/consume", { waitSeconds: 5 });
    expect(consumed.message).toMatchObject({ id, payload: { from: "the dashboard", n: 1 } });
    expect(await axeViolations(page)).toEqual([]);
    await page.screenshot({ path: dashboard.shot("queue-send-test-390-light.png"), fullPage: true });
    const audit = await t.admin.listAuditEntries({ appId: app.id, action: "queue.put", pageSize: 10 });
    // Newest first: the put, and the refused "Bad Name" attempt (the bad JSON never left the page).
    expect(audit.entries.map((e) => e.outcome)).toEqual(["ok", "failed"]);
    await context.close();
  });

  it("peeks past the first 20 with the server's pages, and 100 at once", async () => {
    const { context, page } = await signIn(1280, 800);
    await page.getByRole("button", { name: "Peek at line" }).click();
    const items = page.locator(".messages > li");
    await expect.poll(() => items.count()).toBe(20);
    const firstPage = await page.locator(".messages pre").allTextContents();
    await page.getByRole("button", { name: "Next" }).click();
    await expect.poll(() => page.getByTestId("peek-range").textContent()).toBe("Messages 21–40");
    // The label can change a render before the list does: wait for the list of the second page itself.
    let secondPage: string[] = [];
    await expect
      .poll(async () => {
        secondPage = await page.locator(".messages pre").allTextContents();
        return secondPage.length === 20 && !secondPage.some((text) => firstPage.includes(text));
      })
      .toBe(true);
    // 40 different messages, none twice, and no third page.
    expect(new Set([...firstPage, ...secondPage]).size).toBe(40);
    expect(await page.getByRole("button", { name: "Next" }).isDisabled()).toBe(true);
    await page.getByRole("button", { name: "Previous" }).click();
    await expect.poll(() => page.getByTestId("peek-range").textContent()).toBe("Messages 1–20");
    await page.getByLabel("Per page").selectOption("100");
    await expect.poll(() => items.count()).toBe(40);
    expect(await axeViolations(page)).toEqual([]);
    await page.screenshot({ path: dashboard.shot("queue-peek-pages-1280-light.png"), fullPage: true });
    await context.close();
  });

  it("shows a viewer the activity but no send form", async () => {
    const viewer = await t.admin.createOperator({ name: "queue-watcher", role: OperatorRole.VIEWER });
    const { context, page } = await signIn(390, 844, viewer.token);
    await page.getByRole("button", { name: "Activity of line" }).click();
    await page.getByTestId("activity-total-line").waitFor();
    expect(await page.getByRole("heading", { name: "Send a test message" }).count()).toBe(0);
    expect(await axeViolations(page)).toEqual([]);
    await page.screenshot({ path: dashboard.shot("queue-activity-viewer-390-light.png"), fullPage: true });
    await context.close();
  });
});
