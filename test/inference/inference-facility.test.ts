/**
 * The inference facility over REST and Connect/gRPC on the local provider:
 * every rule and limit of docs/api.md#inference, the models listing, token allowances
 * (reserve, settle, release) and exact caps under real concurrency.
 */
import { describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { FinishReason, InferenceService, ModelKind, Role } from "../../gen/platform/inference/v1/inference_pb.js";
import { useTestApp, useTestServer } from "../support/harness.ts";
import { estimateTokens } from "../../src/inference/token-estimator.ts";

const t = useTestServer();
const app = useTestApp(t);

const generate = (body: unknown, token = app.token) => t.request("POST", "/v1/inference/generate", { token, body });
const embed = (body: unknown, token = app.token) => t.request("POST", "/v1/inference/embed", { token, body });

function cosine(a: number[], b: number[]): number {
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i] * b[i];
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  return dot / Math.sqrt(na * nb);
}

async function usage(appId: string) {
  const u = await t.admin.getUsage({ appId });
  return { fast: Number(u.fastTokens!.used), embed: Number(u.embedTokens!.used) };
}

describe("GET /v1/inference/models", () => {
  it("lists platform/fast and platform/embed with the daily allowance and what is left", async () => {
    const fresh = await t.createApp();
    const res = await t.request("GET", "/v1/inference/models", { token: fresh.token });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      models: [
        { name: "platform/fast", kind: "generate", tokensPerDay: 200000, remainingToday: 200000 },
        { name: "platform/embed", kind: "embed", tokensPerDay: 1000000, remainingToday: 1000000 },
      ],
    });
    const g = await generate({ prompt: "hello there", maxTokens: 16 }, fresh.token);
    const e = await embed({ input: "hello there" }, fresh.token);
    const after = await t.request("GET", "/v1/inference/models", { token: fresh.token });
    expect(after.body.models[0].remainingToday).toBe(g.body.remainingToday);
    expect(after.body.models[1].remainingToday).toBe(e.body.remainingToday);
    expect(after.body.models[0].remainingToday).toBe(200000 - g.body.usage.inputTokens - g.body.usage.outputTokens);
  });

  it("follows the app's limits and is open to a stopped app", async () => {
    const limited = await t.createApp();
    await t.admin.updateApp({ appId: limited.id, limits: { fastTokensPerDay: 1234, embedTokensPerDay: 99 } });
    await limited.stop();
    const res = await t.request("GET", "/v1/inference/models", { token: limited.token });
    expect(res.status).toBe(200);
    expect(res.body.models.map((m: { tokensPerDay: number }) => m.tokensPerDay)).toEqual([1234, 99]);
  });

  it("is the same over gRPC", async () => {
    const client = t.client(InferenceService, app.token, "grpc");
    const res = await client.listModels({});
    expect(res.models.map((m) => [m.name, m.kind])).toEqual([
      ["platform/fast", ModelKind.GENERATE],
      ["platform/embed", ModelKind.EMBED],
    ]);
  });
});

