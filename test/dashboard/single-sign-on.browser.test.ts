/**
 * Single sign-on for the dashboard, in a real Chromium against a real OpenID
 * provider (`oidc-provider`, run by this file on `localhost`, another site
 * than the dashboard on `127.0.0.1`): the sign-in screen offers it beside the
 * token; an admin signs in through the provider and acts as the operator it
 * is mapped to (the audit log names them); a viewer gets the viewer's role; an
 * expired session and a sign-out end the tab's access; a forged state, an
 * unknown identity and a call from another origin are refused. The session's
 * cookie is HttpOnly, SameSite=Strict, with an expiry, and only its hash is
 * stored. Screenshots of the sign-in screen and the refusal page go to
 * test-artifacts/dashboard/sso/.
 */
import crypto from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { BrowserContext, Page } from "playwright-core";
import { OperatorRole } from "../../gen/platform/admin/v1/admin_pb.js";
import type { OperatorSessionsTable } from "../../src/core/operators/session-store.ts";
import { startServer, useTestServer } from "../support/harness.ts";
import { useDashboardBrowser } from "../support/dashboard-browser.ts";
import { freePort, startOidcProvider, type TestProvider } from "../support/oidc-provider.ts";

const SESSION_MINUTES = 60;
let provider: TestProvider;
let secretDir: string;
let port: number;

beforeAll(async () => {
  port = await freePort();
  provider = await startOidcProvider(`http://127.0.0.1:${port}/dashboard/sso/callback`);
  secretDir = fs.mkdtempSync(path.join(os.tmpdir(), "pb-oidc-"));
  fs.writeFileSync(path.join(secretDir, "client-secret"), provider.clientSecret + "\n", { mode: 0o600 });
}, 60_000);
afterAll(async () => {
  await provider?.close();
  if (secretDir) fs.rmSync(secretDir, { recursive: true, force: true });
});

// The server starts after the provider (its beforeAll is registered second): it needs the issuer's URL.
const t = useTestServer(
  () => ({
    env: {
      PORT: String(port),
      PUBLIC_URL: `http://127.0.0.1:${port}`,
      OIDC_ISSUER: provider.issuer,
      OIDC_CLIENT_ID: provider.clientId,
      OIDC_CLIENT_SECRET_FILE: path.join(secretDir, "client-secret"),
      // alice by her verified e-mail, vera by her subject; mallory is nobody here.
      OIDC_OPERATORS: "alice@example.test=alice,sub:vera=vera",
      OIDC_SESSION_MINUTES: String(SESSION_MINUTES),
    },
  }),
  async (server) => {
    await server.admin.createOperator({ name: "alice", role: OperatorRole.ADMIN });
    await server.admin.createOperator({ name: "vera", role: OperatorRole.VIEWER });
  },
);
const b = useDashboardBrowser(t, "dashboard/sso");

const sessionsTable = () => t.server.deps.db.withTables<{ operator_sessions: OperatorSessionsTable }>();
const sha256 = (text: string) => crypto.createHash("sha256").update(text, "utf8").digest("hex");

async function newContext(options: { width?: number; height?: number; colorScheme?: "light" | "dark" } = {}) {
  const context = await b.browser.newContext({
    viewport: { width: options.width ?? 1280, height: options.height ?? 800 },
    colorScheme: options.colorScheme ?? "light",
  });
  context.setDefaultTimeout(30_000);
  // The provider's development form imports a web font; this machine has no other network.
  await context.route(/fonts\.googleapis\.com/, (route) => route.abort());
  return context;
}

/** Signs in at the provider's form as `login` (its subject; its e-mail is `<login>@example.test`). */
async function signInAtProvider(page: Page, login: string): Promise<void> {
  await page.goto(t.url + "/dashboard/");
  await page.getByRole("link", { name: "Sign in with single sign-on" }).click();
  await page.locator('input[name="login"]').fill(login);
  await page.locator('input[name="password"]').fill("any password");
  await page.getByRole("button", { name: "Sign-in" }).click();
}

async function sessionCookie(context: BrowserContext) {
  return (await context.cookies(t.url)).find((c) => c.name === "pb-session");
}

