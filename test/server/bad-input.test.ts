/**
 * No input makes the service answer 500 (docs/api.md#what-always-holds): every
 * `/v1` endpoint, and the RPCs behind them over Connect, fed wrong types, wrong
 * shapes, unicode edge cases, huge values and odd paths, answers a 4xx with
 * the error envelope (or a 200 where the input happens to be acceptable).
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { AdminService } from "../../gen/platform/admin/v1/admin_pb.js";
import { endpoints } from "../support/endpoints.ts";
import { HTTP_VERSIONS, useTestApp, useTestServer, type TestApp, type TestServer } from "../support/harness.ts";

/** The same app set-up on either server. */
const prepare = (server: TestServer) => async (app: TestApp) => {
  await server.admin.declareSecrets({ appId: app.id, names: ["API_KEY"] });
  await server.admin.updateApp({ appId: app.id, mailFrom: "odd@apps.example.com" });
};
const t = useTestServer({ tls: false });
const plainApp = useTestApp(t, prepare(t));
/** A server with TLS (self-signed certificate) for REST over h2 by ALPN, with an app set up alike. */
const tlsServer = useTestServer({ tls: true });
const tlsApp = useTestApp(tlsServer, prepare(tlsServer));

const odd: unknown[] = [
  null,
  true,
  -1,
  1.5,
  1e308,
  Number.MAX_SAFE_INTEGER + 2,
  "",
  " ",
  "\u0000",
  "\ud800",
  "😀".repeat(10),
  "x".repeat(200_001),
  "2024-02-30T00:00:00Z",
  "__proto__",
  [],
  [null],
  {},
  { __proto__: { polluted: true } },
  { constructor: { prototype: { polluted: true } } },
];

/** Every field name any endpoint reads, so each gets every odd value. */
const fields = [
  "name",
  "properties",
  "events",
  "type",
  "at",
  "since",
  "until",
  "interval",
  "groupBy",
  "timezone",
  "to",
  "subject",
  "text",
  "model",
  "prompt",
  "messages",
  "maxTokens",
  "temperature",
  "input",
  "payload",
  "delaySeconds",
  "ttlSeconds",
  "waitSeconds",
  "leaseSeconds",
  "receipt",
  "value",
];

// eslint-disable-next-line @typescript-eslint/no-explicit-any
function expectEnvelopeOrOk(res: { status: number; body: any }, what: string) {
  expect(res.status, what).not.toBe(500);
  expect(res.status, what).toBeLessThan(502);
  if (res.status >= 400) {
    expect(typeof res.body?.error?.code, what).toBe("string");
    expect(typeof res.body?.error?.message, what).toBe("string");
  }
}

