/**
 * Strict bodies (docs/api.md, "Unknown fields"): every `/v1` operation that
 * reads a body refuses a field it does not define with 400 `invalid_argument`
 * naming it, instead of dropping it and answering as if it were absent. The
 * operations are walked from the server's own OpenAPI document, which is made
 * from the route tables it registered, so a new operation cannot be missed.
 */
import { describe, expect, it } from "vitest";
import { useTestApp, useTestServer } from "../support/harness.ts";

/* eslint-disable @typescript-eslint/no-explicit-any -- the document is walked as plain JSON */

const t = useTestServer();
const app = useTestApp(t);

const PATH_VALUES: Record<string, string> = { queue: "strict-q", name: "STRICT_SECRET" };

async function operations(): Promise<{ method: string; path: string; url: string; example: unknown; op: any }[]> {
  const doc = await (await fetch(t.url + "/openapi.json")).json();
  const out = [];
  for (const [path, ops] of Object.entries(doc.paths as Record<string, Record<string, any>>)) {
    if (!path.startsWith("/v1/")) continue;
    for (const [method, op] of Object.entries(ops)) {
      const url = path.replace(/\{([A-Za-z0-9_]+)\}/g, (_, name: string) => PATH_VALUES[name] ?? "x");
      const example = op.requestBody?.content?.["application/json"]?.example;
      out.push({ method: method.toUpperCase(), path, url, example, op });
    }
  }
  return out;
}

describe("every /v1 operation", () => {
  it("refuses an unknown top-level field with 400 invalid_argument naming it", async () => {
    const ops = (await operations()).filter((o) => o.method !== "GET");
    // The walk found the operations that take bodies (a broken walk would pass vacuously).
    expect(ops.map((o) => `${o.method} ${o.path}`)).toEqual(
      expect.arrayContaining([
        "POST /v1/queues/{queue}",
        "POST /v1/queues/{queue}/consume",
        "PUT /v1/queues/{queue}/policy",
        "POST /v1/analytics/events",
        "POST /v1/inference/generate",
        "POST /v1/mail/send",
        "POST /v1/secrets/{name}/link",
      ]),
    );
    expect(ops.length).toBeGreaterThanOrEqual(15);
    for (const o of ops) {
      const base = o.example && typeof o.example === "object" && !Array.isArray(o.example) ? o.example : {};
      const res = await t.request(o.method, o.url, { token: app.token, body: { ...base, zzUnknown: 1 } });
      const where = `${o.method} ${o.path}: ${JSON.stringify(res.body)}`;
      expect(res.status, where).toBe(400);
      expect(res.body.error.code, where).toBe("invalid_argument");
      expect(res.body.error.details, where).toContain('unknown field "zzUnknown"');
      // With an otherwise valid body (the documented example), the unknown field is the message itself.
      if (o.example !== undefined) expect(res.body.error.message, where).toBe('unknown field "zzUnknown"');
    }
  });

  it("says so in the OpenAPI document: every request body object is additionalProperties: false", async () => {
    const withBodies = (await operations()).filter((o) => o.op.requestBody);
    expect(withBodies.length).toBeGreaterThanOrEqual(14);
    for (const o of withBodies) {
      const schema = o.op.requestBody.content["application/json"].schema;
      expect(schema.additionalProperties, `${o.method} ${o.path}`).toBe(false);
    }
  });
});

/** POSTs `body` to `path` as the app; the error envelope's message and details. */
async function refusal(path: string, body: unknown): Promise<{ message: string; details: string[] }> {
  const res = await t.request("POST", path, { token: app.token, body });
  expect(res.status, JSON.stringify(res.body)).toBe(400);
  expect(res.body.error.code).toBe("invalid_argument");
  return res.body.error;
}

