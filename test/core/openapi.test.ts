/**
 * The OpenAPI document against the real server: it is a valid OpenAPI 3.1
 * document (a real validator), it describes every route the server registers
 * (walked from fastify's own route tree), and real responses, successes and
 * errors, conform to the schema the document gives for their status.
 */
import { compileErrors, dereference, validate } from "@readme/openapi-parser";
import { Ajv2020, type ValidateFunction } from "ajv/dist/2020.js";
import { beforeAll, describe, expect, it } from "vitest";
import { useTestApp, useTestServer, type JsonResponse } from "../support/harness.ts";

/* eslint-disable @typescript-eslint/no-explicit-any -- the document is walked as plain JSON */

const t = useTestServer();
const app = useTestApp(t);
let doc: any;
let resolved: any;

beforeAll(async () => {
  const res = await fetch(t.url + "/openapi.json");
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toMatch(/^application\/json/);
  doc = await res.json();
  resolved = await dereference(structuredClone(doc));
});

/** Every `METHOD /path` in fastify's route tree (`printRoutes`), paths joined from the tree's indentation. */
function registeredRoutes(tree: string): { method: string; path: string }[] {
  const out: { method: string; path: string }[] = [];
  const stack: string[] = [];
  for (const line of tree.split("\n")) {
    const m = /^([│ ]*)[├└]── (\S+)(?: \(([^)]*)\))?/.exec(line);
    if (!m) continue;
    const depth = m[1].length / 4;
    stack.length = depth;
    const path = (stack[depth - 1] ?? "") + m[2];
    stack[depth] = path;
    for (const method of (m[3] ?? "").split(", ").filter(Boolean)) out.push({ method, path });
  }
  return out;
}

/** Routes that are not the REST API: Connect/gRPC, metrics, the secret-link pages, the document and its page. */
/** The API the document describes: not Connect paths, operations endpoints (metrics, readiness), pages or the document itself. */
function isRestApi(path: string): boolean {
  return (
    !/^\/[a-z]+(\.[a-z0-9]+)+\.[A-Za-z]+\//.test(path) &&
    path !== "/metrics" &&
    path !== "/ready" &&
    !path.startsWith("/dashboard") &&
    !path.startsWith("/secret-links/") &&
    !path.startsWith("/docs") &&
    path !== "/openapi.json"
  );
}

const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false });
const compiled = new Map<string, ValidateFunction>();

/** Checks `res` against the document's response of `method path` for its status. */
function expectConforms(method: string, path: string, res: JsonResponse): void {
  const operation = resolved.paths[path]?.[method.toLowerCase()];
  expect(operation, `${method} ${path} is documented`).toBeDefined();
  const documented = operation.responses[String(res.status)];
  expect(documented, `${method} ${path} documents status ${res.status} (${JSON.stringify(res.body)})`).toBeDefined();
  const key = `${method} ${path} ${res.status}`;
  let check = compiled.get(key);
  if (!check) {
    check = ajv.compile(documented.content["application/json"].schema);
    compiled.set(key, check);
  }
  expect(check(res.body), `${key}: ${ajv.errorsText(check.errors)} in ${JSON.stringify(res.body)}`).toBe(true);
  if (res.status >= 400) {
    expect(res.headers.get("x-request-id")).toBeTruthy();
    if (res.status === 429 || res.status === 503) expect(res.headers.get("retry-after")).toMatch(/^\d+$/);
  }
}

