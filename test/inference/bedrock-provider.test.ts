/**
 * The Bedrock provider with the real `@aws-sdk/client-bedrock-runtime`
 * client, reaching an HTTP/2 stand-in of Bedrock's REST protocol through
 * `AWS_ENDPOINT_URL_BEDROCK_RUNTIME`: request mapping, stopReason mapping,
 * usage settling, Bedrock's errors, a provider failing midway, Titan's
 * bounded concurrency, Cohere's batches, and exact caps under concurrency.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import pino from "pino";
import { FinishReason, InferenceService, Role } from "../../gen/platform/inference/v1/inference_pb.js";
import { startServer, useTestApp, useTestServer } from "../support/harness.ts";
import { createBedrockProvider, stopReasonToFinishReason } from "../../src/inference/bedrock-provider.ts";
import { estimateTokens } from "../../src/inference/token-estimator.ts";
import { startBedrockFixture, type BedrockFixture, type FixtureRequest } from "./bedrock-fixture.ts";

// The SDK signs every request; any credentials do for the stand-in.
process.env.AWS_ACCESS_KEY_ID = "AKIDPLATFORMTEST";
process.env.AWS_SECRET_ACCESS_KEY = "platform-test-secret";
process.env.AWS_EC2_METADATA_DISABLED = "true";

const FAST_MODEL_ID = "anthropic.claude-3-haiku-20240307-v1:0";
const LEAKY = "arn:aws:bedrock:us-east-1:123456789012:foundation-model/secret-internal";

let fixture: BedrockFixture;

beforeAll(async () => {
  fixture = await startBedrockFixture();
});
// Closed after the server (after hooks run in reverse order).
afterAll(() => fixture?.close());
const t = useTestServer(() => ({
  env: {
    INFERENCE_PROVIDER: "bedrock",
    AWS_REGION: "us-east-1",
    AWS_ENDPOINT_URL_BEDROCK_RUNTIME: fixture.url,
    BEDROCK_FAST_MODEL: FAST_MODEL_ID,
  },
}));
const app = useTestApp(t);
beforeEach(() => fixture.reset());

const generate = (body: unknown, token = app.token) => t.request("POST", "/v1/inference/generate", { token, body });
const embed = (body: unknown, token = app.token) => t.request("POST", "/v1/inference/embed", { token, body });

function converseAnswer(
  text: string[] | string,
  stopReason = "end_turn",
  usage = { inputTokens: 17, outputTokens: 5 },
) {
  const blocks = (Array.isArray(text) ? text : [text]).map((t) => ({ text: t }));
  return {
    json: {
      output: { message: { role: "assistant", content: blocks } },
      stopReason,
      usage: { ...usage, totalTokens: usage.inputTokens + usage.outputTokens },
      metrics: { latencyMs: 12 },
    },
  };
}

/** Titan's answer: a vector that encodes the text's length, so order can be checked. */
function titanAnswer(req: FixtureRequest) {
  const text: string = req.body.inputText;
  return { json: { embedding: [text.length, 1, 0.5, -0.25], inputTextTokenCount: text.length + 1 } };
}

async function fastUsed(appId: string): Promise<number> {
  return Number((await t.admin.getUsage({ appId })).fastTokens!.used);
}
async function embedUsed(appId: string): Promise<number> {
  return Number((await t.admin.getUsage({ appId })).embedTokens!.used);
}

describe("shutdown with a model call in flight", () => {
  it("a Generate served by Connect's own handler (here: it carries a deadline) is finished by the drain, not cut off", async () => {
    const server = await startServer({
      env: {
        INFERENCE_PROVIDER: "bedrock",
        AWS_REGION: "us-east-1",
        AWS_ENDPOINT_URL_BEDROCK_RUNTIME: fixture.url,
        BEDROCK_FAST_MODEL: FAST_MODEL_ID,
      },
    });
    let closed: Promise<void> | undefined;
    try {
      const a = await server.createApp();
      fixture.handle = () => ({ ...converseAnswer("finished"), delayMs: 800 });
      const answer = fetch(`${server.url}/platform.inference.v1.InferenceService/Generate`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          authorization: `Bearer ${a.token}`,
          "connect-timeout-ms": "30000",
        },
        body: JSON.stringify({ messages: [{ role: "ROLE_USER", content: "hi" }], maxTokens: 10 }),
      });
      // The call reached the model; the server is told to stop while it waits for the answer.
      const started = Date.now();
      while (fixture.requests.length === 0 && Date.now() - started < 10_000)
        await new Promise((resolve) => setImmediate(resolve));
      expect(fixture.requests).toHaveLength(1);
      closed = server.close();
      const res = await answer;
      expect(res.status).toBe(200);
      expect(((await res.json()) as { text: string }).text).toBe("finished");
    } finally {
      await (closed ?? server.close());
    }
  });
});

