/**
 * The five facilities (docs/api.md), built from the shared dependencies and
 * wired to each other only through what each exports from its `index.ts`
 * (`PlatformEvents`, and the operations the admin API calls). One block per facility.
 */
import type { FacilityOperations } from "./admin/index.ts";
import type { Deps, Facility } from "./core/facility.ts";
import { createAnalyticsFacility } from "./analytics/index.ts";
import { createQueuesFacility } from "./queues/index.ts";
import { createSecretsFacility } from "./secrets/index.ts";
import { createMailFacility } from "./mail/index.ts";
import { createInferenceFacility } from "./inference/index.ts";

export interface Facilities {
  list: Facility[];
  /** What the admin API calls in the other facilities. */
  operations: FacilityOperations;
}

export async function createFacilities(deps: Deps): Promise<Facilities> {
  // queues — provides PlatformEvents (`events`) to secrets and the admin API.
  const queues = createQueuesFacility(deps);
  const events = queues.events;

  // analytics
  const analytics = await createAnalyticsFacility(deps);

  // secrets — sets publish `secret.set` through the queues facility's `events`.
  const secrets = createSecretsFacility(deps, { events });

  // mail
  const mail = await createMailFacility(deps);

  // inference
  const inference = await createInferenceFacility(deps);

  return {
    list: [analytics, mail, inference, queues, secrets],
    // Each facility's own operations, as its `index.ts` exports them: the admin API calls nothing else.
    operations: {
      analytics: analytics.operations,
      mail: mail.operations,
      queues: queues.operations,
      secrets: secrets.operations,
      // The operator's views call these facilities' own RPCs as the app.
      appFacilities: [analytics, queues, secrets],
    },
  };
}
