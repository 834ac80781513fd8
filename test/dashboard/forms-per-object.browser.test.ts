/**
 * A form of the dashboard belongs to the object it edits, in a real Chromium
 * against the real server:
 *
 * - a value typed for one secret is gone when "Set value" of another opens
 *   (it stayed, masked, and saving wrote it into the other secret);
 * - settings edited on one app are gone on the next app's settings (they
 *   stayed, with the first app's revision, and saving wrote them to it);
 * - "Issue token" is one click at a time (a double click issued two tokens,
 *   one of them shown to nobody).
 */
import { describe, expect, it } from "vitest";
import { OperatorRole } from "../../gen/platform/admin/v1/admin_pb.js";
import { useDashboardBrowser } from "../support/dashboard-browser.ts";
import { useTestServer } from "../support/harness.ts";

const t = useTestServer();
const dashboard = useDashboardBrowser(t);
const signedIn = () => dashboard.signIn();

describe("dashboard forms belong to the object they edit", () => {
  it("forgets a value typed for one secret when Set value of another opens", async () => {
    const app = await t.createApp();
    await t.admin.declareSecrets({ appId: app.id, names: ["FIRST", "SECOND"] });
    const { context, page } = await signedIn();
    await page.goto(t.url + `/dashboard/#/apps/${app.id}/secrets`);
    await page.getByRole("button", { name: "Set value of FIRST" }).click();
    await page.getByRole("textbox", { name: "Value of FIRST" }).fill("value-typed-for-first");
    await page.getByRole("button", { name: "Set value of SECOND" }).click();
    const second = page.getByRole("textbox", { name: "Value of SECOND" });
    await second.waitFor();
    expect(await second.inputValue()).toBe("");
    await second.fill("value-of-second");
    await page.getByRole("button", { name: "Set value", exact: true }).click();
    await expect.poll(() => page.getByTestId("secret-SECOND").textContent(), { timeout: 15_000 }).toContain("set1");
    const read = await t.request("GET", "/v1/secrets/SECOND", { token: app.token });
    expect(read.body.value).toBe("value-of-second");
    await context.close();
  });

  it("forgets one app's unsaved settings on the next app's settings", async () => {
    const one = await t.createApp();
    const two = await t.createApp();
    const { context, page } = await signedIn();
    const eventsPerDay = page.getByRole("textbox", { name: "Events per day" });
    // The second app's screen first, so that it is cached when the operator comes back to it.
    await page.goto(t.url + `/dashboard/#/apps/${two.id}/settings`);
    await eventsPerDay.waitFor();
    const twosLimit = await eventsPerDay.inputValue();
    await page.goto(t.url + `/dashboard/#/apps/${one.id}/settings`);
    await page.getByRole("heading", { name: new RegExp(one.name), level: 1 }).waitFor();
    await eventsPerDay.fill("777");
    await page.goto(t.url + `/dashboard/#/apps/${two.id}/settings`);
    await page.getByRole("heading", { name: new RegExp(two.name), level: 1 }).waitFor();
    expect(await eventsPerDay.inputValue()).toBe(twosLimit);
    await page.screenshot({ path: dashboard.shot("settings-next-app-1280.png") });
    await context.close();
    expect(String((await t.admin.getApp({ appId: two.id })).app!.limits!.eventsPerDay)).toBe(twosLimit);
  });

  it("issues one operator token per click: the button waits for the answer", async () => {
    await t.admin.createOperator({ name: "olga", role: OperatorRole.VIEWER });
    const { context, page } = await signedIn();
    await page.goto(t.url + "/dashboard/#/operators");
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    let issued = 0;
    await page.route("**/IssueOperatorToken", async (route) => {
      issued++;
      await held;
      await route.continue();
    });
    const button = page.getByRole("button", { name: "Issue token for olga" });
    await button.click();
    await expect.poll(() => button.isDisabled(), { timeout: 15_000 }).toBe(true);
    await button.click({ force: true });
    release();
    await page.getByTestId("operator-token").waitFor();
    expect(issued).toBe(1);
    await context.close();
  });
});