describe("generate through Converse", () => {
  it("maps system messages to system, merges same-role turns, and sends inferenceConfig", async () => {
    fixture.handle = () => converseAnswer(["Paris", " is the capital."]);
    const fresh = await t.createApp();
    const res = await generate(
      {
        messages: [
          { role: "system", content: "You are terse." },
          { role: "user", content: "Capital of France?" },
          { role: "assistant", content: "Which France?" },
          { role: "system", content: "Answer in English." },
          { role: "user", content: "The country." },
          { role: "user", content: "Please." },
        ],
        maxTokens: 200,
        temperature: 0.3,
      },
      fresh.token,
    );
    expect(res.status).toBe(200);
    expect(fixture.requests).toHaveLength(1);
    const req = fixture.requests[0];
    expect(req.operation).toBe("converse");
    expect(req.modelId).toBe(FAST_MODEL_ID);
    expect(String(req.headers.authorization)).toMatch(
      /^AWS4-HMAC-SHA256 Credential=AKIDPLATFORMTEST\/\d{8}\/us-east-1\/bedrock\//,
    );
    expect(req.body).toEqual({
      system: [{ text: "You are terse." }, { text: "Answer in English." }],
      messages: [
        { role: "user", content: [{ text: "Capital of France?" }] },
        { role: "assistant", content: [{ text: "Which France?" }] },
        { role: "user", content: [{ text: "The country." }, { text: "Please." }] },
      ],
      inferenceConfig: { maxTokens: 200, temperature: 0.3 },
    });
    expect(res.body).toEqual({
      text: "Paris is the capital.",
      model: "platform/fast",
      finishReason: "stop",
      usage: { inputTokens: 17, outputTokens: 5 },
      remainingToday: 200000 - 22,
    });
  });

  it("sends a prompt as one user message, the default maxTokens and temperature, and no system", async () => {
    fixture.handle = () => converseAnswer("ok");
    const res = await generate({ prompt: "hello" });
    expect(res.status).toBe(200);
    expect(fixture.requests[0].body).toEqual({
      messages: [{ role: "user", content: [{ text: "hello" }] }],
      inferenceConfig: { maxTokens: 1024, temperature: 0.7 },
    });
  });

  it("clamps maxTokens to 4096 and temperature to Bedrock's 0-1", async () => {
    fixture.handle = () => converseAnswer("ok");
    expect((await generate({ prompt: "hello", maxTokens: 100000, temperature: 1.8 })).status).toBe(200);
    expect(fixture.requests[0].body.inferenceConfig).toEqual({ maxTokens: 4096, temperature: 1 });
  });

  it.each([
    ["end_turn", "stop"],
    ["stop_sequence", "stop"],
    ["max_tokens", "length"],
    ["guardrail_intervened", "other"],
    ["content_filtered", "other"],
    ["tool_use", "other"],
    ["model_context_window_exceeded", "other"],
  ])("maps stopReason %s to finishReason %s", async (stopReason, finishReason) => {
    fixture.handle = () => converseAnswer("x", stopReason);
    const res = await generate({ prompt: "hello", maxTokens: 8 });
    expect(res.body.finishReason).toBe(finishReason);
    expect(stopReasonToFinishReason(stopReason)).toBe(finishReason);
  });

  it("settles the reservation to the usage Bedrock reports", async () => {
    const fresh = await t.createApp();
    await t.admin.updateApp({ appId: fresh.id, limits: { fastTokensPerDay: 5000 } });
    // Bedrock counts more input tokens than the estimate and fewer output tokens than maxTokens.
    fixture.handle = () => converseAnswer("fine", "end_turn", { inputTokens: 40, outputTokens: 3 });
    const res = await generate({ prompt: "x".repeat(100), maxTokens: 1000 }, fresh.token);
    expect(res.status).toBe(200);
    expect(res.body.usage).toEqual({ inputTokens: 40, outputTokens: 3 });
    expect(res.body.remainingToday).toBe(5000 - 43);
    expect(await fastUsed(fresh.id)).toBe(43);
    const models = await t.request("GET", "/v1/inference/models", { token: fresh.token });
    expect(models.body.models[0].remainingToday).toBe(5000 - 43);
  });

  it("answers over gRPC with the same mapping", async () => {
    fixture.handle = () => converseAnswer("cut", "max_tokens", { inputTokens: 2, outputTokens: 4 });
    const res = await t.client(InferenceService, app.token, "grpc").generate({
      messages: [
        { role: Role.SYSTEM, content: "sys" },
        { role: Role.USER, content: "hi" },
      ],
      maxTokens: 4,
    });
    expect(res.finishReason).toBe(FinishReason.LENGTH);
    expect(res.text).toBe("cut");
    expect(res.usage!.inputTokens).toBe(2n);
    expect(fixture.requests[0].body.system).toEqual([{ text: "sys" }]);
  });
});

