import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { AdminService } from "../../gen/platform/admin/v1/admin_pb.js";
import { MetaService } from "../../gen/platform/meta/v1/meta_pb.js";
import { ErrorDetailSchema } from "../../gen/platform/meta/v1/error_pb.js";
import { useTestApp, useTestServer, type Protocol } from "../support/harness.ts";
import { jsonDepth } from "../../src/platform-server.ts";
import { PlatformError, toPlatformError, toEnvelope } from "../../src/core/errors.ts";
import pkg from "../../package.json" with { type: "json" };

const run = promisify(execFile);
const t = useTestServer();
const app = useTestApp(t);

describe("meta", () => {
  it("GET /health is exactly { status: 'ok' } without a token", async () => {
    const res = await t.request("GET", "/health");
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ status: "ok" });
  });

  it("GET /version reports the package name and version", async () => {
    const res = await t.request("GET", "/version");
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ name: pkg.name, version: pkg.version });
  });
});

describe("one port, every protocol", () => {
  for (const protocol of ["connect", "grpc", "grpc-web"] as Protocol[]) {
    it(`MetaService and AdminService over ${protocol}`, async () => {
      const meta = t.client(MetaService, undefined, protocol);
      expect(await meta.getVersion({})).toMatchObject({ name: pkg.name, version: pkg.version });
      expect((await meta.getHealth({})).status).toBe("ok");
      const admin = t.client(AdminService, t.adminToken, protocol);
      const { apps } = await admin.listApps({});
      expect(apps.map((a) => a.name)).toContain(app.name);
    });

    it(`errors over ${protocol} carry the gRPC code and our string code`, async () => {
      const admin = t.client(AdminService, t.adminToken, protocol);
      let err: ConnectError | undefined;
      try {
        await admin.createApp({ name: "Not Valid" });
      } catch (e) {
        err = ConnectError.from(e);
      }
      expect(err?.code).toBe(Code.InvalidArgument);
      expect(err?.findDetails(ErrorDetailSchema)[0]).toMatchObject({
        code: "invalid_argument",
        details: [expect.stringMatching(/^name: /)],
      });
    });
  }

  /** `buf curl` over gRPC with prior knowledge of h2c (no schema: it asks the server's reflection); its output. */
  const bufCurl = async (...args: string[]) =>
    (await run("node_modules/.bin/buf", ["curl", "--protocol", "grpc", "--http2-prior-knowledge", ...args])).stdout;

  it("plain HTTP/1.1 and h2c on the same port (gRPC reflection lets buf curl call without a schema)", async () => {
    const version = await bufCurl(`${t.url}/platform.meta.v1.MetaService/GetVersion`);
    expect(JSON.parse(version)).toEqual({ name: pkg.name, version: pkg.version });
    const list = await bufCurl("--list-methods", t.url);
    expect(list).toContain("platform.admin.v1.AdminService/CreateApp");
    expect(list).toContain("platform.queues.v1.QueueService/PutMessage");
  });

  it("gRPC reflection v1alpha, for grpcurl and older tools, answers as v1 does", async () => {
    const v1alpha = ["--reflect-protocol", "grpc-v1alpha"];
    const version = await bufCurl(...v1alpha, `${t.url}/platform.meta.v1.MetaService/GetVersion`);
    expect(JSON.parse(version)).toEqual({ name: pkg.name, version: pkg.version });
    const list = await bufCurl(...v1alpha, "--list-methods", t.url);
    expect(list).toContain("platform.queues.v1.QueueService/PutMessage");
    expect(list).toContain("grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo");
  });
});

