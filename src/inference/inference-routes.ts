/**
 * The `/v1/inference` routes (docs/api.md#inference), mapped onto `InferenceService`. The
 * schemas check JSON shapes (and the rules only JSON can break, such as
 * giving both `prompt` and `messages`); the rules on values are the
 * implementation's (`inference-requests.ts`), shared with gRPC.
 */
import type { MessageInitShape } from "@bufbuild/protobuf";
import { z } from "zod";
import {
  FinishReason as FinishReasonEnum,
  InferenceService,
  ModelKind,
  Role,
  type ChatMessageSchema,
} from "../../gen/platform/inference/v1/inference_pb.js";
import { defineRoute, type AnyRestRoute } from "../core/http/rest-router.ts";
import { fixedObject, isJsonObject } from "../core/http/validation.ts";
import type { FinishReason } from "./inference-provider.ts";
import { LIMITS } from "./inference-requests.ts";

const FINISH_TO_JSON = new Map<FinishReasonEnum, FinishReason>([
  [FinishReasonEnum.STOP, "stop"],
  [FinishReasonEnum.LENGTH, "length"],
  [FinishReasonEnum.OTHER, "other"],
]);
const ROLE_FROM_JSON: Record<string, Role> = { system: Role.SYSTEM, user: Role.USER, assistant: Role.ASSISTANT };
const INT32_MAX = 2 ** 31 - 1;

/** JSON `null` for an optional field means "left out". */
function withoutNulls(body: unknown): unknown {
  return isJsonObject(body) ? Object.fromEntries(Object.entries(body).filter(([, v]) => v !== null)) : body;
}

/** Seven significant digits: what a 32-bit float (the gRPC type) carries, without the noise of 17. */
function roundForJson(value: number): number {
  return Number(value.toPrecision(7));
}

const GenerateBody = z.preprocess(
  withoutNulls,
  fixedObject({
    model: z.string({ error: "must be a string" }).optional(),
    prompt: z.string({ error: "must be a string" }).optional(),
    messages: z
      .array(
        fixedObject(
          {
            role: z.string({ error: "must be a string: system, user or assistant" }),
            content: z.string({ error: "must be a string" }),
          },
          "must be an object with role and content",
        ),
        { error: "must be an array of messages" },
      )
      .optional(),
    maxTokens: z.number({ error: "must be an integer of at least 1" }).optional(),
    temperature: z.number({ error: "must be a number from 0 to 2" }).optional(),
  }).superRefine((body, ctx) => {
    // An empty `messages` array cannot be told from a missing one in the RPC message.
    if (body.prompt !== undefined && body.messages !== undefined) {
      ctx.addIssue({
        code: "custom",
        path: ["prompt, messages"],
        message: "give either prompt or messages, not both",
      });
      return;
    }
    if (body.messages !== undefined && (body.messages.length < 1 || body.messages.length > LIMITS.messagesMax)) {
      ctx.addIssue({ code: "custom", path: ["messages"], message: `must have 1 to ${LIMITS.messagesMax} items` });
      return;
    }
    if (body.maxTokens !== undefined && (!Number.isInteger(body.maxTokens) || body.maxTokens < 1)) {
      ctx.addIssue({ code: "custom", path: ["maxTokens"], message: "must be an integer of at least 1" });
      return;
    }
    body.messages?.forEach((m, i) => {
      if (!Object.hasOwn(ROLE_FROM_JSON, m.role))
        ctx.addIssue({ code: "custom", path: ["messages", i, "role"], message: "must be system, user or assistant" });
    });
  }),
);

const EmbedBody = z.preprocess(
  withoutNulls,
  fixedObject({
    model: z.string({ error: "must be a string" }).optional(),
    /** A string or an array of strings; checked below, so each case gets its own message. */
    input: z.unknown().meta({
      anyOf: [
        { type: "string", minLength: 1 },
        { type: "array", items: { type: "string", minLength: 1 }, minItems: 1 },
      ],
    }),
  }).superRefine((body, ctx) => {
    const input = body.input;
    if (typeof input === "string") return;
    if (Array.isArray(input)) {
      if (input.length === 0) ctx.addIssue({ code: "custom", path: ["input"], message: "must have at least 1 item" });
      const bad = input.findIndex((item) => typeof item !== "string");
      if (bad >= 0) ctx.addIssue({ code: "custom", path: ["input", bad], message: "must be a string" });
      return;
    }
    const message =
      input === undefined
        ? "is required: a string or an array of 1 or more strings"
        : "must be a string or an array of strings";
    ctx.addIssue({ code: "custom", path: ["input"], message });
  }),
);