describe("Bedrock errors", () => {
  async function expectNothingCharged(body: unknown, status: number, code: string) {
    const fresh = await t.createApp();
    const res = await generate(body, fresh.token);
    expect(res.status).toBe(status);
    expect(res.body.error.code).toBe(code);
    expect(JSON.stringify(res.body)).not.toContain("123456789012");
    expect(JSON.stringify(res.body)).not.toContain("secret-internal");
    expect(await fastUsed(fresh.id)).toBe(0);
    return res;
  }

  it("a ValidationException about the input is 400, without Bedrock's wording", async () => {
    fixture.handle = () => ({
      error: "ValidationException",
      status: 400,
      message: `Input is too long for requested model ${LEAKY}.`,
    });
    const res = await expectNothingCharged({ prompt: "hello" }, 400, "invalid_argument");
    expect(res.body.error.message).toMatch(/refused the input/);
  });

  it("a ValidationException about the configured model is 502: not the app's fault", async () => {
    fixture.handle = () => ({
      error: "ValidationException",
      status: 400,
      message: "The provided model identifier is invalid.",
    });
    await expectNothingCharged({ prompt: "hello" }, 502, "upstream_error");
  });

  it("a ThrottlingException is 502 with a short Retry-After, and releases the allowance", async () => {
    fixture.handle = () => ({
      error: "ThrottlingException",
      status: 429,
      message: `Too many requests, please wait. ${LEAKY}`,
    });
    const res = await expectNothingCharged({ prompt: "hello" }, 502, "upstream_error");
    expect(res.body.error.message).toMatch(/busy/);
    expect(Number(res.headers.get("retry-after"))).toBeGreaterThan(0);
    expect(Number(res.headers.get("retry-after"))).toBeLessThan(60);
    // The SDK retried before giving up.
    expect(fixture.requests.length).toBeGreaterThanOrEqual(2);
  });

  it.each([
    ["AccessDeniedException", 403],
    ["ResourceNotFoundException", 404],
    ["InternalServerException", 500],
    ["ServiceUnavailableException", 503],
    ["ModelTimeoutException", 408],
    ["ModelErrorException", 424],
  ])("%s is 502 upstream_error and charges nothing", async (error, status) => {
    fixture.handle = () => ({ error, status, message: `failure at ${LEAKY}` });
    await expectNothingCharged({ prompt: "hello" }, 502, "upstream_error");
  });

  it("the provider failing midway (the stream is reset) is 502 and releases the allowance", async () => {
    fixture.handle = () => ({ breakMidway: true });
    await expectNothingCharged({ prompt: "hello", maxTokens: 300 }, 502, "upstream_error");
    expect(fixture.requests.length).toBeGreaterThanOrEqual(1);
  });

  it("a client that goes away cancels the Bedrock call and gets its allowance back", async () => {
    const fresh = await t.createApp();
    let arrived!: (req: FixtureRequest) => void;
    const arrival = new Promise<FixtureRequest>((resolve) => (arrived = resolve));
    // Never answers: only the cancellation can end this call.
    fixture.handle = (req) => {
      arrived(req);
      return new Promise(() => {});
    };
    const abort = new AbortController();
    const call = fetch(`${t.url}/v1/inference/generate`, {
      method: "POST",
      headers: { authorization: `Bearer ${fresh.token}`, "content-type": "application/json" },
      body: JSON.stringify({ prompt: "hello", maxTokens: 500 }),
      signal: abort.signal,
    }).catch(() => "aborted");
    const req = await arrival;
    expect(await fastUsed(fresh.id)).toBe(2 + 500);
    abort.abort();
    expect(await call).toBe("aborted");
    await req.closed;
    // The release follows the cancelled stream by a database round trip, which nothing outside can await.
    await expect.poll(() => fastUsed(fresh.id), { timeout: 5000, interval: 20 }).toBe(0);
  });

  it("an answer that is not JSON is 502 and charges nothing", async () => {
    fixture.handle = () => ({ raw: "<html>gateway</html>" });
    await expectNothingCharged({ prompt: "hello" }, 502, "upstream_error");
  });

  it("is Unavailable over gRPC", async () => {
    fixture.handle = () => ({ error: "InternalServerException", status: 500, message: LEAKY });
    const err = await t
      .client(InferenceService, app.token, "grpc")
      .generate({ prompt: "x" })
      .catch((e: unknown) => ConnectError.from(e));
    expect((err as ConnectError).code).toBe(Code.Unavailable);
    expect((err as ConnectError).rawMessage).not.toContain("123456789012");
  });
});