for (const http of HTTP_VERSIONS)
  describe(`bad input never answers 500 (REST over ${http})`, () => {
    const server = http === "h2-tls" ? tlsServer : t;
    const app = http === "h2-tls" ? tlsApp : plainApp;
    const request: TestServer["request"] = (method, path, options) => server.rest(http)(method, path, options);

    it("the requests travel as named", async () => {
      const res = await request("GET", "/health");
      expect(res.status).toBe(200);
      expect(res.protocol).toBe(http === "h2-tls" ? "h2" : http);
    });

    for (const e of endpoints.filter((x) => x.method === "POST")) {
      it(`${e.method} ${e.path}: whole bodies of the wrong shape`, async () => {
        for (const body of ["[]", '"s"', "1", "true", "null", "{}", '{"a":', "\u0000", JSON.stringify(odd)]) {
          const res = await request(e.method, e.path, {
            token: app.token,
            body,
            headers: { "content-type": "application/json" },
          });
          expectEnvelopeOrOk(res, `${e.path} ${body.slice(0, 40)}`);
        }
      });

      it(`${e.method} ${e.path}: every field set to every odd value`, async () => {
        for (const field of fields) {
          for (const value of odd) {
            const body = { ...(e.body as object), [field]: value };
            const res = await request(e.method, e.path, { token: app.token, body: { ...body, waitSeconds: 0 } });
            expectEnvelopeOrOk(res, `${e.path} ${field}=${JSON.stringify(value)?.slice(0, 40)}`);
          }
        }
      });
    }

    it("odd path segments", async () => {
      const segments = [
        "%00",
        "%F0%9F%98%80",
        "%ED%A0%80",
        "a".repeat(300),
        "..",
        "%2F",
        "_events",
        "_ack",
        "A",
        "a%20b",
        "%",
      ];
      for (const s of segments) {
        for (const [method, path] of [
          ["POST", `/v1/queues/${s}`],
          ["POST", `/v1/queues/${s}/consume`],
          ["GET", `/v1/secrets/${s}`],
          ["POST", `/v1/secrets/${s}/link`],
          ["GET", `/secret-links/${s}`],
        ] as const) {
          const res = await request(method, path, {
            token: app.token,
            body: method === "POST" ? { payload: 1, waitSeconds: 0 } : undefined,
          });
          expect(res.status, `${method} ${path}`).toBeLessThan(500);
          if (path.startsWith("/v1/") && res.status >= 400)
            expect(typeof res.body?.error?.code, `${method} ${path}`).toBe("string");
        }
      }
    });

    it("analytics events with odd properties and times", async () => {
      await request("POST", "/v1/analytics/types", {
        token: app.token,
        body: { name: "odd", properties: { n: "number", s: "string", b: "boolean" } },
      });
      for (const value of odd) {
        for (const key of ["n", "s", "b", "at", "__proto__", "constructor", "x".repeat(100)]) {
          const res = await request("POST", "/v1/analytics/events", {
            token: app.token,
            body: { events: [{ type: "odd", ...(key === "at" ? { at: value } : { properties: { [key]: value } }) }] },
          });
          expectEnvelopeOrOk(res, `${key}=${JSON.stringify(value)?.slice(0, 40)}`);
        }
      }
      for (const body of [
        { type: "odd", since: -8.64e15 },
        { type: "odd", since: 8.64e15 + 1 },
        { type: "odd", since: 0, until: 1, interval: "hour", timezone: "Mars/Olympus" },
        { type: "odd", since: "2024-01-01T00:00:00Z", interval: "month", timezone: "Asia/Kolkata" },
        { type: "odd", since: 0, groupBy: "__proto__" },
      ]) {
        const res = await request("POST", "/v1/analytics/query", { token: app.token, body });
        expectEnvelopeOrOk(res, JSON.stringify(body));
      }
      expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    });

    it("inference messages of odd shapes", async () => {
      for (const messages of [
        [{}],
        [{ role: "robot", content: "x" }],
        [{ role: "user", content: 5 }],
        Array(65).fill({ role: "user", content: "x" }),
        [{ role: "system", content: "x" }],
        [null],
      ]) {
        const res = await request("POST", "/v1/inference/generate", {
          token: app.token,
          body: { messages, maxTokens: 4 },
        });
        expectEnvelopeOrOk(res, JSON.stringify(messages).slice(0, 60));
      }
      for (const input of [[], [""], Array(97).fill("x"), [1], ["x", null], "\ud800"]) {
        const res = await request("POST", "/v1/inference/embed", { token: app.token, body: { input } });
        expectEnvelopeOrOk(res, JSON.stringify(input).slice(0, 60));
        expect(res.status).toBe(400);
      }
    });
  });

describe("bad input over Connect never answers Internal", () => {
  it("Values with an unset kind, nested or not, and out-of-range numbers", async () => {
    const { QueueService } = await import("../../gen/platform/queues/v1/queues_pb.js");
    const { AnalyticsService } = await import("../../gen/platform/analytics/v1/analytics_pb.js");
    const { InferenceService } = await import("../../gen/platform/inference/v1/inference_pb.js");
    const { ConnectError, Code } = await import("@connectrpc/connect");
    const queues = t.client(QueueService, plainApp.token);
    const analytics = t.client(AnalyticsService, plainApp.token);
    const inference = t.client(InferenceService, plainApp.token);
    const unset = {} as never;
    const nested = { kind: { case: "listValue", value: { values: [{}] } } } as never;
    const calls: [string, () => Promise<unknown>][] = [
      ["put unset", () => queues.putMessage({ queue: "q", payload: unset })],
      ["put nested", () => queues.putMessage({ queue: "q", payload: nested })],
      [
        "put nan",
        () => queues.putMessage({ queue: "q", payload: { kind: { case: "numberValue", value: NaN } } as never }),
      ],
      ["put negative delay", () => queues.putMessage({ queue: "q", payload: nested, delaySeconds: -5 })],
      ["consume huge lease", () => queues.consumeMessage({ queue: "q", waitSeconds: 0, leaseSeconds: 2 ** 31 - 1 })],
      ["log unset", () => analytics.logEvents({ events: [{ type: "odd", properties: { n: unset } }] })],
      ["log nested", () => analytics.logEvents({ events: [{ type: "odd", properties: { s: nested } }] })],
      [
        "log far future",
        () => analytics.logEvents({ events: [{ type: "odd", at: { seconds: 10n ** 15n, nanos: 0 } }] }),
      ],
      [
        "query bad timestamp",
        () => analytics.queryEvents({ type: "odd", since: { seconds: -(10n ** 15n), nanos: 0 } }),
      ],
      ["generate nan temperature", () => inference.generate({ prompt: "x", temperature: NaN })],
      ["generate huge maxTokens", () => inference.generate({ prompt: "x", maxTokens: 2 ** 31 - 1 })],
    ];
    for (const [what, call] of calls) {
      try {
        await call();
      } catch (err) {
        const code = ConnectError.from(err).code;
        expect([Code.Internal, Code.Unknown], `${what}: ${ConnectError.from(err).message}`).not.toContain(code);
      }
    }
  });
});