describe("unknown fields that are other services' words", () => {
  it.each([
    ["/v1/queues/strict-q", { payload: 1, delay: 60000 }, 'unknown field "delay": use "delaySeconds", in seconds'],
    ["/v1/queues/strict-q", { payload: 1, ttl: 60 }, 'unknown field "ttl": use "ttlSeconds", in seconds'],
    ["/v1/queues/strict-q", { payload: 1, jobId: "a" }, 'unknown field "jobId": use "dedupKey"'],
    ["/v1/queues/strict-q/consume", { visibilityTimeout: 1 }, 'unknown field "visibilityTimeout": use "leaseSeconds"'],
    ["/v1/queues/strict-q/consume", { WaitTimeSeconds: 1 }, 'unknown field "WaitTimeSeconds": use "waitSeconds"'],
    ["/v1/queues/strict-q/consume", { MaxNumberOfMessages: 5 }, 'unknown field "MaxNumberOfMessages": use "max"'],
    ["/v1/queues/strict-q/consume", { wait_seconds: 1 }, 'unknown field "wait_seconds": use "waitSeconds"'],
    [
      "/v1/queues/strict-q/consume",
      { stream: true },
      'unknown field "stream": not supported: a REST consume answers once; to stream messages use the StreamMessages RPC (Connect/gRPC)',
    ],
    [
      "/v1/queues/_nack",
      { receipt: "r", visibilityTimeout: 5 },
      'unknown field "visibilityTimeout": use "delaySeconds" to make a message visible again later',
    ],
    [
      "/v1/inference/generate",
      { prompt: "hi", stream: true },
      'unknown field "stream": not supported: generate answers with the whole text; there is no streaming',
    ],
    [
      "/v1/inference/generate",
      { prompt: "hi", response_format: { type: "json_object" } },
      'unknown field "response_format": not supported: no response formats (generate takes model, prompt or messages, maxTokens, temperature)',
    ],
    [
      "/v1/inference/generate",
      { prompt: "hi", tools: [] },
      'unknown field "tools": not supported: no tools (generate takes model, prompt or messages, maxTokens, temperature)',
    ],
    ["/v1/inference/generate", { prompt: "hi", max_tokens: 5 }, 'unknown field "max_tokens": use "maxTokens"'],
    [
      "/v1/analytics/query",
      { type: "signup", filter: { plan: "pro" } },
      'unknown field "filter": use "where", a list of conditions { property, op, value }',
    ],
    ["/v1/analytics/query", { type: "signup", aggregation: "sum" }, 'unknown field "aggregation": use "aggregate"'],
    ["/v1/analytics/query", { type: "signup", from: 0 }, 'unknown field "from": use "since"'],
    [
      "/v1/mail/send",
      { to: "a@example.com", subject: "s", text: "t", html: "<p>t</p>" },
      'unknown field "html": not supported: mail is plain text (text)',
    ],
  ])("POST %s %j", async (path, body, message) => {
    expect((await refusal(path, body)).message).toBe(message);
  });

  it("gives a hint only where it is true of the operation", async () => {
    // `delay` means delaySeconds on a put or a nack; a consume has no delay, so nothing is suggested.
    expect((await refusal("/v1/queues/strict-q/consume", { delay: 5 })).message).toBe('unknown field "delay"');
    expect((await refusal("/v1/queues/_nack", { receipt: "r", delay: 5 })).message).toBe(
      'unknown field "delay": use "delaySeconds", in seconds',
    );
  });

  it("takes back a policy read with GET as it is (its queue field), but not another queue's name", async () => {
    const read = await t.request("GET", "/v1/queues/strict-p/policy", { token: app.token });
    const back = await t.request("PUT", "/v1/queues/strict-p/policy", {
      token: app.token,
      body: { ...read.body, maxDeliveries: 7 },
    });
    expect(back.status, JSON.stringify(back.body)).toBe(200);
    expect(back.body).toMatchObject({ queue: "strict-p", maxDeliveries: 7 });
    const other = await t.request("PUT", "/v1/queues/strict-p/policy", {
      token: app.token,
      body: { queue: "strict-other", maxDeliveries: 3 },
    });
    expect(other.status).toBe(400);
    expect(other.body.error.message).toBe('queue: must be the path\'s queue "strict-p" when given');
  });

  it("names a field of a nested fixed shape by its path", async () => {
    const events = await refusal("/v1/analytics/events", { events: [{ type: "signup", distinct_id: "u1" }] });
    expect(events.message).toBe('unknown field "events[0].distinct_id": use "distinctId"');
    const batch = await refusal("/v1/queues/strict-q/batch", { messages: [{ payload: 1 }, { payload: 2, delay: 5 }] });
    expect(batch.message).toBe('unknown field "messages[1].delay": use "delaySeconds", in seconds');
    const chat = await refusal("/v1/inference/generate", { messages: [{ role: "user", content: "hi", name: "x" }] });
    expect(chat.message).toBe('unknown field "messages[0].name"');
  });

  it("names every unknown field in details, and refuses nothing the operation defines", async () => {
    const error = await refusal("/v1/queues/strict-q", { payload: 1, delay: 1, attempts: 2 });
    expect(error.details).toEqual([
      'unknown field "delay": use "delaySeconds", in seconds; unknown field "attempts": not supported: set maxDeliveries in the queue\'s policy (PUT /v1/queues/{queue}/policy)',
    ]);
    // Free-form maps stay free: any payload and any event property name reach the implementation.
    const put = await t.request("POST", "/v1/queues/strict-q", {
      token: app.token,
      body: { payload: { delay: 1, anything: { stream: true } }, delaySeconds: 0, ttlSeconds: 60, dedupKey: "k1" },
    });
    expect(put.status, JSON.stringify(put.body)).toBe(200);
    const consumed = await t.request("POST", "/v1/queues/strict-q/consume", {
      token: app.token,
      body: { waitSeconds: 0, leaseSeconds: 30, max: 1 },
    });
    expect(consumed.status).toBe(200);
    expect(consumed.body.messages[0].payload).toEqual({ delay: 1, anything: { stream: true } });
  });
});

describe("Connect JSON", () => {
  it("ignores an unknown field, as protobuf's binary encoding does (docs/api.md says why)", async () => {
    const res = await fetch(t.url + "/platform.queues.v1.QueueService/PutMessage", {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${app.token}` },
      body: JSON.stringify({ queue: "strict-connect", payload: 1, delay: 60000 }),
    });
    expect(res.status).toBe(200);
    expect((await res.json()).id).toEqual(expect.any(String));
  });
});