describe("POST /v1/inference/generate on the local provider", () => {
  it("answers a prompt, says it is the offline provider, and charges input plus output tokens", async () => {
    const fresh = await t.createApp();
    const prompt = "What is the capital of France?";
    const res = await generate({ prompt }, fresh.token);
    expect(res.status).toBe(200);
    expect(res.body.model).toBe("platform/fast");
    expect(res.body.text).toMatch(/^\[offline provider\]/);
    expect(res.body.text).toContain("not from a language model");
    expect(res.body.text).toContain(prompt);
    expect(res.body.finishReason).toBe("stop");
    expect(res.body.usage).toEqual({
      inputTokens: estimateTokens(prompt),
      outputTokens: estimateTokens(res.body.text),
    });
    const spent = res.body.usage.inputTokens + res.body.usage.outputTokens;
    expect(res.body.remainingToday).toBe(200000 - spent);
    expect((await usage(fresh.id)).fast).toBe(spent);
  });

  it("is deterministic", async () => {
    const a = await generate({ messages: [{ role: "user", content: "same" }], temperature: 1.9 });
    const b = await generate({ messages: [{ role: "user", content: "same" }], temperature: 0 });
    expect(a.body.text).toBe(b.body.text);
  });

  it("honours maxTokens: cut off with finishReason length", async () => {
    const res = await generate({ prompt: "tell me everything", maxTokens: 5 });
    expect(res.status).toBe(200);
    expect(res.body.finishReason).toBe("length");
    expect(res.body.usage.outputTokens).toBe(5);
    expect(res.body.text.length).toBeLessThanOrEqual(20);
  });

  it("clamps maxTokens above 4096 instead of refusing", async () => {
    const fresh = await t.createApp();
    // Reserved: input + 4096 (clamped), which fits a 4100 cap; 1e12 unclamped would not.
    await t.admin.updateApp({ appId: fresh.id, limits: { fastTokensPerDay: 4100 } });
    const res = await generate({ prompt: "hi", maxTokens: 1e12 }, fresh.token);
    expect(res.status).toBe(200);
    const over = await generate({ prompt: "hi".repeat(40), maxTokens: 5000 }, fresh.token);
    expect(over.status).toBe(429);
  });

  it("takes a conversation with system, user and assistant turns", async () => {
    const res = await generate({
      model: "platform/fast",
      messages: [
        { role: "system", content: "be brief" },
        { role: "user", content: "first question" },
        { role: "assistant", content: "first answer" },
        { role: "user", content: "second question" },
      ],
    });
    expect(res.status).toBe(200);
    expect(res.body.text).toContain("4 messages");
    expect(res.body.text).toContain("second question");
    expect(res.body.usage.inputTokens).toBe(
      ["be brief", "first question", "first answer", "second question"].reduce((n, s) => n + estimateTokens(s), 0),
    );
  });

  const bad: [string, unknown, RegExp][] = [
    ["neither prompt nor messages", {}, /prompt, messages/],
    ["both prompt and messages", { prompt: "a", messages: [{ role: "user", content: "b" }] }, /not both/],
    ["both, with empty messages", { prompt: "a", messages: [] }, /not both/],
    ["empty messages", { messages: [] }, /messages: must have 1 to 64/],
    [
      "65 messages",
      { messages: Array.from({ length: 65 }, () => ({ role: "user", content: "x" })) },
      /messages: must have 1 to 64/,
    ],
    ["empty prompt", { prompt: "" }, /prompt: must be 1 to 100000/],
    ["too long a prompt", { prompt: "x".repeat(100001) }, /prompt: must be 1 to 100000/],
    ["prompt not a string", { prompt: 42 }, /prompt: must be a string/],
    [
      "unknown role",
      { messages: [{ role: "tool", content: "x" }] },
      /messages\[0\]\.role: must be system, user or assistant/,
    ],
    [
      "empty content",
      {
        messages: [
          { role: "user", content: "ok" },
          { role: "user", content: "" },
        ],
      },
      /messages\[1\]\.content: must be 1 to 100000/,
    ],
    ["too long content", { messages: [{ role: "user", content: "x".repeat(100001) }] }, /messages\[0\]\.content/],
    [
      "a lone surrogate",
      { messages: [{ role: "user", content: "ok \ud800" }] },
      /messages\[0\]\.content: must be text/,
    ],
    [
      "content not a string",
      { messages: [{ role: "user", content: ["x"] }] },
      /messages\[0\]\.content: must be a string/,
    ],
    ["a message that is not an object", { messages: ["hi"] }, /messages\[0\]/],
    ["only system messages", { messages: [{ role: "system", content: "x" }] }, /at least one user or assistant/],
    ["temperature above 2", { prompt: "x", temperature: 2.01 }, /temperature: must be a number from 0 to 2/],
    ["negative temperature", { prompt: "x", temperature: -0.1 }, /temperature/],
    ["temperature not a number", { prompt: "x", temperature: "hot" }, /temperature/],
    ["maxTokens 0", { prompt: "x", maxTokens: 0 }, /maxTokens: must be an integer of at least 1/],
    ["maxTokens not an integer", { prompt: "x", maxTokens: 1.5 }, /maxTokens: must be an integer/],
    ["maxTokens a string", { prompt: "x", maxTokens: "10" }, /maxTokens/],
    ["the embedding model", { model: "platform/embed", prompt: "x" }, /model: platform\/embed is an embedding model/],
    ["an unknown model", { model: "gpt-9", prompt: "x" }, /model: unknown model/],
    ["not an object", ["prompt"], /body: must be a JSON object/],
  ];
  for (const [name, body, message] of bad) {
    it(`refuses ${name} with 400 and charges nothing`, async () => {
      const before = await usage(app.id);
      const res = await generate(body);
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe("invalid_argument");
      expect(res.body.error.message).toMatch(message);
      expect(await usage(app.id)).toEqual(before);
    });
  }

  it("accepts the limits themselves: 64 messages, 100000 characters, temperature 0 and 2", async () => {
    const many = Array.from({ length: 64 }, (_, i) => ({ role: i % 2 ? "assistant" : "user", content: "x" }));
    expect((await generate({ messages: many, maxTokens: 1 })).status).toBe(200);
    expect((await generate({ prompt: "y".repeat(100000), maxTokens: 1 })).status).toBe(200);
    // 100000 emoji are 200000 UTF-16 units but 100000 characters.
    expect((await generate({ prompt: "😀".repeat(100000), maxTokens: 1 })).status).toBe(200);
    expect((await generate({ prompt: "x", temperature: 0, maxTokens: 1 })).status).toBe(200);
    expect((await generate({ prompt: "x", temperature: 2, maxTokens: 1 })).status).toBe(200);
    expect((await generate({ prompt: "x", model: null, maxTokens: null, temperature: null })).status).toBe(200);
  });

  it("answers 429 quota_exceeded with Retry-After when the request would not fit, and takes nothing", async () => {
    const fresh = await t.createApp();
    await t.admin.updateApp({ appId: fresh.id, limits: { fastTokensPerDay: 200 } });
    const res = await generate({ prompt: "hello" }, fresh.token); // 2 + 1024 > 200
    expect(res.status).toBe(429);
    expect(res.body.error.code).toBe("quota_exceeded");
    expect(Number(res.headers.get("retry-after"))).toBeGreaterThan(0);
    expect((await usage(fresh.id)).fast).toBe(0);
    const fits = await generate({ prompt: "hello", maxTokens: 150 }, fresh.token);
    expect(fits.status).toBe(200);
    expect(fits.body.finishReason).toBe("stop");
    // Settled to the real use, not to the 152 reserved.
    const spent = fits.body.usage.inputTokens + fits.body.usage.outputTokens;
    expect(spent).toBeLessThan(152);
    expect(fits.body.remainingToday).toBe(200 - spent);
    expect((await usage(fresh.id)).fast).toBe(spent);
  });

  it("never overspends a small cap under 200 concurrent requests", async () => {
    const fresh = await t.createApp();
    const cap = 1000;
    await t.admin.updateApp({ appId: fresh.id, limits: { fastTokensPerDay: cap } });
    // Each reserves 1 + 40 = 41 and spends 41 (cut at maxTokens): at most 24 fit.
    const results = await Promise.all(
      Array.from({ length: 200 }, () => generate({ prompt: "go", maxTokens: 40 }, fresh.token)),
    );
    const ok = results.filter((r) => r.status === 200);
    const refused = results.filter((r) => r.status !== 200);
    expect(refused.every((r) => r.status === 429 && r.body.error.code === "quota_exceeded")).toBe(true);
    const spent = ok.reduce((n, r) => n + r.body.usage.inputTokens + r.body.usage.outputTokens, 0);
    expect(ok.length).toBe(Math.floor(cap / 41));
    const used = (await usage(fresh.id)).fast;
    expect(used).toBe(spent);
    expect(used).toBeLessThanOrEqual(cap);
  });

  it("is the same implementation over gRPC: answers, validates and maps enums", async () => {
    const client = t.client(InferenceService, app.token, "grpc");
    const res = await client.generate({ messages: [{ role: Role.USER, content: "hello over grpc" }], maxTokens: 3 });
    expect(res.model).toBe("platform/fast");
    expect(res.finishReason).toBe(FinishReason.LENGTH);
    expect(res.usage!.outputTokens).toBe(3n);
    expect(res.remainingToday).toBeGreaterThan(0n);

    const refusals: [Parameters<typeof client.generate>[0], RegExp][] = [
      [{}, /exactly one of prompt and messages/],
      [{ prompt: "a", messages: [{ role: Role.USER, content: "b" }] }, /not both/],
      [{ messages: [{ role: Role.UNSPECIFIED, content: "b" }] }, /messages\[0\]\.role/],
      [{ prompt: "x", temperature: Number.NaN }, /temperature/],
      [{ prompt: "x", maxTokens: -3 }, /maxTokens/],
      [{ prompt: "x", model: "platform/embed" }, /embedding model/],
      [{ prompt: "" }, /prompt: must be 1 to 100000/],
    ];
    for (const [req, message] of refusals) {
      const err = await client.generate(req).then(
        () => undefined,
        (e: unknown) => ConnectError.from(e),
      );
      expect(err?.code, String(message)).toBe(Code.InvalidArgument);
      expect(err?.rawMessage).toMatch(message);
    }
  });

  it("refuses a stopped app with 403 over REST and PermissionDenied over gRPC", async () => {
    const stopped = await t.createApp();
    await stopped.stop();
    const res = await generate({ prompt: "x" }, stopped.token);
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe("app_stopped");
    const err = await t
      .client(InferenceService, stopped.token, "grpc")
      .generate({ prompt: "x" })
      .catch((e: unknown) => ConnectError.from(e));
    expect((err as ConnectError).code).toBe(Code.PermissionDenied);
  });
});