describe("the error envelope at the edge", () => {
  const route = "/v1/analytics/types";

  it("malformed JSON is 400 invalid_argument", async () => {
    const res = await t.request("POST", route, { token: app.token, body: '{"name": "x",' });
    expect(res.status).toBe(400);
    expect(res.body.error).toMatchObject({ code: "invalid_argument", message: expect.stringContaining("JSON") });
  });

  it("a body that is not an object is 400", async () => {
    for (const body of ["[1,2]", '"text"', "42", "null"]) {
      const res = await t.request("POST", route, { token: app.token, body });
      expect(res.status, body).toBe(400);
      expect(res.body.error.code).toBe("invalid_argument");
    }
  });

  it("a wrong content type is 400", async () => {
    const res = await t.request("POST", route, {
      token: app.token,
      body: "name=x",
      headers: { "content-type": "text/csv" },
    });
    expect(res.status).toBe(400);
    expect(res.body.error).toMatchObject({
      code: "invalid_argument",
      message: expect.stringContaining("content-type"),
    });
  });

  it("an empty body of any content type is no body (a consume needs none)", async () => {
    for (let i = 0; i < 3; i++) await t.request("POST", "/v1/queues/idle", { token: app.token, body: { payload: i } });
    for (const headers of [
      { "content-type": "text/plain;charset=UTF-8" },
      { "content-type": "application/octet-stream" },
      {} as Record<string, string>,
    ]) {
      const res = await fetch(`${t.url}/v1/queues/idle/consume`, {
        method: "POST",
        headers: { authorization: `Bearer ${app.token}`, ...headers },
        body: "",
      });
      expect(res.status, JSON.stringify(headers)).toBe(200);
      expect((await res.json()).message.queue).toBe("idle");
    }
  });

  it("JSON nested deeper than 64 levels is 400, not a crash", async () => {
    const deep = "[".repeat(100_000) + "]".repeat(100_000);
    const res = await t.request("POST", "/v1/queues/deep", { token: app.token, body: `{"payload":${deep}}` });
    expect(res.status).toBe(400);
    expect(res.body.error.message).toContain("nested");
    expect(jsonDepth(JSON.parse("[[[1]]]"))).toBe(3);
  });

  it("a number JSON cannot keep exactly is 400 naming its field; numbers it keeps come back as sent", async () => {
    const refused = [
      ['{"payload":{"orderId":12345678901234567890}}', "payload.orderId", "12345678901234567000"],
      ['{"payload":{"ids":[1,-9007199254740993]}}', "payload.ids[1]", "-9007199254740992"],
      // 2^60 is a double, but it is written back as 1152921504606847000.
      ['{"payload":{"n":1152921504606846976}}', "payload.n", "1152921504606847000"],
      ['{"payload":[{"x":1e400}]}', "payload[0].x", "beyond the range"],
    ];
    for (const [body, field, says] of refused) {
      const res = await t.request("POST", "/v1/queues/exact", { token: app.token, body });
      expect(res.status, body).toBe(400);
      expect(res.body.error.code).toBe("invalid_argument");
      expect(res.body.error.message, body).toMatch(new RegExp(`^${field.replace(/[[\].]/g, "\\$&")}: `));
      expect(res.body.error.message, body).toContain(says);
      expect(res.body.error.details, body).toEqual([res.body.error.message]);
    }
    // An event property of kind number is refused alike (it would be stored as the string of another number).
    await t.request("POST", "/v1/analytics/types", {
      token: app.token,
      body: { name: "big_order", properties: { amount: "number" } },
    });
    const event = await t.request("POST", "/v1/analytics/events", {
      token: app.token,
      body: '{"events":[{"type":"big_order","properties":{"amount":99999999999999999999}}]}',
    });
    expect(event.status).toBe(400);
    expect(event.body.error.message).toMatch(/^events\[0\]\.properties\.amount: /);

    // Kept: 2^53, a large integer written as it comes back, digits in a string, a fraction (the double it
    // denotes, as JSON numbers always are), and a large exponent within range. Nothing was put before.
    const kept = '{"a":9007199254740992,"b":1152921504606847000,"c":"12345678901234567890","d":0.1,"e":1e+300}';
    const put = await t.request("POST", "/v1/queues/exact", { token: app.token, body: `{"payload":${kept}}` });
    expect(put.status).toBe(200);
    const res = await fetch(`${t.url}/v1/queues/exact/consume`, {
      method: "POST",
      headers: { authorization: `Bearer ${app.token}` },
    });
    const text = await res.text();
    expect(text).toContain(`"payload":${kept}`);
  });

  it("a JSON body that is not UTF-8 is 400, not stored with U+FFFD in place of its bytes", async () => {
    const latin1 = Buffer.concat([Buffer.from('{"payload":"caf'), Buffer.from([0xe9]), Buffer.from('"}')]);
    for (const body of [latin1, Buffer.from([0x7b, 0xed, 0xa0, 0x80, 0x7d]) /* a surrogate in CESU-8 */]) {
      const res = await fetch(`${t.url}/v1/queues/utf8`, {
        method: "POST",
        headers: { authorization: `Bearer ${app.token}`, "content-type": "application/json; charset=iso-8859-1" },
        body,
      });
      expect(res.status).toBe(400);
      expect((await res.json()).error).toMatchObject({
        code: "invalid_argument",
        message: "body: is not UTF-8 (JSON is UTF-8 text)",
      });
    }
    const ok = await t.request("POST", "/v1/queues/utf8", { token: app.token, body: { payload: "café \ufffd" } });
    expect(ok.status).toBe(200);
    const consumed = await t.request("POST", "/v1/queues/utf8/consume", { token: app.token });
    expect(consumed.body.message.payload).toBe("café \ufffd");
  });

  it("a form body outside the secret link's page is 400 content-type (curl -d's default), an empty one no body", async () => {
    const form = (body: string) =>
      fetch(`${t.url}/v1/queues/forms/consume`, {
        method: "POST",
        headers: { authorization: `Bearer ${app.token}`, "content-type": "application/x-www-form-urlencoded" },
        body,
      });
    // Read as a form, this JSON was one odd field, and the consume waited 25 s instead of answering at once.
    const json = await form('{"waitSeconds":0}');
    expect(json.status).toBe(400);
    expect((await json.json()).error).toMatchObject({
      code: "invalid_argument",
      message: "content-type: must be application/json",
    });
    await t.request("POST", "/v1/queues/forms", { token: app.token, body: { payload: 1 } });
    const empty = await form("");
    expect(empty.status).toBe(200);
    expect((await empty.json()).message.payload).toBe(1);
  });

  it("a body over 32 MiB is 413 payload_too_large", async () => {
    const big = JSON.stringify({ payload: "x".repeat(33 * 1024 * 1024) });
    const res = await t.request("POST", "/v1/queues/big", { token: app.token, body: big });
    expect(res.status).toBe(413);
    expect(res.body.error.code).toBe("payload_too_large");
  });

  it("an unknown path is 404 not_found", async () => {
    const res = await t.request("GET", "/v1/nothing-here");
    expect(res.status).toBe(404);
    expect(res.body.error).toMatchObject({ code: "not_found", message: expect.any(String) });
  });

  it("every response carries x-request-id; a sane given one is echoed", async () => {
    const a = await t.request("GET", "/health");
    expect(a.headers.get("x-request-id")).toMatch(/^[0-9a-f-]{36}$/);
    const b = await t.request("GET", "/nope", { headers: { "x-request-id": "trace-123" } });
    expect(b.headers.get("x-request-id")).toBe("trace-123");
    const c = await t.request("GET", "/health", { headers: { "x-request-id": "bad id with spaces" } });
    // Replaced by a generated one (a check for "bad" could match the hex of a random UUID).
    expect(c.headers.get("x-request-id")).toMatch(/^[0-9a-f-]{36}$/);
  });

  it("anything unexpected becomes 500 internal with no internals in the message", () => {
    const err = toPlatformError(new Error("relation secrets_x does not exist at 10.0.0.3"));
    expect(err.status).toBe(500);
    expect(toEnvelope(err)).toEqual({ error: { code: "internal", message: "internal error" } });
    const ours = new PlatformError("queue_full", "queue jobs is full", { retryAfterSeconds: 5 });
    expect(toPlatformError(ours)).toBe(ours);
  });
});

describe("operations", () => {
  it("/metrics exposes request counts and latencies by route template and status", async () => {
    await t.request("GET", "/health");
    const res = await fetch(`${t.url}/metrics`);
    const text = await res.text();
    expect(res.status).toBe(200);
    expect(text).toMatch(/http_requests_total\{method="GET",route="\/health",status="200"\} \d+/);
    expect(text).toContain("http_request_duration_seconds_bucket");
  });
});
