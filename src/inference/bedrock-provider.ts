/**
 * Amazon Bedrock behind the logical models (docs/inference.md):
 *
 * - `platform/fast` is the Converse API on `BEDROCK_FAST_MODEL`. System
 *   messages become Converse's `system` blocks; consecutive turns of the same
 *   role are merged into one message of several text blocks (Converse wants
 *   user and assistant to alternate). Bedrock models take a temperature from
 *   0 to 1, so the API's 0–2 is clamped to 1 rather than refused.
 * - `platform/embed` is InvokeModel on `BEDROCK_EMBED_MODEL`: Titan Text
 *   Embeddings (one text per call, the calls of one request run concurrently
 *   with a bound) or, when the model id starts with `cohere.embed`, Cohere
 *   Embed (up to 96 texts per call).
 *
 * Token counts come from Bedrock's response (Converse `usage`, Titan's
 * `inputTextTokenCount`, else the `x-amzn-bedrock-input-token-count` header),
 * falling back to the shared estimator only when a response carries none.
 *
 * Errors: Bedrock's `ValidationException` is the caller's fault (400) unless
 * it is about the configured model; everything else is 502 `upstream_error`.
 * Bedrock's own wording never reaches the caller (it can name accounts,
 * model ids, regions); it is logged for the operator. A `ThrottlingException`
 * that outlasts the SDK's retries is a 502 with a short Retry-After hint, not
 * a 429: 429 `quota_exceeded` means the app's own daily allowance, which a
 * busy provider has not spent.
 */
import {
  BedrockRuntimeClient,
  ConverseCommand,
  InvokeModelCommand,
  type ContentBlock,
  type Message,
  type SystemContentBlock,
  ListAsyncInvokesCommand,
} from "@aws-sdk/client-bedrock-runtime";
import { awsAnswers } from "../core/aws-answers.ts";
import type { Logger } from "pino";
import { PlatformError } from "../core/errors.ts";
import type {
  ChatTurn,
  EmbedResult,
  FinishReason,
  GenerateCall,
  GenerateResult,
  InferenceProvider,
} from "./inference-provider.ts";
import { estimateTokens, estimateTokensOfAll } from "./token-estimator.ts";

export interface BedrockProviderOptions {
  region: string | undefined;
  /** Overrides the regional endpoint (`AWS_ENDPOINT_URL_BEDROCK_RUNTIME`). */
  endpoint: string | undefined;
  fastModel: string;
  embedModel: string;
  logger: Logger;
  /** Concurrent InvokeModel calls of one Titan embed request. */
  titanConcurrency?: number;
  /** How long an HTTP/2 stream may stay idle before the call is abandoned, ms. */
  requestTimeoutMs?: number;
}

/** Cohere Embed takes at most this many texts per call. */
const COHERE_BATCH = 96;
const DEFAULT_TITAN_CONCURRENCY = 8;
/** Bedrock's text models take a temperature from 0 to 1. */
const BEDROCK_MAX_TEMPERATURE = 1;
const THROTTLED_RETRY_AFTER_SECONDS = 2;

const STOP_REASONS: Record<string, FinishReason> = {
  end_turn: "stop",
  stop_sequence: "stop",
  max_tokens: "length",
};

/** Validation messages that are about our configuration, not about what the app sent. */
const CONFIGURATION_FAULT =
  /model identifier|model id|on-demand throughput|inference profile|not supported|doesn't support|does not support|maximum tokens|max_tokens|maxtokens|access/i;

/** Bedrock errors that mean "busy": worth retrying shortly. */
const BUSY = new Set(["ThrottlingException", "ServiceQuotaExceededException", "TooManyRequestsException"]);

export function stopReasonToFinishReason(stopReason: string | undefined): FinishReason {
  return (stopReason && STOP_REASONS[stopReason]) || "other";
}

/** Converse's shape of a conversation: system blocks apart, same-role turns merged. */
function toConverseInput(turns: readonly ChatTurn[]): { system: SystemContentBlock[]; messages: Message[] } {
  const system: SystemContentBlock[] = [];
  const messages: Message[] = [];
  for (const turn of turns) {
    if (turn.role === "system") {
      system.push({ text: turn.content });
      continue;
    }
    const last = messages.at(-1);
    if (last && last.role === turn.role) last.content!.push({ text: turn.content });
    else messages.push({ role: turn.role, content: [{ text: turn.content }] });
  }
  return { system, messages };
}

