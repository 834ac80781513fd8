/**
 * The HTML pages' security headers come from helmet, each page with its own
 * Content-Security-Policy (src/core/http/security-headers.ts): the secret-link
 * page, the dashboard and the API reference differ in their policies and share
 * the rest (frames denied, no sniffing, no referrer, no HSTS from the service);
 * the JSON API carries none of it.
 */
import { describe, expect, it } from "vitest";
import { useTestServer } from "../support/harness.ts";

const t = useTestServer();

async function headersOf(path: string): Promise<Headers> {
  const res = await fetch(t.url + path);
  await res.arrayBuffer();
  return res.headers;
}

describe("security headers, per page", () => {
  it("each HTML page has its own policy and the shared headers; the API has none", async () => {
    const link = await headersOf("/secret-links/pbl_unknown");
    const dashboard = await headersOf("/dashboard/");
    const docs = await headersOf("/docs/");
    const csp = (h: Headers) => h.get("content-security-policy") ?? "";

    expect(csp(link)).toMatch(/style-src 'sha256-[^']+'/);
    expect(csp(link)).toContain("form-action 'self'");
    expect(csp(dashboard)).toContain("script-src 'self'");
    expect(csp(dashboard)).toContain("connect-src 'self'");
    expect(csp(docs)).toMatch(/script-src 'self'( 'sha256-[^']+')+/);
    expect(new Set([csp(link), csp(dashboard), csp(docs)]).size).toBe(3);
    for (const h of [link, dashboard, docs]) {
      expect(csp(h)).toContain("frame-ancestors 'none'");
      expect(h.get("x-frame-options")).toBe("DENY");
      expect(h.get("x-content-type-options")).toBe("nosniff");
      expect(h.get("referrer-policy")).toBe("no-referrer");
      expect(h.get("strict-transport-security")).toBeNull();
    }

    const api = await headersOf("/v1/queues");
    expect(api.get("content-security-policy")).toBeNull();
    expect(api.get("x-frame-options")).toBeNull();
  });
});
