/**
 * The secret-link page over plain HTTP: GET never uses a link up, the form
 * POST and the JSON PUT use it up exactly once (also under 50 concurrent
 * uses), dead links all look the same, the CSRF token is checked, values are
 * validated, and the page's security headers.
 */
import { describe, expect, it } from "vitest";
import { useTestServer, type TestApp } from "../support/harness.ts";
import { tables } from "../support/tables.ts";

const t = useTestServer();

async function appWith(names: string[]): Promise<TestApp> {
  const app = await t.createApp();
  await t.admin.declareSecrets({ appId: app.id, names });
  return app;
}

async function newLink(app: TestApp, name: string): Promise<{ token: string; path: string; expiresAt: number }> {
  const res = await t.request("POST", `/v1/secrets/${name}/link`, { token: app.token });
  expect(res.status).toBe(200);
  const token = new URL(res.body.url).pathname.split("/").pop()!;
  return { token, path: `/secret-links/${token}`, expiresAt: res.body.expiresAt };
}

async function getPage(path: string): Promise<{ status: number; headers: Headers; html: string }> {
  const res = await fetch(t.url + path);
  return { status: res.status, headers: res.headers, html: await res.text() };
}

function csrfOf(html: string): string {
  const match = /name="csrf" value="([^"]+)"/.exec(html);
  expect(match).not.toBeNull();
  return match![1];
}

async function postForm(path: string, fields: Record<string, string>) {
  const res = await fetch(t.url + path, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams(fields).toString(),
  });
  return { status: res.status, headers: res.headers, html: await res.text() };
}

async function readValue(app: TestApp, name: string) {
  return (await t.request("GET", `/v1/secrets/${name}`, { token: app.token })).body;
}

function expectPageHeaders(headers: Headers): void {
  expect(headers.get("content-type")).toBe("text/html; charset=utf-8");
  expect(headers.get("cache-control")).toBe("no-store");
  expect(headers.get("referrer-policy")).toBe("no-referrer");
  const csp = headers.get("content-security-policy")!;
  expect(csp).toContain("default-src 'none'");
  expect(csp).toContain("frame-ancestors 'none'");
  expect(csp).toContain("form-action 'self'");
  expect(csp).not.toContain("unsafe-inline");
  expect(headers.get("x-frame-options")).toBe("DENY");
  expect(headers.get("x-content-type-options")).toBe("nosniff");
}

describe("GET /secret-links/:token", () => {
  it("shows the form with app name, secret name and expiry, and does not use the link up", async () => {
    const app = await appWith(["API_KEY"]);
    const link = await newLink(app, "API_KEY");
    for (let i = 0; i < 3; i++) {
      const page = await getPage(link.path);
      expect(page.status).toBe(200);
      expectPageHeaders(page.headers);
      expect(page.html).toContain(app.name);
      expect(page.html).toContain("API_KEY");
      expect(page.html).toContain(`datetime="${new Date(link.expiresAt).toISOString()}"`);
      // A multi-line field (a PEM key keeps its line breaks), masked, and no password input that would drop them.
      expect(page.html.match(/<textarea [^>]*name="value"/g)).toHaveLength(1);
      expect(page.html).not.toContain('type="password"');
      expect(page.html).toMatch(/<label for="value">/);
      expect(page.html).not.toMatch(/<script|src=|href=/i);
    }
    expect((await t.request("GET", "/v1/secrets", { token: app.token })).body.secrets[0].set).toBe(false);
    expect((await t.request("HEAD", link.path)).status).toBe(200);
    expect((await t.request("PUT", link.path, { body: { value: "after-gets" } })).status).toBe(200);
  });

  it("gives one and the same 404 page for unknown, malformed, used and expired links", async () => {
    const app = await appWith(["API_KEY"]);
    const used = await newLink(app, "API_KEY");
    expect((await t.request("PUT", used.path, { body: { value: "v1" } })).status).toBe(200);
    const expired = await newLink(app, "API_KEY");
    await tables(t.server.deps.db)
      .updateTable("secret_links")
      .set({ expires_at: new Date(Date.now() - 1) })
      .where("app_id", "=", app.id)
      .where("used_at", "is", null)
      .execute();
    const pages = await Promise.all(
      [
        used.path,
        expired.path,
        `/secret-links/${"A".repeat(43)}`,
        "/secret-links/short",
        `/secret-links/${"x".repeat(300)}`,
      ].map(getPage),
    );
    for (const page of pages) {
      expect(page.status).toBe(404);
      expectPageHeaders(page.headers);
      expect(page.html).toBe(pages[0].html);
      expect(page.html).not.toContain("v1");
    }
    expect((await t.request("PUT", expired.path, { body: { value: "late" } })).status).toBe(404);
    expect((await readValue(app, "API_KEY")).value).toBe("v1");
  });
});

