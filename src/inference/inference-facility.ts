/**
 * The inference facility (SPEC.md section 4 "Inference"): `InferenceService`
 * over Connect/gRPC and the `/v1/inference/*` REST routes, both calling the
 * one implementation below.
 *
 * Terminology:
 * - **logical model**: the stable name an app calls, `platform/fast`
 *   (generate) or `platform/embed` (embed); which real model serves it is the
 *   provider's configuration.
 * - **provider**: what runs the models: `local` (offline, the default) or
 *   `bedrock` (see `inference-provider.ts`).
 * - **allowance**: the app's daily tokens per logical model, kept by the
 *   shared quota module as the counters `fast_tokens` and `embed_tokens`.
 * - **reservation**: tokens taken from the allowance before the provider is
 *   called: the estimated input plus `maxTokens` for generate, the estimated
 *   input for embed. It is settled to the provider's reported usage when the
 *   call succeeds and released whole when it fails, so the allowance can
 *   never be overspent by concurrent requests and an error costs nothing.
 */
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { HandlerContext } from "@connectrpc/connect";
import { z } from "zod";
import {
  FinishReason as FinishReasonEnum,
  InferenceService,
  ModelKind,
  Role,
  type ChatMessageSchema,
} from "../../gen/platform/inference/v1/inference_pb.js";
import { appOf } from "../core/auth.ts";
import { invalidArgument } from "../core/errors.ts";
import type { Deps, Facility } from "../core/facility.ts";
import type { Reservation } from "../core/quotas/quotas.ts";
import { bodyObject, parseJson, type RestRouter } from "../core/http/rest-router.ts";
import { createBedrockProvider } from "./bedrock-provider.ts";
import type { FinishReason, InferenceProvider } from "./inference-provider.ts";
import { EMBED_MODEL, FAST_MODEL, LIMITS, validateEmbed, validateGenerate } from "./inference-requests.ts";
import { createLocalProvider } from "./local-provider.ts";
import { estimateTokensOfAll } from "./token-estimator.ts";

export interface InferenceFacilityOptions {
  /** Overrides the provider chosen by `INFERENCE_PROVIDER` (tests). */
  provider?: InferenceProvider;
}

const FINISH_TO_ENUM: Record<FinishReason, FinishReasonEnum> = {
  stop: FinishReasonEnum.STOP,
  length: FinishReasonEnum.LENGTH,
  other: FinishReasonEnum.OTHER,
};
const FINISH_TO_JSON = new Map<FinishReasonEnum, FinishReason>([
  [FinishReasonEnum.STOP, "stop"],
  [FinishReasonEnum.LENGTH, "length"],
  [FinishReasonEnum.OTHER, "other"],
]);
const ROLE_FROM_JSON: Record<string, Role> = { system: Role.SYSTEM, user: Role.USER, assistant: Role.ASSISTANT };
const INT32_MAX = 2 ** 31 - 1;

/** The provider named by the configuration. */
export function createInferenceProvider(deps: Deps): InferenceProvider {
  const { config, logger } = deps;
  if (config.inferenceProvider === "bedrock") {
    return createBedrockProvider({
      region: config.awsRegion,
      endpoint: config.bedrockEndpoint,
      fastModel: config.bedrockFastModel,
      embedModel: config.bedrockEmbedModel,
      logger,
    });
  }
  return createLocalProvider();
}