describe("POST /v1/inference/embed on the local provider", () => {
  it("embeds a string as one L2-normalised vector and charges the estimated tokens", async () => {
    const fresh = await t.createApp();
    const res = await embed({ input: "the quick brown fox" }, fresh.token);
    expect(res.status).toBe(200);
    expect(res.body.model).toBe("platform/embed");
    expect(res.body.dimensions).toBe(256);
    expect(res.body.embeddings).toHaveLength(1);
    expect(res.body.embeddings[0]).toHaveLength(256);
    const norm = Math.sqrt(res.body.embeddings[0].reduce((n: number, v: number) => n + v * v, 0));
    expect(norm).toBeCloseTo(1, 5);
    expect(res.body.usage).toEqual({ tokens: estimateTokens("the quick brown fox") });
    expect(res.body.remainingToday).toBe(1000000 - res.body.usage.tokens);
    expect((await usage(fresh.id)).embed).toBe(res.body.usage.tokens);
  });

  it("embeds an array in order, and similar texts really are closer", async () => {
    const texts = [
      "How do I reset my account password?",
      "I forgot my password and need to reset it for my account",
      "The weather in Lisbon is sunny with light winds",
      "How do I reset my account password?",
    ];
    const res = await embed({ input: texts, model: "platform/embed" });
    expect(res.status).toBe(200);
    const [a, b, c, d] = res.body.embeddings as number[][];
    expect(res.body.embeddings).toHaveLength(4);
    expect(a).toEqual(d);
    expect(cosine(a, b)).toBeGreaterThan(cosine(a, c) + 0.2);
    expect(cosine(a, b)).toBeGreaterThan(cosine(b, c) + 0.2);
    expect(res.body.usage.tokens).toBe(texts.reduce((n, s) => n + estimateTokens(s), 0));
  });

  const bad: [string, unknown, RegExp][] = [
    ["no input", {}, /input: is required/],
    ["an empty string", { input: "" }, /input: must be 1 to 100000/],
    ["an empty array", { input: [] }, /input: must have at least 1 item/],
    ["97 inputs", { input: Array.from({ length: 97 }, () => "x") }, /input: must have at most 96/],
    ["a non-string item", { input: ["a", 2] }, /input\[1\]: must be a string/],
    ["an empty item", { input: ["a", ""] }, /input\[1\]: must be 1 to 100000/],
    ["too long an item", { input: ["a", "x".repeat(100001)] }, /input\[1\]/],
    ["a lone surrogate", { input: ["a", "\udfff"] }, /input\[1\]: must be text/],
    ["input of the wrong type", { input: { text: "a" } }, /input: must be a string or an array of strings/],
    ["the generation model", { input: "a", model: "platform/fast" }, /model: platform\/fast is a generation model/],
    ["an unknown model", { input: "a", model: "titan" }, /model: unknown model/],
    ["a model that is not a string", { input: "a", model: 1 }, /model: must be a string/],
  ];
  for (const [name, body, message] of bad) {
    it(`refuses ${name} with 400 and charges nothing`, async () => {
      const before = await usage(app.id);
      const res = await embed(body);
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe("invalid_argument");
      expect(res.body.error.message).toMatch(message);
      expect(await usage(app.id)).toEqual(before);
    });
  }

  it("accepts 96 inputs of 100000 characters when the allowance allows", async () => {
    const big = await t.createApp();
    await t.admin.updateApp({ appId: big.id, limits: { embedTokensPerDay: 3_000_000 } });
    const res = await embed({ input: Array.from({ length: 96 }, (_, i) => `${i} `.padEnd(100000, "z")) }, big.token);
    expect(res.status).toBe(200);
    expect(res.body.embeddings).toHaveLength(96);
    expect(res.body.usage.tokens).toBe(96 * 25000);
  }, 120_000);

  it("answers 429 when the batch would not fit the embed allowance", async () => {
    const fresh = await t.createApp();
    await t.admin.updateApp({ appId: fresh.id, limits: { embedTokensPerDay: 10 } });
    const res = await embed({ input: ["x".repeat(40), "y"] }, fresh.token);
    expect(res.status).toBe(429);
    expect(res.body.error.code).toBe("quota_exceeded");
    expect((await usage(fresh.id)).embed).toBe(0);
    expect((await embed({ input: "x".repeat(40) }, fresh.token)).body.remainingToday).toBe(0);
  });

  it("never overspends the embed cap under 200 concurrent requests", async () => {
    const fresh = await t.createApp();
    await t.admin.updateApp({ appId: fresh.id, limits: { embedTokensPerDay: 500 } });
    const results = await Promise.all(Array.from({ length: 200 }, () => embed({ input: "x".repeat(28) }, fresh.token)));
    const ok = results.filter((r) => r.status === 200);
    expect(ok.length).toBe(Math.floor(500 / 7));
    expect(results.filter((r) => r.status !== 200).every((r) => r.status === 429)).toBe(true);
    expect((await usage(fresh.id)).embed).toBe(ok.length * 7);
  });

  it("is the same over gRPC and Connect", async () => {
    for (const protocol of ["grpc", "connect"] as const) {
      const client = t.client(InferenceService, app.token, protocol);
      const res = await client.embed({ input: ["alpha beta", "gamma"] });
      expect(res.dimensions).toBe(256);
      expect(res.embeddings.map((e) => e.values.length)).toEqual([256, 256]);
      const err = await client.embed({ input: [] }).catch((e: unknown) => ConnectError.from(e));
      expect((err as ConnectError).code).toBe(Code.InvalidArgument);
      const wrong = await client
        .embed({ input: ["a"], model: "platform/fast" })
        .catch((e: unknown) => ConnectError.from(e));
      expect((wrong as ConnectError).rawMessage).toMatch(/generation model/);
    }
  });

  it("refuses a stopped app with 403", async () => {
    const stopped = await t.createApp();
    await stopped.stop();
    const res = await embed({ input: "x" }, stopped.token);
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe("app_stopped");
  });
});
