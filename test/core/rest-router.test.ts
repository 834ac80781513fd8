/**
 * The REST route tables as data: every SPEC.md endpoint is in exactly one
 * table, and every route that reads a JSON body or a path carries the zod
 * schema for it (what an OpenAPI document would be generated from).
 */
import { describe, expect, it } from "vitest";
import type { AnyRestRoute } from "../../src/core/http/rest-router.ts";
import { analyticsRoutes } from "../../src/analytics/analytics-routes.ts";
import { inferenceRoutes } from "../../src/inference/inference-routes.ts";
import { mailRoutes } from "../../src/mail/mail-routes.ts";
import { metaRoutes } from "../../src/meta/meta-routes.ts";
import { queuesRoutes } from "../../src/queues/queues-routes.ts";
import { secretsRoutes } from "../../src/secrets/secrets-routes.ts";
import { endpoints } from "../support/endpoints.ts";

const all: AnyRestRoute[] = [
  ...analyticsRoutes,
  ...inferenceRoutes,
  ...mailRoutes,
  ...metaRoutes,
  ...queuesRoutes,
  ...secretsRoutes,
];
const key = (r: { method: string; url: string }) => `${r.method} ${r.url}`;
/** `/v1/queues/jobs` matches `/v1/queues/:queue`. */
const matches = (url: string, path: string) => new RegExp(`^${url.replace(/:[^/]+/g, "[^/]+")}$`).test(path);

describe("REST route tables", () => {
  it("hold every SPEC.md endpoint exactly once", () => {
    expect(new Set(all.map(key)).size).toBe(all.length);
    for (const e of endpoints) {
      // The static `_ack` is preferred by the router over `/:queue`, as here.
      const found = all.filter((r) => r.method === e.method && matches(r.url, e.path));
      const exact = found.find((r) => r.url === e.path) ?? found[0];
      expect(exact, `${e.method} ${e.path}`).toBeDefined();
    }
  });

  it("carry a zod schema for every path parameter and for the body of every POST that reads one", () => {
    for (const r of all) {
      if (r.url.includes(":")) expect(r.params, key(r)).toBeDefined();
      // Creating a secret link reads no body: its only input is the path.
      if (r.method === "POST" && !r.url.endsWith("/link")) expect(r.body, key(r)).toBeDefined();
      for (const schema of [r.body, r.params, r.query])
        if (schema) expect(typeof schema.safeParse, key(r)).toBe("function");
    }
  });

  it("name the RPC of the service that implements them", () => {
    for (const r of all) {
      expect(r.rpc.parent.typeName, key(r)).toMatch(/^platform\.\w+\.v1\.\w+Service$/);
      expect(r.rpc.methodKind, key(r)).toBe("unary");
    }
  });
});