describe("POST /secret-links/:token (the form)", () => {
  it("sets the value once, shows a confirmation without the value, then the link is dead", async () => {
    const app = await appWith(["API_KEY"]);
    const link = await newLink(app, "API_KEY");
    const csrf = csrfOf((await getPage(link.path)).html);
    const value = 's3cr3t <&> "quoted" ünïcode';
    const done = await postForm(link.path, { csrf, value });
    expect(done.status).toBe(200);
    expectPageHeaders(done.headers);
    expect(done.html).toContain("API_KEY");
    expect(done.html).toContain("version 1");
    expect(done.html).not.toContain("s3cr3t");
    expect(await readValue(app, "API_KEY")).toMatchObject({ value, version: 1 });
    const again = await postForm(link.path, { csrf, value: "second" });
    expect(again.status).toBe(404);
    expect((await getPage(link.path)).status).toBe(404);
    expect((await readValue(app, "API_KEY")).value).toBe(value);
  });

  it("refuses a missing or wrong CSRF token without using the link up", async () => {
    const app = await appWith(["API_KEY"]);
    const link = await newLink(app, "API_KEY");
    const other = await newLink(app, "API_KEY");
    const otherCsrf = csrfOf((await getPage(other.path)).html);
    const attempts: Record<string, string>[] = [
      { value: "v" },
      { value: "v", csrf: "forged" },
      { value: "v", csrf: otherCsrf },
    ];
    for (const fields of attempts) {
      const res = await postForm(link.path, fields);
      expect(res.status).toBe(400);
      expectPageHeaders(res.headers);
    }
    expect((await readValue(app, "API_KEY")).error.code).toBe("secret_not_set");
    expect((await getPage(link.path)).status).toBe(200);
  });

  it("shows the form again with an error for an empty or too large value, keeping the link", async () => {
    const app = await appWith(["API_KEY"]);
    const link = await newLink(app, "API_KEY");
    const csrf = csrfOf((await getPage(link.path)).html);
    const empty = await postForm(link.path, { csrf, value: "" });
    expect(empty.status).toBe(400);
    expect(empty.html).toContain('role="alert"');
    expect(empty.html).toContain('aria-invalid="true"');
    const big = await postForm(link.path, { csrf, value: "x".repeat(65_537) });
    expect(big.status).toBe(400);
    expect(big.html).not.toContain("xxxxxxxx");
    expect((await postForm(link.path, { csrf, value: "fine" })).status).toBe(200);
    expect((await readValue(app, "API_KEY")).value).toBe("fine");
  });
});