describe("values the database cannot take are refused at the edge, never a 500", () => {
  const b64 = (text: string) => Buffer.from(text).toString("base64url");

  it("an app's: a NUL or a lone surrogate in a dedup key, a page cursor past int64, a zone abbreviation", async () => {
    for (const dedupKey of ["k\u0000", "\ud800"]) {
      const res = await t.request("POST", "/v1/queues/jobs", { token: plainApp.token, body: { payload: 1, dedupKey } });
      expect([res.status, res.body.error.message]).toEqual([
        400,
        "dedupKey: must be text without NUL characters or lone surrogates",
      ]);
    }
    const cursor = b64("dl:9999999999999999999");
    const page = await t.request("GET", `/v1/queues/jobs/dead-letters?cursor=${cursor}`, { token: plainApp.token });
    expect([page.status, page.body.error.message]).toEqual([400, "cursor: is not a cursor of this listing"]);
    // IST is India to ICU and Israel to PostgreSQL: refused rather than counted in either.
    const query = await t.request("POST", "/v1/analytics/query", {
      token: plainApp.token,
      body: { type: "signup", since: 0, interval: "day", timezone: "IST" },
    });
    expect(query.status).toBe(400);
    expect(query.body.error.message).toMatch(
      /^timezone: must be an IANA time zone name .* not an abbreviation \(IST\)$/,
    );
  });

  it("an operator's: page tokens out of range, times out of range, a NUL in an app id or a label", async () => {
    const codeOf = (p: Promise<unknown>) =>
      p.then(
        () => "ok",
        (e: unknown) => ConnectError.from(e).code,
      );
    expect(await codeOf(t.admin.listAuditEntries({ pageToken: "9999999999999999999" }))).toBe(Code.InvalidArgument);
    const yearZero = b64(
      JSON.stringify(["apps", "created_at", "0000-01-01T00:00:00.000000Z", "00000000-0000-0000-0000-000000000000"]),
    );
    expect(await codeOf(t.admin.listApps({ pageSize: 5, orderBy: "created_at", pageToken: yearZero }))).toBe(
      Code.InvalidArgument,
    );
    // Binary protobuf carries any seconds (JSON stops at year 9999).
    const binary = t.client(AdminService, t.adminToken, "grpc");
    const farAway = { seconds: 10n ** 15n, nanos: 0 };
    expect(await codeOf(binary.listMail({ appId: plainApp.id, since: farAway }))).toBe(Code.InvalidArgument);
    expect(await codeOf(binary.listAuditEntries({ until: farAway }))).toBe(Code.InvalidArgument);
    expect(await codeOf(t.admin.getApp({ appId: "x\u0000" }))).toBe(Code.NotFound);
    // The net under the edge: a NUL that reaches the database is a 400, not a 500.
    expect(await codeOf(t.admin.issueToken({ appId: plainApp.id, label: "a\u0000b" }))).toBe(Code.InvalidArgument);
    expect(await codeOf(t.admin.updateApp({ appId: plainApp.id, mailFrom: "a\u0000@example.com" }))).toBe(
      Code.InvalidArgument,
    );
  });
});
