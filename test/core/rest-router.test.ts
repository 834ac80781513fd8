/**
 * The REST route tables as data, taken from the facilities the server serves:
 * every `/v1` endpoint of docs/api.md is in exactly one table, every route of a table is
 * served, and every route that reads a JSON body or a path carries the zod
 * schema for it (what an OpenAPI document would be generated from).
 */
import { describe, expect, it } from "vitest";
import type { AnyRestRoute } from "../../src/core/http/rest-router.ts";
import { endpoints } from "../support/endpoints.ts";
import { useTestServer } from "../support/harness.ts";

const t = useTestServer();
/** The route tables of every facility the server serves: a facility added later is walked too. */
const tables = () =>
  t.server.facilities.flatMap((f) => (f.routes ? [{ name: f.service.typeName, routes: f.routes }] : []));
const allRoutes = (): AnyRestRoute[] => tables().flatMap((table) => [...table.routes]);
const key = (r: { method: string; url: string }) => `${r.method} ${r.url}`;
/** `/v1/queues/jobs` matches `/v1/queues/:queue`. */
const matches = (url: string, path: string) => new RegExp(`^${url.replace(/:[^/]+/g, "[^/]+")}$`).test(path);

describe("REST route tables", () => {
  it("hold every /v1 endpoint exactly once", () => {
    const all = allRoutes();
    expect(tables().map((table) => table.name)).toEqual(
      expect.arrayContaining([
        "platform.analytics.v1.AnalyticsService",
        "platform.mail.v1.MailService",
        "platform.inference.v1.InferenceService",
        "platform.queues.v1.QueueService",
        "platform.secrets.v1.SecretsService",
      ]),
    );
    expect(new Set(all.map(key)).size).toBe(all.length);
    for (const e of endpoints) {
      // The static `_ack` is preferred by the router over `/:queue`, as here.
      const found = all.filter((r) => r.method === e.method && matches(r.url, e.path));
      const exact = found.find((r) => r.url === e.path) ?? found[0];
      expect(exact, `${e.method} ${e.path}`).toBeDefined();
    }
  });

  it("are each served by the server", () => {
    for (const r of allRoutes()) expect(t.server.fastify.hasRoute({ method: r.method, url: r.url }), key(r)).toBe(true);
  });

  it("carry a zod schema for every path parameter and for the body of every POST that reads one", () => {
    for (const r of allRoutes()) {
      if (r.url.includes(":")) expect(r.params, key(r)).toBeDefined();
      // Creating a secret link reads no body: its only input is the path.
      if (r.method === "POST" && !r.url.endsWith("/link")) expect(r.body, key(r)).toBeDefined();
      for (const schema of [r.body, r.params, r.query])
        if (schema) expect(typeof schema.safeParse, key(r)).toBe("function");
    }
  });

  it("name the RPC of the service that implements them", () => {
    for (const r of allRoutes()) {
      expect(r.rpc.parent.typeName, key(r)).toMatch(/^platform\.\w+\.v1\.\w+Service$/);
      expect(r.rpc.methodKind, key(r)).toBe("unary");
    }
  });
});