function errorName(err: unknown): string {
  return err instanceof Error ? err.name : "unknown";
}

export function createBedrockProvider(options: BedrockProviderOptions): InferenceProvider {
  const { logger, fastModel, embedModel } = options;
  const client = new BedrockRuntimeClient({
    region: options.region,
    ...(options.endpoint ? { endpoint: options.endpoint } : {}),
    requestHandler: { requestTimeout: options.requestTimeoutMs ?? 120_000 },
  });
  const titanConcurrency = options.titanConcurrency ?? DEFAULT_TITAN_CONCURRENCY;
  const cohere = embedModel.startsWith("cohere.embed");

  /** Turns whatever the SDK threw into our error, logging Bedrock's own words for the operator. */
  function mapError(err: unknown, operation: string, signal: AbortSignal): PlatformError {
    if (err instanceof PlatformError) return err;
    if (signal.aborted)
      return new PlatformError("upstream_error", "the request was cancelled before the model answered", { cause: err });
    const name = errorName(err);
    const meta = (err as { $metadata?: { httpStatusCode?: number; requestId?: string } }).$metadata;
    const providerMessage = err instanceof Error ? err.message.slice(0, 300) : String(err).slice(0, 300);
    logger.warn(
      {
        provider: "bedrock",
        operation,
        error: name,
        status: meta?.httpStatusCode,
        awsRequestId: meta?.requestId,
        providerMessage,
      },
      "bedrock call failed",
    );
    if (name === "ValidationException" && !CONFIGURATION_FAULT.test(providerMessage)) {
      return new PlatformError(
        "invalid_argument",
        "the model refused the input as invalid (for example: too long for the model, or a conversation it cannot take)",
        { cause: err },
      );
    }
    if (BUSY.has(name)) {
      return new PlatformError("upstream_error", "the inference provider is busy; retry in a few seconds", {
        retryAfterSeconds: THROTTLED_RETRY_AFTER_SECONDS,
        cause: err,
      });
    }
    if (name === "ModelTimeoutException")
      return new PlatformError("upstream_error", "the model took too long to answer", { cause: err });
    return new PlatformError("upstream_error", "the inference provider failed; nothing was charged", { cause: err });
  }

  function malformed(what: string): PlatformError {
    logger.warn({ provider: "bedrock", problem: what }, "bedrock answered with an unexpected shape");
    return new PlatformError("upstream_error", "the inference provider gave an unusable answer; nothing was charged");
  }

  /** One InvokeModel call: the parsed JSON body and the input token count header, if any. */
  async function invokeJson(
    body: unknown,
    signal: AbortSignal,
  ): Promise<{ json: unknown; headerTokens: number | undefined }> {
    const command = new InvokeModelCommand({
      modelId: embedModel,
      contentType: "application/json",
      accept: "application/json",
      body: new TextEncoder().encode(JSON.stringify(body)),
    });
    let headerTokens: number | undefined;
    command.middlewareStack.add(
      (next) => async (args) => {
        const result = await next(args);
        const headers = (result.response as { headers?: Record<string, string | undefined> }).headers ?? {};
        const value = Number(headers["x-amzn-bedrock-input-token-count"]);
        headerTokens = wholeCount(value) ?? headerTokens;
        return result;
      },
      { step: "deserialize", name: "platformInputTokenCount" },
    );
    const output = await client.send(command, { abortSignal: signal });
    let json: unknown;
    try {
      json = JSON.parse(new TextDecoder().decode(output.body));
    } catch {
      throw malformed("InvokeModel body is not JSON");
    }
    return { json, headerTokens };
  }

  function vectorOf(value: unknown): number[] | undefined {
    return Array.isArray(value) && value.length > 0 && value.every((v) => typeof v === "number" && Number.isFinite(v))
      ? value
      : undefined;
  }

  /**
   * A token count from an answer, if it is a whole number of 0 or more: any other (negative, fractional)
   * would lower the charge, or fail the usage figure's conversion.
   */
  function wholeCount(value: unknown): number | undefined {
    return Number.isSafeInteger(value) && (value as number) >= 0 ? (value as number) : undefined;
  }

  async function embedTitan(
    inputs: readonly string[],
    signal: AbortSignal,
  ): Promise<{ embeddings: number[][]; tokens: number }> {
    const embeddings = new Array<number[]>(inputs.length);
    let tokens = 0;
    let next = 0;
    // One failed call stops the others: the whole request fails anyway.
    const stop = new AbortController();
    const linked = AbortSignal.any([signal, stop.signal]);
    const worker = async () => {
      while (next < inputs.length && !linked.aborted) {
        const index = next++;
        const text = inputs[index];
        const { json, headerTokens } = await invokeJson({ inputText: text }, linked);
        const body = json as { embedding?: unknown; inputTextTokenCount?: unknown };
        const vector = vectorOf(body.embedding);
        if (!vector) throw malformed("Titan answer has no embedding");
        embeddings[index] = vector;
        tokens += wholeCount(body.inputTextTokenCount) ?? headerTokens ?? estimateTokens(text);
      }
    };
    const workers = Array.from({ length: Math.min(titanConcurrency, inputs.length) }, () =>
      worker().catch((err: unknown) => {
        stop.abort();
        throw err;
      }),
    );
    const settled = await Promise.allSettled(workers);
    // Report the first real failure, not the aborts it caused in the other workers.
    const failures = settled
      .filter((s): s is PromiseRejectedResult => s.status === "rejected")
      .map((s) => s.reason as unknown);
    if (failures.length > 0) throw failures.find((f) => errorName(f) !== "AbortError") ?? failures[0];
    return { embeddings, tokens };
  }

  async function embedCohere(
    inputs: readonly string[],
    signal: AbortSignal,
  ): Promise<{ embeddings: number[][]; tokens: number }> {
    const embeddings: number[][] = [];
    let tokens = 0;
    for (let start = 0; start < inputs.length; start += COHERE_BATCH) {
      const batch = inputs.slice(start, start + COHERE_BATCH);
      const { json, headerTokens } = await invokeJson({ texts: batch, input_type: "search_document" }, signal);
      const raw = (json as { embeddings?: unknown }).embeddings;
      // `embeddings` is a list of vectors, or `{ float: [...] }` when embedding types were asked for.
      const list = Array.isArray(raw) ? raw : (raw as { float?: unknown } | undefined)?.float;
      if (!Array.isArray(list) || list.length !== batch.length)
        throw malformed("Cohere answer has the wrong number of embeddings");
      for (const item of list) {
        const vector = vectorOf(item);
        if (!vector) throw malformed("Cohere answer has a malformed embedding");
        embeddings.push(vector);
      }
      tokens += headerTokens ?? estimateTokensOfAll(batch);
    }
    return { embeddings, tokens };
  }

  return {
    name: "bedrock",
    description: `bedrock (platform/fast: ${fastModel} via Converse; platform/embed: ${embedModel} via InvokeModel)`,

    async generate(call: GenerateCall, signal: AbortSignal): Promise<GenerateResult> {
      const { system, messages } = toConverseInput(call.messages);
      try {
        const output = await client.send(
          new ConverseCommand({
            modelId: fastModel,
            messages,
            ...(system.length > 0 ? { system } : {}),
            inferenceConfig: {
              maxTokens: call.maxTokens,
              temperature: Math.min(call.temperature, BEDROCK_MAX_TEMPERATURE),
            },
          }),
          { abortSignal: signal },
        );
        const blocks: ContentBlock[] = output.output?.message?.content ?? [];
        if (output.output?.message === undefined) throw malformed("Converse answer has no message");
        const text = blocks.map((b) => ("text" in b && typeof b.text === "string" ? b.text : "")).join("");
        return {
          text,
          finishReason: stopReasonToFinishReason(output.stopReason),
          inputTokens:
            wholeCount(output.usage?.inputTokens) ?? estimateTokensOfAll(call.messages.map((m) => m.content)),
          outputTokens: wholeCount(output.usage?.outputTokens) ?? estimateTokens(text),
        };
      } catch (err) {
        throw mapError(err, "converse", signal);
      }
    },

    async embed(inputs: readonly string[], signal: AbortSignal): Promise<EmbedResult> {
      try {
        const { embeddings, tokens } = cohere ? await embedCohere(inputs, signal) : await embedTitan(inputs, signal);
        const dimensions = embeddings[0].length;
        if (embeddings.some((v) => v.length !== dimensions)) throw malformed("embeddings of different lengths");
        return { embeddings, dimensions, tokens };
      } catch (err) {
        throw mapError(err, "invoke-model", signal);
      }
    },

    // The cheapest call of the runtime API; any answer, an error included, proves Bedrock is reachable.
    ping: (signal) =>
      awsAnswers(() => client.send(new ListAsyncInvokesCommand({ maxResults: 1 }), { abortSignal: signal })),

    close() {
      client.destroy();
    },
  };
}