export function createInferenceFacility(deps: Deps, options: InferenceFacilityOptions = {}): Facility<typeof InferenceService> {
  const { quotas, logger, metrics } = deps;
  const provider = options.provider ?? createInferenceProvider(deps);
  logger.info({ provider: provider.name }, `inference provider: ${provider.description}`);

  const tokensUsed = metrics.counter("inference_tokens_total", "Tokens charged to apps' daily allowances, by logical model.", ["model"] as const);
  const failures = metrics.counter("inference_provider_failures_total", "Provider calls that failed, by logical model and error code.", ["model", "code"] as const);

  /** Calls the provider under a reservation: settled to `actual` on success, released on failure. */
  async function underReservation<T>(reservation: Reservation, cap: number, model: string, work: () => Promise<T>, actual: (result: T) => number) {
    let result: T;
    try {
      result = await work();
    } catch (err) {
      failures.inc({ model, code: (err as { code?: string }).code ?? "internal" });
      try {
        await quotas.release(reservation);
      } catch (releaseErr) {
        logger.error({ err: releaseErr, model }, "could not release an inference reservation");
      }
      throw err;
    }
    const used = actual(result);
    const remaining = await quotas.settle(reservation, used, cap);
    tokensUsed.inc({ model }, used);
    return { result, remaining };
  }

  const impl = {
    async listModels(_req: unknown, context: HandlerContext) {
      const app = appOf(context);
      const entry = async (name: string, kind: ModelKind, counter: "fast_tokens" | "embed_tokens", cap: number) => ({
        name,
        kind,
        tokensPerDay: BigInt(cap),
        remainingToday: BigInt(Math.max(0, cap - (await quotas.used(app.id, counter)))),
      });
      return {
        models: [
          await entry(FAST_MODEL, ModelKind.GENERATE, "fast_tokens", app.limits.fastTokensPerDay),
          await entry(EMBED_MODEL, ModelKind.EMBED, "embed_tokens", app.limits.embedTokensPerDay),
        ],
      };
    },

    async generate(req: Parameters<typeof validateGenerate>[0], context: HandlerContext) {
      const app = appOf(context);
      const { model, call } = validateGenerate(req);
      const cap = app.limits.fastTokensPerDay;
      const estimate = estimateTokensOfAll(call.messages.map((m) => m.content)) + call.maxTokens;
      const reservation = await quotas.reserve(app.id, "fast_tokens", estimate, cap);
      const { result, remaining } = await underReservation(
        reservation,
        cap,
        model,
        () => provider.generate(call, context.signal),
        (r) => r.inputTokens + r.outputTokens,
      );
      return {
        text: result.text,
        model,
        finishReason: FINISH_TO_ENUM[result.finishReason],
        usage: { inputTokens: BigInt(result.inputTokens), outputTokens: BigInt(result.outputTokens) },
        remainingToday: BigInt(remaining),
      };
    },

    async embed(req: Parameters<typeof validateEmbed>[0], context: HandlerContext) {
      const app = appOf(context);
      const { model, inputs } = validateEmbed(req);
      const cap = app.limits.embedTokensPerDay;
      const reservation = await quotas.reserve(app.id, "embed_tokens", estimateTokensOfAll(inputs), cap);
      const { result, remaining } = await underReservation(
        reservation,
        cap,
        model,
        () => provider.embed(inputs, context.signal),
        (r) => r.tokens,
      );
      return {
        embeddings: result.embeddings.map((values) => ({ values })),
        model,
        dimensions: result.dimensions,
        usage: { tokens: BigInt(result.tokens) },
        remainingToday: BigInt(remaining),
      };
    },
  };

  return {
    service: InferenceService,
    impl,
    restRoutes(rest: RestRouter) {
      rest.route({
        method: "GET",
        url: "/v1/inference/models",
        rpc: InferenceService.method.listModels,
        response: (res) => ({
          models: res.models.map((m) => ({
            name: m.name,
            kind: m.kind === ModelKind.EMBED ? "embed" : "generate",
            tokensPerDay: Number(m.tokensPerDay),
            remainingToday: Number(m.remainingToday),
          })),
        }),
      });
      rest.route({
        method: "POST",
        url: "/v1/inference/generate",
        rpc: InferenceService.method.generate,
        request: ({ body }) => generateRequestFromJson(body),
        response: (res) => ({
          text: res.text,
          model: res.model,
          finishReason: FINISH_TO_JSON.get(res.finishReason) ?? "other",
          usage: { inputTokens: Number(res.usage?.inputTokens ?? 0n), outputTokens: Number(res.usage?.outputTokens ?? 0n) },
          remainingToday: Number(res.remainingToday),
        }),
      });
      rest.route({
        method: "POST",
        url: "/v1/inference/embed",
        rpc: InferenceService.method.embed,
        request: ({ body }) => embedRequestFromJson(body),
        response: (res) => ({
          embeddings: res.embeddings.map((e) => e.values.map(roundForJson)),
          model: res.model,
          dimensions: res.dimensions,
          usage: { tokens: Number(res.usage?.tokens ?? 0n) },
          remainingToday: Number(res.remainingToday),
        }),
      });
    },
    close: async () => provider.close?.(),
  };
}