/** A Connect call from the page itself, with its cookie: what a signed-in tab can do. */
function callFromPage(page: Page, method: string, body: unknown) {
  return page.evaluate(
    async ([m, b]) => {
      const res = await fetch(`/platform.admin.v1.AdminService/${m}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(b),
      });
      return { status: res.status, body: (await res.json()) as { code?: string; name?: string } };
    },
    [method, body] as const,
  );
}

/** WhoAmI from outside the browser, with the session cookie `value` and the given Origin (or none). */
function whoAmIWithCookie(value: string, origin?: string) {
  return fetch(`${t.url}/platform.admin.v1.AdminService/WhoAmI`, {
    method: "POST",
    headers: { "content-type": "application/json", cookie: `pb-session=${value}`, ...(origin ? { origin } : {}) },
    body: "{}",
  });
}

describe("single sign-on", () => {
  let alice: { context: BrowserContext; page: Page };
  let vera: { context: BrowserContext; page: Page };

  afterAll(async () => {
    await alice?.context.close();
    await vera?.context.close();
  });

  it("the sign-in screen offers single sign-on beside the token", async () => {
    for (const [width, height, scheme] of [
      [1280, 800, "light"],
      [390, 844, "dark"],
    ] as const) {
      const context = await newContext({ width, height, colorScheme: scheme });
      const page = await context.newPage();
      await page.goto(t.url + "/dashboard/");
      const link = page.getByRole("link", { name: "Sign in with single sign-on" });
      await link.waitFor();
      expect(await link.getAttribute("href")).toBe("/dashboard/sso/login");
      // Token sign-in stays, for operators without an identity at the provider.
      await page.getByLabel("Admin token").waitFor();
      await page.screenshot({ path: b.shot(`sign-in-${width}-${scheme}.png`) });
      await context.close();
    }
  });

  it("an identity mapped to no operator gets a page saying so, and no session", async () => {
    const context = await newContext();
    const page = await context.newPage();
    const answered = page.waitForResponse((res) => new URL(res.url()).pathname === "/dashboard/sso/callback");
    await signInAtProvider(page, "mallory");
    expect((await answered).status()).toBe(403);
    await page.getByRole("heading", { name: "Not an operator of this platform" }).waitFor();
    expect(await page.locator("main").textContent()).toContain("mallory@example.test");
    await page.screenshot({ path: b.shot("unknown-identity-1280-light.png") });
    expect(await sessionCookie(context)).toBeUndefined();
    expect(await sessionsTable().selectFrom("operator_sessions").select("id").execute()).toHaveLength(0);
    await context.close();
  });

  it("a callback with a state this browser did not start is refused", async () => {
    // Another browser's real answer from the provider (here mallory's, refused as unknown: it signs nobody in).
    const other = await newContext();
    const otherPage = await other.newPage();
    const answered = otherPage.waitForRequest((req) => new URL(req.url()).pathname === "/dashboard/sso/callback");
    await signInAtProvider(otherPage, "mallory");
    const answer = new URL((await answered).url());
    expect(answer.searchParams.get("code")).toBeTruthy();
    await other.close();

    // This browser started its own sign-in, and is then sent that answer (a login CSRF): its state differs.
    const context = await newContext();
    const page = await context.newPage();
    await page.goto(t.url + "/dashboard/sso/login");
    await page.locator('input[name="login"]').waitFor();
    const res = await page.goto(answer.href);
    expect(res?.status()).toBe(400);
    await page.getByRole("heading", { name: "Sign-in refused" }).waitFor();
    expect(await page.locator("main").textContent()).toContain("forged or replayed");
    await page.screenshot({ path: b.shot("forged-state-1280-light.png") });
    expect(await sessionCookie(context)).toBeUndefined();
    // A made-up state, too; and the started flow was used up by the refused answer.
    await page.goto(t.url + "/dashboard/sso/login");
    await page.locator('input[name="login"]').waitFor();
    answer.searchParams.set("state", "forged-" + crypto.randomBytes(8).toString("hex"));
    expect((await page.goto(answer.href))?.status()).toBe(400);
    await page.getByRole("heading", { name: "Sign-in refused" }).waitFor();
    expect((await page.goto(answer.href))?.status()).toBe(400);
    await page.getByRole("heading", { name: "This sign-in was not started here" }).waitFor();
    expect(await sessionCookie(context)).toBeUndefined();
    expect(await sessionsTable().selectFrom("operator_sessions").select("id").execute()).toHaveLength(0);
    await context.close();
  });

  it("an admin signs in through the provider and acts as the operator mapped to them", async () => {
    const context = await newContext();
    const page = await context.newPage();
    alice = { context, page };
    await signInAtProvider(page, "alice");
    await page.getByRole("button", { name: "Sign out" }).waitFor();
    expect(new URL(page.url()).origin).toBe(t.url);

    const cookie = await sessionCookie(context);
    expect(cookie).toMatchObject({ httpOnly: true, sameSite: "Strict", path: "/", secure: false });
    // An expiry of OIDC_SESSION_MINUTES from the sign-in (a generous margin for a busy machine).
    const expiresInMinutes = (cookie!.expires * 1000 - Date.now()) / 60_000;
    expect(expiresInMinutes).toBeGreaterThan(SESSION_MINUTES - 5);
    expect(expiresInMinutes).toBeLessThanOrEqual(SESSION_MINUTES);
    // The page's script cannot read it.
    expect(await page.evaluate(() => document.cookie)).not.toContain("pb-session");
    // Only the cookie's hash is stored.
    const rows = await sessionsTable().selectFrom("operator_sessions").selectAll().execute();
    expect(rows).toHaveLength(1);
    expect(rows[0].session_hash).toBe(sha256(cookie!.value));
    expect(JSON.stringify(rows)).not.toContain(cookie!.value);
    expect(rows[0].email).toBe("alice@example.test");

    // The page learns that it is signed in from the server, which reads the cookie it cannot.
    expect(await page.evaluate(async () => (await fetch("/dashboard/sso/status")).json())).toEqual({
      enabled: true,
      signedIn: true,
    });
    // The session is this tab's credential: no token is kept in the page.
    expect(await page.evaluate(() => JSON.stringify(sessionStorage))).not.toContain("pb");
    const me = await callFromPage(page, "WhoAmI", {});
    expect(me.status).toBe(200);
    expect(me.body).toMatchObject({ operator: { name: "alice", role: "OPERATOR_ROLE_ADMIN" } });

    // An admin's write, through the screen, recorded under alice's name.
    await page.goto(t.url + "/dashboard/#/apps");
    await page.getByRole("heading", { name: "Apps", level: 1 }).waitFor();
    const created = await callFromPage(page, "CreateApp", { name: "made-by-alice" });
    expect(created.status).toBe(200);
    const audit = await t.admin.listAuditEntries({});
    const entry = audit.entries.find((e) => e.action === "app.create" && e.appName === "made-by-alice");
    expect(entry).toMatchObject({ operatorName: "alice", outcome: "ok" });
    // The sign-in itself is in the audit log, under the operator it opened.
    const signIns = audit.entries.filter((e) => e.action === "operator.sign_in" && e.operatorName === "alice");
    expect(signIns).toHaveLength(1);
    expect(signIns[0]).toMatchObject({ outcome: "ok" });
  });

  it("a call with the session cookie is taken only from the dashboard's own origin", async () => {
    const value = (await sessionCookie(alice.context))!.value;
    expect((await whoAmIWithCookie(value, t.url)).status).toBe(200);
    const foreign = await whoAmIWithCookie(value, "http://localhost:1");
    expect(foreign.status).toBe(403);
    expect(((await foreign.json()) as { code: string }).code).toBe("permission_denied");
    expect((await whoAmIWithCookie(value)).status).toBe(403);
    // Nor can another site sign the browser out.
    const logout = await fetch(`${t.url}/dashboard/sso/logout`, {
      method: "POST",
      headers: { cookie: `pb-session=${value}`, origin: "http://localhost:1" },
    });
    expect(logout.status).toBe(403);
    expect((await whoAmIWithCookie(value, t.url)).status).toBe(200);
    // A made-up session is nobody.
    expect((await whoAmIWithCookie(crypto.randomBytes(32).toString("base64url"), t.url)).status).toBe(401);
  });

  it("a viewer signed in through the provider gets the viewer's role", async () => {
    const context = await newContext();
    const page = await context.newPage();
    vera = { context, page };
    await signInAtProvider(page, "vera");
    await page.getByRole("button", { name: "Sign out" }).waitFor();
    await page.goto(t.url + "/dashboard/#/apps");
    await page.getByRole("heading", { name: "Apps", level: 1 }).waitFor();
    await page.getByText("made-by-alice").waitFor();
    // No write control is shown, and the server refuses the write anyway.
    expect(await page.getByRole("button", { name: /create/i }).count()).toBe(0);
    const refused = await callFromPage(page, "CreateApp", { name: "made-by-vera" });
    expect(refused.status).toBe(403);
    expect(refused.body.code).toBe("permission_denied");
    const audit = await t.admin.listAuditEntries({});
    expect(audit.entries.find((e) => e.action === "app.create" && e.operatorName === "vera")).toMatchObject({
      outcome: "denied",
    });
    expect((await t.admin.listApps({})).apps.map((a) => a.name)).not.toContain("made-by-vera");
  });

  it("a session ends once its identity is no longer mapped to its operator", async () => {
    const value = (await sessionCookie(vera.context))!.value;
    // Another instance on the same database, started after vera was taken out of OIDC_OPERATORS.
    const other = await startServer({
      database: t.database,
      ...(t.database.url ? {} : { openDatabase: t.server.deps.database }),
      env: {
        PUBLIC_URL: `http://127.0.0.1:${port}`,
        OIDC_ISSUER: provider.issuer,
        OIDC_CLIENT_ID: provider.clientId,
        OIDC_OPERATORS: "alice@example.test=alice",
      },
    });
    try {
      const call = (url: string) =>
        fetch(`${url}/platform.admin.v1.AdminService/WhoAmI`, {
          method: "POST",
          headers: { "content-type": "application/json", cookie: `pb-session=${value}`, origin: t.url },
          body: "{}",
        });
      expect((await call(other.url)).status).toBe(401);
      // The instance that still maps vera keeps her session.
      expect((await call(t.url)).status).toBe(200);
    } finally {
      await other.close();
    }
  });

  it("an expired session signs the tab out with a message", async () => {
    const value = (await sessionCookie(vera.context))!.value;
    await sessionsTable()
      .updateTable("operator_sessions")
      .set({ expires_at: new Date(Date.now() - 60_000) })
      .where("session_hash", "=", sha256(value))
      .execute();
    // The screen's next refresh is refused; the tab shows the sign-in screen and says why.
    await vera.page.getByText("Your session expired or was signed out. Sign in again.").waitFor();
    await vera.page.getByRole("link", { name: "Sign in with single sign-on" }).waitFor();
    await vera.page.screenshot({ path: b.shot("session-expired-1280-light.png") });
    expect((await whoAmIWithCookie(value, t.url)).status).toBe(401);
    // The housekeeping sweep removes it.
    await t.server.housekeeping.runAll();
    const left = await sessionsTable().selectFrom("operator_sessions").select("session_hash").execute();
    expect(left.map((r) => r.session_hash)).not.toContain(sha256(value));
  });

  it("signing out ends the session on the server", async () => {
    const value = (await sessionCookie(alice.context))!.value;
    await alice.page.getByRole("button", { name: "Sign out" }).click();
    await alice.page.getByText("Signed out.").waitFor();
    expect(await sessionCookie(alice.context)).toBeUndefined();
    const signOuts = (await t.admin.listAuditEntries({ action: "operator.sign_out" })).entries;
    expect(signOuts.map((e) => [e.operatorName, e.outcome])).toEqual([["alice", "ok"]]);
    expect(
      await sessionsTable()
        .selectFrom("operator_sessions")
        .select("id")
        .where("session_hash", "=", sha256(value))
        .execute(),
    ).toHaveLength(0);
    // The old cookie, replayed, is nobody.
    expect((await whoAmIWithCookie(value, t.url)).status).toBe(401);
    expect(await alice.page.evaluate(async () => (await fetch("/dashboard/sso/status")).json())).toEqual({
      enabled: true,
      signedIn: false,
    });
    // A reload shows the sign-in screen again, not the dashboard.
    await alice.page.reload();
    await alice.page.getByRole("link", { name: "Sign in with single sign-on" }).waitFor();
    expect(await alice.page.getByRole("button", { name: "Sign out" }).count()).toBe(0);
  });

  it("signing in again in the same browser replaces its session", async () => {
    const aliceSessions = async () =>
      (
        await sessionsTable()
          .selectFrom("operator_sessions")
          .select("session_hash")
          .where("email", "=", "alice@example.test")
          .execute()
      ).map((r) => r.session_hash);
    // The provider still knows this browser as alice (its own session outlives the dashboard's sign-out):
    // the round trip needs no form.
    await alice.page.getByRole("link", { name: "Sign in with single sign-on" }).click();
    await alice.page.getByRole("button", { name: "Sign out" }).waitFor();
    const first = (await sessionCookie(alice.context))!.value;
    await alice.page.goto(t.url + "/dashboard/sso/login");
    await alice.page.getByRole("button", { name: "Sign out" }).waitFor();
    const second = (await sessionCookie(alice.context))!.value;
    expect(second).not.toBe(first);
    expect(await aliceSessions()).toEqual([sha256(second)]);
    expect((await whoAmIWithCookie(first, t.url)).status).toBe(401);
  });
});