/** The REST generate body as a `GenerateRequest`. */
function generateRequest(body: z.output<typeof GenerateBody>) {
  const messages: MessageInitShape<typeof ChatMessageSchema>[] = (body.messages ?? []).map((m) => ({
    role: ROLE_FROM_JSON[m.role],
    content: m.content,
  }));
  return {
    model: body.model,
    prompt: body.prompt,
    messages,
    // Anything above the ceiling is clamped anyway; int32 cannot carry more.
    maxTokens: body.maxTokens === undefined ? undefined : Math.min(body.maxTokens, INT32_MAX),
    temperature: body.temperature,
  };
}

/** The 200 bodies of the routes below, as `response` builds them (the OpenAPI document's response shapes). */
const ModelsResponse = z.object({
  models: z.array(
    z.object({
      name: z.string(),
      kind: z.enum(["generate", "embed"]),
      tokensPerDay: z.number().int(),
      remainingToday: z.number().int(),
    }),
  ),
});
const GenerateResponse = z.object({
  text: z.string(),
  model: z.string(),
  finishReason: z.enum(["stop", "length", "other"]),
  usage: z.object({ inputTokens: z.number().int(), outputTokens: z.number().int() }),
  remainingToday: z.number().int(),
});
const EmbedResponse = z.object({
  embeddings: z.array(z.array(z.number())),
  model: z.string(),
  dimensions: z.number().int(),
  usage: z.object({ tokens: z.number().int() }),
  remainingToday: z.number().int(),
});

export const inferenceRoutes: readonly AnyRestRoute[] = [
  defineRoute({
    method: "GET",
    url: "/v1/inference/models",
    rpc: InferenceService.method.listModels,
    responseSchema: ModelsResponse,
    doc: {
      summary: "List the models and what is left today",
      errors: [],
      responseExample: {
        models: [{ name: "platform/fast", kind: "generate", tokensPerDay: 200000, remainingToday: 199000 }],
      },
    },
    response: (res) => ({
      models: res.models.map((m) => ({
        name: m.name,
        kind: m.kind === ModelKind.EMBED ? "embed" : "generate",
        tokensPerDay: Number(m.tokensPerDay),
        remainingToday: Number(m.remainingToday),
      })),
    }),
  }),
  defineRoute({
    method: "POST",
    url: "/v1/inference/generate",
    rpc: InferenceService.method.generate,
    idempotent: true,
    responseSchema: GenerateResponse,
    doc: {
      summary: "Generate text (whole, not streamed)",
      description: "Exactly one of `prompt` and `messages`.",
      errors: ["app_stopped", "quota_exceeded", "not_configured", "upstream_error"],
      requestExample: { model: "platform/fast", prompt: "Say hello", maxTokens: 64, temperature: 0.7 },
      responseExample: {
        text: "Hello!",
        model: "platform/fast",
        finishReason: "stop",
        usage: { inputTokens: 3, outputTokens: 2 },
        remainingToday: 199995,
      },
    },
    body: GenerateBody,
    request: ({ body }) => generateRequest(body),
    response: (res) => ({
      text: res.text,
      model: res.model,
      finishReason: FINISH_TO_JSON.get(res.finishReason) ?? "other",
      usage: { inputTokens: Number(res.usage?.inputTokens ?? 0n), outputTokens: Number(res.usage?.outputTokens ?? 0n) },
      remainingToday: Number(res.remainingToday),
    }),
  }),
  defineRoute({
    method: "POST",
    url: "/v1/inference/embed",
    rpc: InferenceService.method.embed,
    idempotent: true,
    responseSchema: EmbedResponse,
    doc: {
      summary: "Embed text as vectors",
      errors: ["app_stopped", "quota_exceeded", "not_configured", "upstream_error"],
      requestExample: { model: "platform/embed", input: ["first text", "second text"] },
      responseExample: {
        embeddings: [
          [0.12, -0.03, 0.5],
          [0.08, 0.11, -0.2],
        ],
        model: "platform/embed",
        dimensions: 3,
        usage: { tokens: 4 },
        remainingToday: 199996,
      },
    },
    body: EmbedBody,
    request: ({ body }) => ({
      model: body.model,
      input: typeof body.input === "string" ? [body.input] : (body.input as string[]),
    }),
    response: (res) => ({
      embeddings: res.embeddings.map((e) => e.values.map(roundForJson)),
      model: res.model,
      dimensions: res.dimensions,
      usage: { tokens: Number(res.usage?.tokens ?? 0n) },
      remainingToday: Number(res.remainingToday),
    }),
  }),
];