/** Seven significant digits: what a 32-bit float (the gRPC type) carries, without the noise of 17. */
function roundForJson(value: number): number {
  return Number(value.toPrecision(7));
}

/** JSON `null` for an optional field means "left out". */
function withoutNulls(body: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(body).filter(([, v]) => v !== null));
}

const generateJson = z.object({
  model: z.string({ error: "must be a string" }).optional(),
  prompt: z.string({ error: "must be a string" }).optional(),
  messages: z
    .array(
      z.object(
        {
          role: z.string({ error: "must be a string: system, user or assistant" }),
          content: z.string({ error: "must be a string" }),
        },
        { error: "must be an object with role and content" },
      ),
      { error: "must be an array of messages" },
    )
    .optional(),
  maxTokens: z.number({ error: "must be an integer of at least 1" }).optional(),
  temperature: z.number({ error: "must be a number from 0 to 2" }).optional(),
});

/** SPEC.md's generate body as a `GenerateRequest`; JSON-only rules (types, both keys given) are checked here. */
export function generateRequestFromJson(raw: unknown) {
  const body = parseJson(generateJson, withoutNulls(bodyObject(raw)));
  // An empty `messages` array cannot be told from a missing one in the RPC message.
  if (body.prompt !== undefined && body.messages !== undefined) {
    throw invalidArgument("prompt, messages", "give either prompt or messages, not both");
  }
  if (body.messages !== undefined && (body.messages.length < 1 || body.messages.length > LIMITS.messagesMax)) {
    throw invalidArgument("messages", `must have 1 to ${LIMITS.messagesMax} items`);
  }
  if (body.maxTokens !== undefined && (!Number.isInteger(body.maxTokens) || body.maxTokens < 1)) {
    throw invalidArgument("maxTokens", "must be an integer of at least 1");
  }
  const messages: MessageInitShape<typeof ChatMessageSchema>[] = (body.messages ?? []).map((m, i) => {
    const role = Object.hasOwn(ROLE_FROM_JSON, m.role) ? ROLE_FROM_JSON[m.role] : undefined;
    if (role === undefined) throw invalidArgument(`messages[${i}].role`, "must be system, user or assistant");
    return { role, content: m.content };
  });
  return {
    model: body.model,
    prompt: body.prompt,
    messages,
    // Anything above the ceiling is clamped anyway; int32 cannot carry more.
    maxTokens: body.maxTokens === undefined ? undefined : Math.min(body.maxTokens, INT32_MAX),
    temperature: body.temperature,
  };
}

/** SPEC.md's embed body (`input`: a string or an array of strings) as an `EmbedRequest`. */
export function embedRequestFromJson(raw: unknown) {
  const body = withoutNulls(bodyObject(raw));
  if (body.model !== undefined && typeof body.model !== "string") throw invalidArgument("model", "must be a string");
  const input = body.input;
  let texts: string[];
  if (typeof input === "string") texts = [input];
  else if (Array.isArray(input)) {
    if (input.length === 0) throw invalidArgument("input", "must have at least 1 item");
    input.forEach((item, i) => {
      if (typeof item !== "string") throw invalidArgument(`input[${i}]`, "must be a string");
    });
    texts = input as string[];
  } else if (input === undefined) throw invalidArgument("input", "is required: a string or an array of 1 or more strings");
  else throw invalidArgument("input", "must be a string or an array of strings");
  return { model: body.model as string | undefined, input: texts };
}
