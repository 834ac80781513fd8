/**
 * The five facilities of SPEC.md, built from the shared dependencies and
 * wired to each other only through their public APIs (`PlatformEvents`,
 * `AdminHooks`). One block per facility.
 */
import { AnalyticsService } from "../gen/platform/analytics/v1/analytics_pb.js";
import { MailService } from "../gen/platform/mail/v1/mail_pb.js";
import { InferenceService } from "../gen/platform/inference/v1/inference_pb.js";
import { QueueService } from "../gen/platform/queues/v1/queues_pb.js";
import { SecretsService } from "../gen/platform/secrets/v1/secrets_pb.js";
import type { AdminHooks } from "./admin/admin-facility.ts";
import type { Deps, Facility } from "./facility.ts";
import { declareSecrets } from "./secrets/blueprint.ts";

export interface Facilities {
  list: Facility[];
  adminHooks: AdminHooks;
}

export async function createFacilities(deps: Deps): Promise<Facilities> {
  // queues (issue: queues) — provides PlatformEvents to secrets and the admin API.
  const queues: Facility = { service: QueueService, impl: {} as never };

  // analytics
  const analytics: Facility = { service: AnalyticsService, impl: {} as never };

  // secrets
  const secrets: Facility = { service: SecretsService, impl: {} as never };

  // mail
  const mail: Facility = { service: MailService, impl: {} as never };

  // inference
  const inference: Facility = { service: InferenceService, impl: {} as never };

  return {
    list: [analytics, mail, inference, queues, secrets],
    adminHooks: {
      declareSecrets: (appId, names) => declareSecrets(deps.db, appId, names),
    },
  };
}
