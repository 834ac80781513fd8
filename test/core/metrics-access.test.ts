/**
 * Who may read `/metrics` (src/platform-server.ts): open on the public port by
 * default; with METRICS_TOKEN only with `Authorization: Bearer <token>`; with
 * METRICS_PORT only on that port (the public port answers 404). And the
 * database pool's saturation gauges, on PostgreSQL.
 */
import { describe, expect, it } from "vitest";
import { backend, useTestServer } from "../support/harness.ts";

const TOKEN = "metrics-token-" + "x".repeat(16);

describe("METRICS_TOKEN", () => {
  const t = useTestServer({ env: { METRICS_TOKEN: TOKEN } });

  it("refuses /metrics without the bearer token (401, the envelope, WWW-Authenticate) and serves it with it", async () => {
    for (const authorization of [undefined, "Bearer wrong-token-wrong-token", `Basic ${TOKEN}`, TOKEN]) {
      const res = await fetch(`${t.url}/metrics`, { headers: authorization ? { authorization } : {} });
      expect(res.status).toBe(401);
      expect(res.headers.get("www-authenticate")).toBe("Bearer");
      expect(await res.json()).toMatchObject({ error: { code: "unauthenticated" } });
    }
    const res = await fetch(`${t.url}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } });
    expect(res.status).toBe(200);
    expect(await res.text()).toContain("http_requests_total");
  });
});

describe("METRICS_PORT", () => {
  const t = useTestServer({ env: { METRICS_PORT: "0", METRICS_TOKEN: TOKEN } });

  it("serves /metrics on its own port only (with the token), and nothing else there", async () => {
    expect((await fetch(`${t.url}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } })).status).toBe(404);
    const metricsUrl = t.server.metricsUrl!;
    expect(metricsUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(metricsUrl).not.toBe(t.url);

    expect((await fetch(`${metricsUrl}/metrics`)).status).toBe(401);
    const res = await fetch(`${metricsUrl}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toContain("text/plain");
    const text = await res.text();
    expect(text).toContain("http_requests_total");

    // The pool's saturation: connections busy and idle, requests waiting, and the most it opens, per pool.
    if (backend === "postgres") {
      expect(text).toMatch(/^database_pool_connections\{pool="main",state="busy"\} \d+$/m);
      expect(text).toMatch(/^database_pool_connections\{pool="main",state="idle"\} \d+$/m);
      expect(text).toMatch(/^database_pool_waiting_requests\{pool="main"\} 0$/m);
      expect(text).toMatch(/^database_pool_max_connections\{pool="main"\} 20$/m);
    } else {
      // PGlite is in the process: no pool to saturate.
      expect(text).not.toMatch(/^database_pool_connections\{/m);
    }

    for (const [method, pathname] of [
      ["GET", "/"],
      ["GET", "/health"],
      ["POST", "/metrics"],
    ]) {
      const other = await fetch(`${metricsUrl}${pathname}`, { method, headers: { authorization: `Bearer ${TOKEN}` } });
      expect(other.status).toBe(404);
      expect(await other.json()).toMatchObject({ error: { code: "not_found" } });
    }
  });
});
