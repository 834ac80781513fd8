import { describe, expect, it } from "vitest";
import { endpoints } from "../support/endpoints.ts";
import { useTestApp, useTestServer } from "../support/harness.ts";
import { hashToken } from "../../src/core/auth.ts";
import { tables } from "../support/tables.ts";

const t = useTestServer();
const running = useTestApp(t);
const stopped = useTestApp(t, async (stopped) => {
  await stopped.stop();
});

describe("auth rules of docs/api.md#authentication, for every endpoint", () => {
  for (const e of endpoints) {
    const call = (token?: string, headers?: Record<string, string>) =>
      t.request(e.method, e.path, { token, body: e.body, headers });

    it(`${e.method} ${e.path}: no token is 401 with the envelope`, async () => {
      const res = await call();
      expect(res.status).toBe(401);
      expect(res.body.error.code).toBe("unauthenticated");
      expect(typeof res.body.error.message).toBe("string");
      expect(res.headers.get("x-request-id")).toBeTruthy();
    });

    it(`${e.method} ${e.path}: an unknown, malformed or admin token is 401`, async () => {
      for (const token of ["pbt_" + "A".repeat(43), "garbage", t.adminToken]) {
        const res = await call(token);
        expect(res.status, token).toBe(401);
      }
      const basic = await call(undefined, { authorization: "Basic dXNlcjpwYXNz" });
      expect(basic.status).toBe(401);
    });

    it(`${e.method} ${e.path}: a stopped app gets ${e.stoppedGets403 ? "403 app_stopped" : "no 403"}`, async () => {
      const res = await call(stopped.token);
      if (e.stoppedGets403) {
        expect(res.status).toBe(403);
        expect(res.body.error.code).toBe("app_stopped");
      } else {
        expect(res.status).not.toBe(401);
        expect(res.status).not.toBe(403);
        expect(res.status).not.toBe(404 === res.status && res.body?.error?.message?.startsWith("no route") ? 404 : -1);
      }
    });

    it(`${e.method} ${e.path}: a running app's token is accepted`, async () => {
      const res = await call(running.token);
      expect([401, 403]).not.toContain(res.status);
      expect(res.body?.error?.message ?? "").not.toMatch(/^no route/);
    });
  }
});

describe("tokens", () => {
  it("are stored only as SHA-256 hashes", async () => {
    const app = await t.createApp();
    const rows = await tables(t.server.deps.db).selectFrom("app_tokens").selectAll().execute();
    const dump = JSON.stringify(rows);
    expect(dump).not.toContain(app.token);
    expect(rows.map((r) => r.token_hash)).toContain(hashToken(app.token));
    expect(app.token).toMatch(/^pbt_[A-Za-z0-9_-]{43,}$/);
  });

  it("stop working when revoked", async () => {
    const app = await t.createApp();
    const { tokenId, token } = await t.admin.issueToken({ appId: app.id, label: "second" });
    expect((await t.request("GET", "/v1/analytics/types", { token })).status).not.toBe(401);
    await t.admin.revokeToken({ tokenId });
    expect((await t.request("GET", "/v1/analytics/types", { token })).status).toBe(401);
    expect((await t.request("GET", "/v1/analytics/types", { token: app.token })).status).not.toBe(401);
  });

  it("concurrent requests whose lookups share one query each get their own token's answer", async () => {
    const other = await t.createApp();
    const calls = [
      running.token,
      other.token,
      stopped.token,
      "pbt_" + "B".repeat(43),
      running.token,
      other.token,
    ].flatMap((token) =>
      Array.from({ length: 5 }, () => t.request("POST", "/v1/queues/_ack", { token, body: { receipt: "nope" } })),
    );
    const statuses = (await Promise.all(calls)).map((r) => r.status);
    // 400: authenticated, then the malformed receipt; 403: the stopped app; 401: the unknown token.
    expect(statuses).toEqual([400, 400, 403, 401, 400, 400].flatMap((s) => Array(5).fill(s)));
  });

  it("a service token cannot call AdminService", async () => {
    const res = await t.request("POST", "/platform.admin.v1.AdminService/ListApps", { token: running.token, body: {} });
    expect(res.status).toBe(401);
    expect(res.body.code).toBe("unauthenticated");
  });
});