describe("embed through InvokeModel on Titan Text Embeddings", () => {
  it("sends one text per call, keeps the order, and counts Titan's tokens", async () => {
    fixture.handle = titanAnswer;
    const fresh = await t.createApp();
    const input = ["a", "bb", "ccc", "dddd", "eeeee"];
    const res = await embed({ input }, fresh.token);
    expect(res.status).toBe(200);
    expect(fixture.requests).toHaveLength(5);
    for (const req of fixture.requests) {
      expect(req.operation).toBe("invoke");
      expect(req.modelId).toBe("amazon.titan-embed-text-v2:0");
      expect(Object.keys(req.body)).toEqual(["inputText"]);
    }
    expect(fixture.requests.map((r) => r.body.inputText).sort()).toEqual(input);
    expect(res.body.embeddings.map((v: number[]) => v[0])).toEqual([1, 2, 3, 4, 5]);
    expect(res.body.dimensions).toBe(4);
    expect(res.body.model).toBe("platform/embed");
    // Titan's inputTextTokenCount (length + 1 each), not the estimate.
    expect(res.body.usage).toEqual({ tokens: 2 + 3 + 4 + 5 + 6 });
    expect(await embedUsed(fresh.id)).toBe(20);
    expect(res.body.remainingToday).toBe(1000000 - 20);
  });

  it("does not take a Titan token count that is not a whole number of tokens: the estimate is charged", async () => {
    // A negative or fractional count in the body would lower the charge (even below zero for the request).
    fixture.handle = (req) => ({
      json: { embedding: [1, 2], inputTextTokenCount: req.body.inputText === "a" ? -1_000 : 2.5 },
    });
    const fresh = await t.createApp();
    const res = await embed({ input: ["a", "bb"] }, fresh.token);
    expect(res.status).toBe(200);
    const charged = res.body.usage.tokens as number;
    expect(Number.isInteger(charged) && charged > 0).toBe(true);
    expect(await embedUsed(fresh.id)).toBe(charged);
  });

  it("runs the calls of one request concurrently, with a bound", async () => {
    fixture.handle = (req) => ({ ...titanAnswer(req), delayMs: 30 });
    const res = await embed({ input: Array.from({ length: 40 }, (_, i) => `text ${i}`) });
    expect(res.status).toBe(200);
    expect(fixture.requests).toHaveLength(40);
    expect(fixture.maxInFlight).toBeGreaterThan(1);
    expect(fixture.maxInFlight).toBeLessThanOrEqual(8);
  });

  it("one failed call fails the request with 502 and releases the allowance", async () => {
    fixture.handle = (req) => (req.body.inputText === "bad" ? { breakMidway: true } : titanAnswer(req));
    const fresh = await t.createApp();
    const res = await embed({ input: ["good", "bad", "fine"] }, fresh.token);
    expect(res.status).toBe(502);
    expect(res.body.error.code).toBe("upstream_error");
    expect(await embedUsed(fresh.id)).toBe(0);
  });

  it("a ValidationException on an input is 400", async () => {
    fixture.handle = () => ({
      error: "ValidationException",
      status: 400,
      message: "400 Bad Request: Too many input tokens.",
    });
    const res = await embed({ input: "hello" });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe("invalid_argument");
  });

  it("a malformed answer is 502", async () => {
    fixture.handle = () => ({ json: { embedding: "nope" } });
    expect((await embed({ input: "hello" })).status).toBe(502);
  });
});