describe("GET /openapi.json", () => {
  it("is a valid OpenAPI 3.1 document", async () => {
    expect(doc.openapi).toBe("3.1.0");
    const result = await validate(structuredClone(doc));
    expect(result.valid, compileErrors(result)).toBe(true);
  });

  it("describes every REST route the server registers, and nothing it does not", () => {
    const routes = registeredRoutes(t.server.fastify.printRoutes({ commonPrefix: false })).filter(
      (r) => isRestApi(r.path) && r.method !== "HEAD",
    );
    const served = new Set(routes.map((r) => `${r.method} ${r.path.replace(/:([A-Za-z0-9_]+)/g, "{$1}")}`));
    // The walk found the API (a broken walk would pass vacuously otherwise).
    expect(served).toContain("POST /v1/queues/{queue}/consume");
    expect(served).toContain("POST /v1/analytics/funnel");
    expect(served).toContain("GET /health");
    expect(served).toContain("POST /v1/queues/{queue}/purge");
    expect(served).toContain("GET /v1/queues/{queue}/messages/{id}");
    expect(served).toContain("PUT /v1/queues/{queue}/schedules/{name}");
    expect(served.size).toBe(32);
    const documented = new Set(
      Object.entries(doc.paths as Record<string, Record<string, unknown>>).flatMap(([path, ops]) =>
        Object.keys(ops).map((m) => `${m.toUpperCase()} ${path}`),
      ),
    );
    expect([...documented].sort()).toEqual([...served].sort());
  });

  it("carries the request fields of the zod schemas, the documented extensions, the bearer scheme and the headers", () => {
    const body = (path: string) => doc.paths[path].post.requestBody.content["application/json"].schema;
    expect(Object.keys(body("/v1/queues/{queue}").properties)).toEqual([
      "payload",
      "delaySeconds",
      "ttlSeconds",
      "dedupKey",
      "priority",
      "groupKey",
    ]);
    expect(body("/v1/queues/{queue}").properties.groupKey.description).toContain("ordered group");
    expect(body("/v1/queues/{queue}").required).toEqual(["payload"]);
    expect(Object.keys(body("/v1/queues/{queue}/consume").properties)).toEqual(["waitSeconds", "leaseSeconds", "max"]);
    expect(Object.keys(body("/v1/analytics/query").properties).sort()).toEqual([
      "aggregate",
      "groupBy",
      "interval",
      "limit",
      "of",
      "since",
      "timezone",
      "type",
      "until",
      "where",
    ]);
    expect(body("/v1/analytics/query").properties.interval.anyOf[0].enum).toEqual(["hour", "day", "week", "month"]);
    expect(Object.keys(body("/v1/mail/send").properties)).toEqual(["to", "subject", "text"]);
    expect(Object.keys(body("/v1/inference/generate").properties)).toEqual([
      "model",
      "prompt",
      "messages",
      "maxTokens",
      "temperature",
    ]);
    expect(doc.paths["/v1/secrets/{name}"].get.parameters).toEqual([
      { name: "name", in: "path", required: true, schema: { type: "string" } },
    ]);

    expect(doc.components.securitySchemes.serviceToken).toMatchObject({ type: "http", scheme: "bearer" });
    expect(doc.paths["/health"].get.security).toEqual([]);
    expect(doc.paths["/v1/queues"].get.security).toEqual([{ serviceToken: [] }]);
    const put = doc.paths["/v1/queues/{queue}"].post;
    expect(put.responses["429"].headers["Retry-After"]).toBeDefined();
    expect(put.responses["503"].headers["Retry-After"]).toBeDefined();
    expect(put.responses["200"].headers["x-request-id"]).toBeDefined();
    expect(put.requestBody.content["application/json"].example).toBeDefined();
  });

  it("lists every status and error code of docs/api.md per operation", () => {
    const codes = (path: string, method: string, status: number): string[] =>
      doc.paths[path][method].responses[String(status)]?.content["application/json"].schema.properties.error.properties
        .code.enum ?? [];
    expect(codes("/v1/queues/{queue}", "post", 403).sort()).toEqual(["app_stopped", "permission_denied"]);
    expect(codes("/v1/queues/{queue}", "post", 429)).toEqual(["queue_full", "rate_limited"]);
    expect(codes("/v1/secrets/{name}", "get", 404)).toEqual(["not_found"]);
    expect(codes("/v1/secrets/{name}", "get", 409)).toEqual(["secret_not_set"]);
    expect(codes("/v1/secrets/{name}/link", "post", 429)).toEqual(["too_many_links", "rate_limited"]);
    expect(codes("/v1/analytics/events", "post", 501)).toEqual(["not_configured"]);
    expect(codes("/v1/mail/send", "post", 502)).toEqual(["upstream_error"]);
    expect(codes("/v1/inference/generate", "post", 429)).toEqual(["quota_exceeded", "rate_limited"]);
    expect(codes("/v1/secrets", "get", 429)).toEqual(["rate_limited"]);
    expect(doc.paths["/v1/secrets"].get.responses["429"].headers.RateLimit).toBeDefined();
    expect(doc.paths["/v1/secrets"].get.responses["200"].headers["RateLimit-Policy"]).toBeDefined();
    expect(doc.paths["/health"].get.responses["200"].headers.RateLimit).toBeUndefined();
    expect(codes("/v1/mail/send", "post", 413)).toEqual(["payload_too_large"]);
    for (const [path, ops] of Object.entries(doc.paths as Record<string, Record<string, any>>)) {
      for (const [method, op] of Object.entries(ops)) {
        expect(op.responses["200"].content["application/json"].schema, `${method} ${path} 200 schema`).toBeDefined();
        expect(op.responses["200"].content["application/json"].example, `${method} ${path} example`).toBeDefined();
        expect(op.responses["500"], `${method} ${path} 500`).toBeDefined();
        if (path.startsWith("/v1/")) {
          expect(codes(path, method, 401), `${method} ${path} 401`).toEqual(["unauthenticated"]);
          expect(codes(path, method, 503), `${method} ${path} 503`).toEqual(["unavailable"]);
        }
      }
    }
  });

  it("documents examples that conform to its own schemas", () => {
    for (const [path, ops] of Object.entries(resolved.paths as Record<string, Record<string, any>>)) {
      for (const [method, op] of Object.entries(ops)) {
        const ok = op.responses["200"].content["application/json"];
        const check = ajv.compile(ok.schema);
        expect(check(ok.example), `${method} ${path}: ${ajv.errorsText(check.errors)}`).toBe(true);
        const req = op.requestBody?.content["application/json"];
        if (req?.example !== undefined) {
          const checkReq = ajv.compile(req.schema);
          expect(checkReq(req.example), `${method} ${path} request: ${ajv.errorsText(checkReq.errors)}`).toBe(true);
        }
      }
    }
  });
});

