/**
 * Retry rules. A small real HTTP server (node:http) answers what a failing
 * deployment would (502, 503, a dropped connection, 429 with Retry-After),
 * and counts the requests it gets: reads, consume and ack are retried;
 * mail, generate, embed, event logging and put are not repeated after a
 * failure; a 429 is retried only when asked, after its Retry-After. The last
 * test does the same against the real service's `queue_full`.
 */
import http from "node:http";
import { rejection } from "./support.ts";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startServer, type TestServer } from "../../test/support/harness.ts";
import { createClient, type RetryInfo } from "../src/index.ts";

type Answer = { status: number; body?: unknown; headers?: Record<string, string> } | "drop" | "html502";

let stub: http.Server;
let stubUrl: string;
/** Answers to give per "METHOD path", in order; the last one repeats. */
const script = new Map<string, Answer[]>();
/** Requests received per "METHOD path". */
const hits = new Map<string, number>();
/** The Idempotency-Key of each request received per "METHOD path" (null when none was sent). */
const keys = new Map<string, (string | null)[]>();

beforeAll(async () => {
  stub = http.createServer((req, res) => {
    const key = `${req.method} ${req.url}`;
    const n = hits.get(key) ?? 0;
    hits.set(key, n + 1);
    const sent = req.headers["idempotency-key"];
    keys.set(key, [...(keys.get(key) ?? []), typeof sent === "string" ? sent : null]);
    req.resume();
    req.on("end", () => {
      const answers = script.get(key) ?? [
        { status: 404, body: { error: { code: "not_found", message: "no such route" } } },
      ];
      const answer = answers[Math.min(n, answers.length - 1)];
      if (answer === "drop") return void req.socket.destroy();
      if (answer === "html502") {
        res.writeHead(502, { "content-type": "text/html" });
        return void res.end("<html><body>Bad gateway</body></html>");
      }
      res.writeHead(answer.status, {
        "content-type": "application/json",
        "x-request-id": `req-${n}`,
        ...answer.headers,
      });
      res.end(JSON.stringify(answer.body ?? {}));
    });
  });
  await new Promise<void>((resolve) => stub.listen(0, "127.0.0.1", resolve));
  stubUrl = `http://127.0.0.1:${(stub.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((resolve) => stub.close(() => resolve())));

const upstream = { status: 502, body: { error: { code: "upstream_error", message: "provider failed" } } };
const unavailable = {
  status: 503,
  body: { error: { code: "unavailable", message: "database unreachable" } },
  headers: { "retry-after": "0" },
};

function freshClient(retries: RetryInfo[] = []) {
  script.clear();
  hits.clear();
  keys.clear();
  return createClient({
    baseUrl: stubUrl,
    token: "pbt_test",
    retry: { minDelayMs: 5, maxDelayMs: 20, onRetry: (i) => retries.push(i) },
  });
}

describe("the work loop's ack after a lost answer", () => {
  it("reports a `false` that came only on a retry as afterRetry: the lost attempt may have acked", async () => {
    const retries: RetryInfo[] = [];
    const c = freshClient(retries);
    const message = {
      id: "m1",
      queue: "jobs",
      payload: 1,
      receipt: "r1",
      enqueuedAt: 1,
      expiresAt: 2,
      leaseExpiresAt: 3,
      deliveries: 1,
    };
    // One message, then nothing (each consume answered at once); the ack's first answer is lost.
    script.set("POST /v1/queues/jobs/consume", [
      { status: 200, body: { message } },
      { status: 200, body: { message: null } },
    ]);
    script.set("POST /v1/queues/_ack", ["drop", { status: 200, body: { acked: false } }]);
    const reports: { afterRetry: boolean; acked: boolean }[] = [];
    let reported!: () => void;
    const done = new Promise<void>((resolve) => (reported = resolve));
    const worker = c.queues.work("jobs", async () => {}, {
      heartbeat: false,
      onLeaseLost: ({ acked, afterRetry }) => {
        reports.push({ acked, afterRetry });
        reported();
      },
    });
    await done;
    await worker.stop();
    expect(reports).toEqual([{ acked: false, afterRetry: true }]);
    expect(hits.get("POST /v1/queues/_ack")).toBe(2);
    // The client's own onRetry still hears of the retry.
    expect(retries.filter((r) => r.path === "/v1/queues/_ack").map((r) => r.error.status)).toEqual([0]);
  });
});

describe("safe operations are retried", () => {
  it("a read answered 502 then 200 succeeds on the second request", async () => {
    const retries: RetryInfo[] = [];
    const c = freshClient(retries);
    script.set("GET /v1/queues", [upstream, { status: 200, body: { queues: [] } }]);
    expect(await c.queues.list()).toEqual([]);
    expect(hits.get("GET /v1/queues")).toBe(2);
    expect(retries.map((r) => [r.attempt, r.error.status, r.error.code])).toEqual([[1, 502, "upstream_error"]]);
  });

  it("consume after a 503, ack after a dropped connection, a secret after a proxy's HTML 502", async () => {
    const retries: RetryInfo[] = [];
    const c = freshClient(retries);
    script.set("POST /v1/queues/jobs/consume", [unavailable, { status: 200, body: { message: null } }]);
    script.set("POST /v1/queues/_ack", ["drop", { status: 200, body: { acked: true } }]);
    script.set("GET /v1/secrets/KEY", [
      "html502",
      { status: 200, body: { name: "KEY", value: "v", version: 1, setAt: 1 } },
    ]);
    expect(await c.queues.consume("jobs")).toBeNull();
    expect(await c.queues.ack("r1")).toBe(true);
    expect((await c.secrets.get("KEY")).value).toBe("v");
    expect([...hits.values()]).toEqual([2, 2, 2]);
    expect(retries.map((r) => [r.path, r.error.status, r.error.code])).toEqual([
      ["/v1/queues/jobs/consume", 503, "unavailable"],
      ["/v1/queues/_ack", 0, "unavailable"],
      ["/v1/secrets/KEY", 502, "upstream_error"],
    ]);
  });

  it("a read and a keyed mail after a balancer's 504 (it gave up waiting): retried, the mail under its key", async () => {
    const retries: RetryInfo[] = [];
    const c = freshClient(retries);
    const gatewayTimeout = { status: 504, body: { error: { code: "unavailable", message: "gateway timeout" } } };
    script.set("GET /v1/queues", [gatewayTimeout, { status: 200, body: { queues: [] } }]);
    script.set("POST /v1/mail/send", [
      gatewayTimeout,
      { status: 200, body: { sent: true, from: "a@b", remainingToday: 1 } },
    ]);
    expect(await c.queues.list()).toEqual([]);
    expect((await c.mail.send({ to: "x@example.com", subject: "s", text: "t" })).sent).toBe(true);
    expect([hits.get("GET /v1/queues"), hits.get("POST /v1/mail/send")]).toEqual([2, 2]);
    expect(retries.map((r) => [r.path, r.error.status])).toEqual([
      ["/v1/queues", 504],
      ["/v1/mail/send", 504],
    ]);
    // A put without a key is not repeated after a 504: the first may have gone in.
    script.set("POST /v1/queues/jobs", [
      gatewayTimeout,
      { status: 200, body: { id: "m1", queue: "jobs", expiresAt: 1 } },
    ]);
    expect((await rejection(c.queues.put("jobs", 1, { idempotencyKey: false }))).status).toBe(504);
    expect(hits.get("POST /v1/queues/jobs")).toBe(1);
  });

  it("gives up after `retries` with the last error; backoff delays grow and stay under the cap", async () => {
    const retries: RetryInfo[] = [];
    const c = freshClient(retries);
    script.set("GET /v1/inference/models", [{ ...unavailable, headers: {} }]);
    const err = await rejection(c.inference.models({ retry: { retries: 3 } }));
    expect([err.status, err.code, err.message]).toEqual([503, "unavailable", "database unreachable"]);
    expect(err.requestId).toBe("req-3");
    expect(hits.get("GET /v1/inference/models")).toBe(4);
    expect(retries.map((r) => r.attempt)).toEqual([1, 2, 3]);
    for (const r of retries) {
      const d = Math.min(20, 5 * 2 ** (r.attempt - 1));
      expect(r.delayMs).toBeGreaterThanOrEqual(d / 2);
      expect(r.delayMs).toBeLessThanOrEqual(d);
    }
  });

  it("an abort ends the wait between retries", async () => {
    const c = createClient({
      baseUrl: stubUrl,
      token: "pbt_test",
      retry: { minDelayMs: 60_000, maxDelayMs: 60_000, budgetMs: 600_000 },
    });
    script.clear();
    hits.clear();
    script.set("GET /v1/analytics/types", [{ ...unavailable, headers: {} }]);
    const controller = new AbortController();
    const pending = c.analytics.listTypes({
      signal: controller.signal,
      retry: { onRetry: () => controller.abort(new Error("gave up")) },
    });
    await expect(pending).rejects.toThrow("gave up");
    expect(hits.get("GET /v1/analytics/types")).toBe(1);
  });
});

describe("operations that spend allowance or create things are never repeated", () => {
  it("mail send answered 502 is retried under the same Idempotency-Key (the service answers a repeat once)", async () => {
    const retries: RetryInfo[] = [];
    const c = freshClient(retries);
    script.set("POST /v1/mail/send", [upstream, { status: 200, body: { sent: true, from: "a@b", remainingToday: 1 } }]);
    const res = await c.mail.send({ to: "x@example.com", subject: "s", text: "t" });
    expect(res.sent).toBe(true);
    expect(hits.get("POST /v1/mail/send")).toBe(2);
    expect(retries.map((r) => [r.error.status, r.error.code])).toEqual([[502, "upstream_error"]]);
  });

  it("mail send whose 502 is the replay of the first attempt's (Idempotent-Replayed) is not retried again", async () => {
    const retries: RetryInfo[] = [];
    const c = freshClient(retries);
    // The first answer is lost; the repeat under the same key gets the first attempt's error back, kept
    // by the service because the mail may have left: the same every time, so the client stops there.
    script.set("POST /v1/mail/send", ["drop", { ...upstream, headers: { "idempotent-replayed": "true" } }]);
    const err = await c.mail.send({ to: "x@example.com", subject: "s", text: "t" }).catch((e: unknown) => e);
    expect(err).toMatchObject({ status: 502, code: "upstream_error", replayed: true });
    expect(hits.get("POST /v1/mail/send")).toBe(2);
    expect(retries).toHaveLength(1);
  });

  it("without a key (idempotencyKey: false), generate, embed, event logging and put: one request each, even after a dropped connection", async () => {
    const c = freshClient();
    for (const path of ["/v1/inference/generate", "/v1/inference/embed", "/v1/analytics/events", "/v1/queues/jobs"])
      script.set(`POST ${path}`, ["drop"]);
    script.set("POST /v1/secrets/KEY/link", [unavailable]);
    const none = { idempotencyKey: false } as const;
    const errors = await Promise.all([
      rejection(c.inference.generate({ prompt: "hi" }, none)),
      rejection(c.inference.embed({ input: "hi" }, none)),
      rejection(c.analytics.log([{ type: "x" }], none)),
      rejection(c.queues.put("jobs", 1, none)),
      rejection(c.secrets.createLink("KEY", none)),
    ]);
    expect(errors.map((e) => e.code)).toEqual([
      "unavailable",
      "unavailable",
      "unavailable",
      "unavailable",
      "unavailable",
    ]);
    expect(errors[0].status).toBe(0);
    expect(errors[0].message).toMatch(/could not be reached/);
    expect([...hits.values()]).toEqual([1, 1, 1, 1, 1]);
    expect([...keys.values()].flat()).toEqual([null, null, null, null, null]);
  });

  it("every state-changing call carries an Idempotency-Key by default, the same on its retry after a dropped connection", async () => {
    const c = freshClient();
    const ok = { status: 200, body: {} };
    const paths = [
      "/v1/inference/generate",
      "/v1/inference/embed",
      "/v1/analytics/events",
      "/v1/queues/jobs",
      "/v1/queues/jobs/batch",
      "/v1/secrets/KEY/link",
      "/v1/mail/send",
    ];
    for (const path of paths) script.set(`POST ${path}`, ["drop", ok]);
    await Promise.all([
      c.inference.generate({ prompt: "hi" }),
      c.inference.embed({ input: "hi" }),
      c.analytics.log([{ type: "x" }]),
      c.queues.put("jobs", 1),
      c.queues.putBatch("jobs", [{ payload: 1 }]),
      c.secrets.createLink("KEY"),
      c.mail.send({ to: "a@example.com", subject: "s", text: "t" }),
    ]);
    for (const path of paths) {
      const sent = keys.get(`POST ${path}`)!;
      expect(sent, path).toHaveLength(2);
      expect(sent[0], path).toMatch(/^[\x21-\x7e]{1,255}$/);
      expect(sent[1], path).toBe(sent[0]);
    }
    // One key per call.
    expect(new Set(paths.map((p) => keys.get(`POST ${p}`)![0])).size).toBe(paths.length);
  });

  it("a 503 flagged Outcome-Unknown: a keyless put and a consume are not repeated, and the error says so", async () => {
    const c = freshClient();
    const maybeDone = {
      status: 503,
      body: {
        error: {
          code: "unavailable",
          message: "the database stopped answering during this request",
          details: ["outcome: unknown, the change may have been committed"],
        },
      },
      headers: { "retry-after": "0", "outcome-unknown": "true" },
    };
    script.set("POST /v1/queues/jobs", [maybeDone, { status: 200, body: { id: "m1", queue: "jobs", expiresAt: 1 } }]);
    script.set("POST /v1/queues/jobs/consume", [maybeDone, { status: 200, body: { message: null } }]);
    const put = await rejection(c.queues.put("jobs", 1, { idempotencyKey: false }));
    const consume = await rejection(c.queues.consume("jobs"));
    expect([put.outcomeUnknown, consume.outcomeUnknown]).toEqual([true, true]);
    expect(put.details).toEqual(["outcome: unknown, the change may have been committed"]);
    expect([hits.get("POST /v1/queues/jobs"), hits.get("POST /v1/queues/jobs/consume")]).toEqual([1, 1]);
    // With its key (the default), the put is repeated: the service answers a repeat once.
    hits.clear();
    expect((await c.queues.put("jobs", 1)).id).toBe("m1");
    expect(hits.get("POST /v1/queues/jobs")).toBe(2);
  });
});

describe("429", () => {
  const full = {
    status: 429,
    body: { error: { code: "queue_full", message: "queue is full" } },
    headers: { "retry-after": "1" },
  };

  it("is thrown with retryAfter unless retries of 429 were asked for", async () => {
    const c = freshClient();
    script.set("POST /v1/queues/jobs", [full, { status: 200, body: { id: "m1", queue: "jobs", expiresAt: 1 } }]);
    const err = await rejection(c.queues.put("jobs", 1));
    expect([err.status, err.code, err.retryAfter]).toEqual([429, "queue_full", 1]);
    expect(hits.get("POST /v1/queues/jobs")).toBe(1);
  });

  it("when asked, waits Retry-After and tries again", async () => {
    const retries: RetryInfo[] = [];
    const c = freshClient(retries);
    script.set("POST /v1/queues/jobs", [full, { status: 200, body: { id: "m1", queue: "jobs", expiresAt: 1 } }]);
    const started = Date.now();
    expect((await c.queues.put("jobs", 1, { retry: { on429: true } })).id).toBe("m1");
    expect(Date.now() - started).toBeGreaterThanOrEqual(950);
    expect(hits.get("POST /v1/queues/jobs")).toBe(2);
    expect(retries.map((r) => [r.error.code, r.delayMs])).toEqual([["queue_full", 1000]]);
  });

  it("never for mail, and not when Retry-After is beyond maxRetryAfterMs (a daily cap)", async () => {
    const c = freshClient();
    const cap = {
      status: 429,
      body: { error: { code: "quota_exceeded", message: "daily cap" } },
      headers: { "retry-after": "36000" },
    };
    script.set("POST /v1/mail/send", [cap]);
    script.set("GET /v1/queues", [cap]);
    const mail = await rejection(
      c.mail.send({ to: "x@example.com", subject: "s", text: "t" }, { retry: { on429: true } }),
    );
    expect([mail.code, mail.retryAfter]).toEqual(["quota_exceeded", 36000]);
    const list = await rejection(c.queues.list({ retry: { on429: true } }));
    expect(list.code).toBe("quota_exceeded");
    expect([hits.get("POST /v1/mail/send"), hits.get("GET /v1/queues")]).toEqual([1, 1]);
  });
});

describe("against the real service", () => {
  let t: TestServer;
  beforeAll(async () => {
    t = await startServer();
  });
  afterAll(() => t?.close());

  it("a put refused with queue_full succeeds on its retry once a consumer made room", async () => {
    const app = await t.createApp();
    await t.admin.updateApp({ appId: app.id, limits: { maxQueueDepth: 1 } });
    const c = createClient({ baseUrl: t.url, token: app.token });
    await c.queues.put("tight", "first");
    const retries: RetryInfo[] = [];
    const second = await c.queues.put("tight", "second", {
      retry: {
        on429: true,
        onRetry: (info) => {
          retries.push(info);
          // Leasing the waiting message makes room (depth counts waiting messages only).
          void c.queues.consume("tight", { waitSeconds: 0 });
        },
      },
    });
    expect(second.queue).toBe("tight");
    expect(retries).toHaveLength(1);
    expect(retries[0].error).toMatchObject({ status: 429, code: "queue_full" });
    expect(retries[0].delayMs).toBe(retries[0].error.retryAfter! * 1000);
    expect((await c.queues.list()).find((q) => q.name === "tight")).toMatchObject({ depth: 1, inFlight: 1 });
    await c.close();
  });
});
