/**
 * The inference facility (docs/inference.md): wires its provider, its one
 * implementation and its REST routes. It has no tables: its allowances are
 * the core quotas' counters `fast_tokens` and `embed_tokens`.
 */
import { InferenceService } from "../../gen/platform/inference/v1/inference_pb.js";
import type { Deps, Facility } from "../core/facility.ts";
import type { InferenceProvider } from "./inference-provider.ts";
import { inferenceRoutes } from "./inference-routes.ts";
import { createInferenceService } from "./inference-service.ts";
import { createLocalProvider } from "./local-provider.ts";
import { readinessOf } from "../core/readiness.ts";

export interface InferenceFacilityOptions {
  /** Overrides the provider chosen by `INFERENCE_PROVIDER` (tests). */
  provider?: InferenceProvider;
}

/** The provider named by the configuration; the Bedrock module (and the AWS SDK under it) is loaded only when configured. */
async function createInferenceProvider(deps: Deps): Promise<InferenceProvider> {
  const { config, logger } = deps;
  if (config.inferenceProvider === "bedrock") {
    const { createBedrockProvider } = await import("./bedrock-provider.ts");
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

export async function createInferenceFacility(
  deps: Deps,
  options: InferenceFacilityOptions = {},
): Promise<Facility<typeof InferenceService>> {
  const { quotas, logger, metrics } = deps;
  const provider = options.provider ?? (await createInferenceProvider(deps));
  logger.info({ provider: provider.name }, `inference provider: ${provider.description}`);
  return {
    service: InferenceService,
    impl: createInferenceService({ provider, quotas, logger, metrics }),
    routes: inferenceRoutes,
    readiness: () => readinessOf("inference", provider.ping?.bind(provider)),
    close: async () => provider.close?.(),
  };
}