describe("embed on Cohere Embed (the provider alone, with the real client)", () => {
  const provider = () =>
    createBedrockProvider({
      region: "us-east-1",
      endpoint: fixture.url,
      fastModel: FAST_MODEL_ID,
      embedModel: "cohere.embed-multilingual-v3",
      logger: pino({ level: "silent" }),
    });

  it("sends batches of up to 96 texts and counts tokens from the response header", async () => {
    fixture.handle = (req) => ({
      json: {
        id: "x",
        response_type: "embeddings_floats",
        texts: req.body.texts,
        embeddings: req.body.texts.map((s: string) => [s.length, 0, 1]),
      },
      headers: { "x-amzn-bedrock-input-token-count": String(req.body.texts.length * 3) },
    });
    const p = provider();
    try {
      const texts = Array.from({ length: 150 }, (_, i) => "y".repeat(i + 1));
      const result = await p.embed(texts, new AbortController().signal);
      expect(fixture.requests.map((r) => r.body.texts.length)).toEqual([96, 54]);
      expect(fixture.requests[0].body.input_type).toBe("search_document");
      expect(fixture.requests[0].modelId).toBe("cohere.embed-multilingual-v3");
      expect(result.embeddings.map((v) => v[0])).toEqual(texts.map((s) => s.length));
      expect(result.dimensions).toBe(3);
      expect(result.tokens).toBe(150 * 3);
    } finally {
      p.close?.();
    }
  });

  it("reads `embeddings.float` and falls back to the estimator without a token header", async () => {
    fixture.handle = (req) => ({ json: { embeddings: { float: req.body.texts.map(() => [0.5, 0.5]) } } });
    const p = provider();
    try {
      const result = await p.embed(["abcdefgh", "ab"], new AbortController().signal);
      expect(result.embeddings).toEqual([
        [0.5, 0.5],
        [0.5, 0.5],
      ]);
      expect(result.tokens).toBe(estimateTokens("abcdefgh") + estimateTokens("ab"));
    } finally {
      p.close?.();
    }
  });
});

describe("caps under concurrency on Bedrock", () => {
  it("200 concurrent generates never overspend a small cap, and usage is what Bedrock reported", async () => {
    const fresh = await t.createApp();
    const cap = 2000;
    await t.admin.updateApp({ appId: fresh.id, limits: { fastTokensPerDay: cap } });
    // Reserved per request: 3 (estimate) + 50 = 53; Bedrock reports 4 + 20 = 24.
    fixture.handle = () => ({
      ...converseAnswer("y".repeat(80), "end_turn", { inputTokens: 4, outputTokens: 20 }),
      delayMs: 5,
    });
    const results = await Promise.all(
      Array.from({ length: 200 }, () => generate({ prompt: "hello world", maxTokens: 50 }, fresh.token)),
    );
    const ok = results.filter((r) => r.status === 200);
    const refused = results.filter((r) => r.status !== 200);
    expect(refused.every((r) => r.status === 429 && r.body.error.code === "quota_exceeded")).toBe(true);
    expect(ok.length).toBeGreaterThanOrEqual(Math.floor(cap / 53));
    const used = await fastUsed(fresh.id);
    expect(used).toBe(ok.length * 24);
    expect(used).toBeLessThanOrEqual(cap);
  });
});