describe("PUT /secret-links/:token (scripts)", () => {
  it("sets the value with JSON { value } and answers without it", async () => {
    const app = await appWith(["API_KEY"]);
    await t.admin.setSecret({ appId: app.id, name: "API_KEY", value: "old" });
    const link = await newLink(app, "API_KEY");
    const res = await t.request("PUT", link.path, {
      body: { value: "-----BEGIN KEY-----\nline\n-----END KEY-----\n" },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("cache-control")).toBe("no-store");
    expect(res.body).toEqual({ name: "API_KEY", version: 2, setAt: expect.any(Number) });
    expect((await readValue(app, "API_KEY")).value).toBe("-----BEGIN KEY-----\nline\n-----END KEY-----\n");
    const again = await t.request("PUT", link.path, { body: { value: "again" } });
    expect(again.status).toBe(404);
    expect(again.body.error.code).toBe("not_found");
  });

  it("400 with the envelope for a bad body or value, keeping the link", async () => {
    const app = await appWith(["API_KEY"]);
    const link = await newLink(app, "API_KEY");
    for (const body of [
      "[1]",
      "{bad json",
      JSON.stringify({ value: 5 }),
      JSON.stringify({ value: "" }),
      JSON.stringify({ value: "é".repeat(40_000) }),
      JSON.stringify({}),
      '{"value":"a\\ud800b"}',
    ]) {
      const res = await t.request("PUT", link.path, { body });
      expect(res.status, body.slice(0, 20)).toBe(400);
      expect(res.body.error.code).toBe("invalid_argument");
    }
    expect((await t.request("PUT", link.path, { body: { value: "ok" } })).status).toBe(200);
  });
});

describe("a link and bytes that are not UTF-8", () => {
  it("refuses them with 400, keeping the link, instead of setting U+FFFD in their place", async () => {
    const app = await appWith(["API_KEY"]);
    const link = await newLink(app, "API_KEY");
    const csrf = csrfOf((await getPage(link.path)).html);
    // "pässword" as Latin-1: the form's percent-encoded bytes, and the JSON body's raw bytes.
    const form = await fetch(t.url + link.path, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: `csrf=${encodeURIComponent(csrf)}&value=p%E4ssword`,
    });
    expect(form.status).toBe(400);
    const put = await fetch(t.url + link.path, {
      method: "PUT",
      headers: { "content-type": "application/json" },
      body: Buffer.concat([Buffer.from('{"value":"p'), Buffer.from([0xe4]), Buffer.from('ssword"}')]),
    });
    expect(put.status).toBe(400);
    expect(await put.json()).toMatchObject({
      error: { code: "invalid_argument", message: expect.stringContaining("UTF-8") },
    });
    expect((await t.request("GET", "/v1/secrets", { token: app.token })).body.secrets[0].set).toBe(false);
    // The same word in UTF-8 sets it, through the link that was kept.
    expect((await postForm(link.path, { csrf, value: "pässword" })).status).toBe(200);
    expect((await readValue(app, "API_KEY")).value).toBe("pässword");
  });
});

describe("a stopped app's link", () => {
  it("still sets the value, so the owner can fix a credential before starting the app", async () => {
    const app = await appWith(["API_KEY"]);
    const link = await newLink(app, "API_KEY");
    await app.stop();
    expect((await getPage(link.path)).status).toBe(200);
    expect((await t.request("PUT", link.path, { body: { value: "while-stopped" } })).status).toBe(200);
    await app.start();
    expect((await readValue(app, "API_KEY")).value).toBe("while-stopped");
  });
});

describe("one link, 50 concurrent uses", () => {
  it("sets the value exactly once", async () => {
    const app = await appWith(["RACE"]);
    const link = await newLink(app, "RACE");
    const csrf = csrfOf((await getPage(link.path)).html);
    const attempts = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        i % 2 === 0
          ? t.request("PUT", link.path, { body: { value: `value-${i}` } }).then((r) => ({ i, status: r.status }))
          : postForm(link.path, { csrf, value: `value-${i}` }).then((r) => ({ i, status: r.status })),
      ),
    );
    const winners = attempts.filter((a) => a.status === 200);
    expect(winners).toHaveLength(1);
    expect(attempts.filter((a) => a.status === 404)).toHaveLength(49);
    const secret = await readValue(app, "RACE");
    expect(secret).toMatchObject({ value: `value-${winners[0].i}`, version: 1 });
  });
});