describe("real responses conform to the document", () => {
  it("successes and errors of every operation", async () => {
    const token = app.token;
    const call = async (
      method: string,
      path: string,
      url: string,
      options: { body?: unknown; token?: string } = {},
    ) => {
      const res = await t.request(method, url, { token: options.token, body: options.body });
      expectConforms(method, path, res);
      return res;
    };

    // Meta.
    expect((await call("GET", "/health", "/health")).status).toBe(200);
    expect((await call("GET", "/version", "/version")).status).toBe(200);

    // Queues: put, list, consume (a message and then none), ack; bad input, no token, the events queue.
    expect(
      (
        await call("POST", "/v1/queues/{queue}", "/v1/queues/jobs", {
          token,
          body: { payload: { n: 1 }, ttlSeconds: 600 },
        })
      ).status,
    ).toBe(200);
    expect((await call("GET", "/v1/queues", "/v1/queues", { token })).body.queues).toHaveLength(1);
    const consumed = await call("POST", "/v1/queues/{queue}/consume", "/v1/queues/jobs/consume", {
      token,
      body: { waitSeconds: 0, leaseSeconds: 30 },
    });
    expect(consumed.body.message.payload).toEqual({ n: 1 });
    expect(
      (await call("POST", "/v1/queues/{queue}/consume", "/v1/queues/jobs/consume", { token, body: { waitSeconds: 0 } }))
        .body,
    ).toEqual({ message: null });
    expect(
      (
        await call("POST", "/v1/queues/_ack", "/v1/queues/_ack", {
          token,
          body: { receipt: consumed.body.message.receipt },
        })
      ).body,
    ).toEqual({ acked: true });
    expect((await call("POST", "/v1/queues/_ack", "/v1/queues/_ack", { token, body: { receipt: 5 } })).status).toBe(
      400,
    );
    expect((await call("POST", "/v1/queues/{queue}", "/v1/queues/jobs", { body: { payload: 1 } })).status).toBe(401);
    expect(
      (await call("GET", "/v1/queues/_events/feed", "/v1/queues/_events/feed?after=0", { token })).body.cursor,
    ).toBe("0");
    expect((await call("GET", "/v1/queues/_events/feed", "/v1/queues/_events/feed?after=x", { token })).status).toBe(
      400,
    );
    expect(
      (await call("POST", "/v1/queues/{queue}", "/v1/queues/_events", { token, body: { payload: 1 } })).status,
    ).toBe(403);
    expect(
      (
        await call("POST", "/v1/queues/{queue}", "/v1/queues/jobs", {
          token,
          body: { payload: 1, delaySeconds: "soon" },
        })
      ).status,
    ).toBe(400);

    // Analytics: register, list, log, query; an unregistered type.
    expect(
      (
        await call("POST", "/v1/analytics/types", "/v1/analytics/types", {
          token,
          body: { name: "signup", properties: { plan: "string" } },
        })
      ).status,
    ).toBe(200);
    expect((await call("GET", "/v1/analytics/types", "/v1/analytics/types", { token })).body.types).toHaveLength(1);
    const logged = await call("POST", "/v1/analytics/events", "/v1/analytics/events", {
      token,
      body: { events: [{ type: "signup", properties: { plan: "pro" } }] },
    });
    expect([200, 501]).toContain(logged.status);
    const queried = await call("POST", "/v1/analytics/query", "/v1/analytics/query", {
      token,
      body: { type: "signup", since: 0, groupBy: "plan", timezone: "Europe/Berlin" },
    });
    expect([200, 400, 501]).toContain(queried.status);
    expect(
      (
        await call("POST", "/v1/analytics/events", "/v1/analytics/events", {
          token,
          body: { events: [{ type: "nope" }] },
        })
      ).status,
    ).toBe(400);

    // Inference: models, generate, embed; both prompt and messages.
    expect((await call("GET", "/v1/inference/models", "/v1/inference/models", { token })).status).toBe(200);
    const generated = await call("POST", "/v1/inference/generate", "/v1/inference/generate", {
      token,
      body: { prompt: "Say hello", maxTokens: 8 },
    });
    expect([200, 501, 502]).toContain(generated.status);
    const embedded = await call("POST", "/v1/inference/embed", "/v1/inference/embed", {
      token,
      body: { input: ["a", "b"] },
    });
    expect([200, 501, 502]).toContain(embedded.status);
    expect(
      (
        await call("POST", "/v1/inference/generate", "/v1/inference/generate", {
          token,
          body: { prompt: "x", messages: [] },
        })
      ).status,
    ).toBe(400);

    // Mail: the app has no address yet, or bad input.
    const mailed = await call("POST", "/v1/mail/send", "/v1/mail/send", {
      token,
      body: { to: "user@example.com", subject: "Hi", text: "Hello" },
    });
    expect([200, 501]).toContain(mailed.status);
    expect(
      (
        await call("POST", "/v1/mail/send", "/v1/mail/send", {
          token,
          body: { to: "not an address", subject: "Hi", text: "Hello" },
        })
      ).status,
    ).toBe(400);

    // Secrets: list, not declared, declared but not set, set and read, link.
    await t.admin.declareSecrets({ appId: app.id, names: ["STRIPE_KEY"] });
    expect((await call("GET", "/v1/secrets", "/v1/secrets", { token })).body.secrets).toHaveLength(1);
    expect((await call("GET", "/v1/secrets/{name}", "/v1/secrets/OTHER_KEY", { token })).status).toBe(404);
    expect((await call("GET", "/v1/secrets/{name}", "/v1/secrets/STRIPE_KEY", { token })).status).toBe(409);
    expect((await call("POST", "/v1/secrets/{name}/link", "/v1/secrets/STRIPE_KEY/link", { token })).status).toBe(200);
    await t.admin.setSecret({ appId: app.id, name: "STRIPE_KEY", value: "sk_test_123" });
    expect((await call("GET", "/v1/secrets/{name}", "/v1/secrets/STRIPE_KEY", { token })).status).toBe(200);

    // A stopped app.
    await app.stop();
    expect((await call("GET", "/v1/queues", "/v1/queues", { token })).status).toBe(403);
    await app.start();
  });
});
