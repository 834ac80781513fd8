/**
 * `InferenceService`, implemented once for Connect, gRPC and the
 * `/v1/inference/*` REST routes (docs/api.md#inference, docs/inference.md).
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
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type { Logger } from "pino";
import {
  FinishReason as FinishReasonEnum,
  InferenceService,
  ModelKind,
} from "../../gen/platform/inference/v1/inference_pb.js";
import { appOf } from "../core/auth.ts";
import type { Metrics } from "../core/metrics.ts";
import { withReservation, type QuotaCounter, type Quotas } from "../core/quotas/index.ts";
import type { InTransactionWith } from "../core/database/index.ts";
import { answerInRun } from "../core/idempotent-run.ts";
import type { EmbedResult, FinishReason, GenerateResult, InferenceProvider } from "./inference-provider.ts";
import { EMBED_MODEL, FAST_MODEL, validateEmbed, validateGenerate } from "./inference-requests.ts";
import { estimateTokensOfAll } from "./token-estimator.ts";

export interface InferenceServiceOptions {
  provider: InferenceProvider;
  quotas: Quotas;
  logger: Logger;
  metrics: Metrics;
}

const FINISH_TO_ENUM: Record<FinishReason, FinishReasonEnum> = {
  stop: FinishReasonEnum.STOP,
  length: FinishReasonEnum.LENGTH,
  other: FinishReasonEnum.OTHER,
};

export function createInferenceService(options: InferenceServiceOptions): ServiceImpl<typeof InferenceService> {
  const { provider, quotas, logger, metrics } = options;

  const tokensUsed = metrics.counter(
    "inference_tokens_total",
    "Tokens charged to apps' daily allowances, by logical model.",
    ["model"] as const,
  );
  const failures = metrics.counter(
    "inference_provider_failures_total",
    "Provider calls that failed, by logical model and error code.",
    ["model", "code"] as const,
  );

  /**
   * Calls the provider under a reservation: settled to `actual` on success, released on failure. With
   * `answerIn` (an Idempotency-Key's run), the charge and the stored answer commit together: a process
   * dying between the two can neither charge a call whose answer a repeat does not find (and so runs
   * and charges again) nor store an answer uncharged.
   */
  async function reserved<T>({
    appId,
    counter,
    estimate,
    cap,
    model,
    work,
    actual,
    answerIn,
  }: {
    appId: string;
    counter: QuotaCounter;
    /** Tokens reserved before the call; `cap` is the app's daily allowance of `counter`. */
    estimate: number;
    cap: number;
    model: string;
    work: () => Promise<T>;
    /** Tokens the call really used, from its result. */
    actual: (result: T) => number;
    answerIn?: InTransactionWith<{ result: T; remaining: number }> | undefined;
  }) {
    let settled: number | undefined;
    const out = await withReservation(
      quotas,
      {
        appId,
        counter,
        amount: estimate,
        cap,
        actual,
        onFailure: (err) => failures.inc({ model, code: (err as { code?: string }).code ?? "internal" }),
        onReleaseError: (err) => logger.error({ err, model }, "could not release an inference reservation"),
        onSettleError: (err) =>
          logger.error({ err, model }, "could not settle an inference reservation; charged the estimate"),
      },
      async (reservation) => {
        const result = await work();
        if (answerIn)
          settled = await quotas.settleWith(reservation, { actual: actual(result), cap }, (trx, remaining) =>
            answerIn(trx, { result, remaining }),
          );
        return result;
      },
    );
    tokensUsed.inc({ model }, actual(out.result));
    return settled === undefined ? out : { result: out.result, remaining: settled };
  }

  return {
    async listModels(_req: unknown, context: HandlerContext) {
      const app = appOf(context);
      // Both counters in one round trip.
      const [fastUsed, embedUsed] = await quotas.usedMany(app.id, ["fast_tokens", "embed_tokens"]);
      const entry = (name: string, kind: ModelKind, cap: number, used: number) => ({
        name,
        kind,
        tokensPerDay: BigInt(cap),
        remainingToday: BigInt(Math.max(0, cap - used)),
      });
      return {
        models: [
          entry(FAST_MODEL, ModelKind.GENERATE, app.limits.fastTokensPerDay, fastUsed),
          entry(EMBED_MODEL, ModelKind.EMBED, app.limits.embedTokensPerDay, embedUsed),
        ],
      };
    },

    async generate(req, context) {
      const app = appOf(context);
      const { model, call } = validateGenerate(req);
      const estimate = estimateTokensOfAll(call.messages.map((m) => m.content)) + call.maxTokens;
      const answer = ({ result, remaining }: { result: GenerateResult; remaining: number }) => ({
        text: result.text,
        model,
        finishReason: FINISH_TO_ENUM[result.finishReason],
        usage: { inputTokens: BigInt(result.inputTokens), outputTokens: BigInt(result.outputTokens) },
        remainingToday: BigInt(remaining),
      });
      const { result, remaining } = await reserved({
        appId: app.id,
        counter: "fast_tokens",
        estimate,
        cap: app.limits.fastTokensPerDay,
        model,
        work: () => provider.generate(call, context.signal),
        actual: (r) => r.inputTokens + r.outputTokens,
        answerIn: answerInRun(context, InferenceService.method.generate, answer),
      });
      return answer({ result, remaining });
    },

    async embed(req, context) {
      const app = appOf(context);
      const { model, inputs } = validateEmbed(req);
      const answer = ({ result, remaining }: { result: EmbedResult; remaining: number }) => ({
        embeddings: result.embeddings.map((values) => ({ values })),
        model,
        dimensions: result.dimensions,
        usage: { tokens: BigInt(result.tokens) },
        remainingToday: BigInt(remaining),
      });
      const { result, remaining } = await reserved({
        appId: app.id,
        counter: "embed_tokens",
        estimate: estimateTokensOfAll(inputs),
        cap: app.limits.embedTokensPerDay,
        model,
        work: () => provider.embed(inputs, context.signal),
        actual: (r) => r.tokens,
        answerIn: answerInRun(context, InferenceService.method.embed, answer),
      });
      return answer({ result, remaining });
    },
  };
}
