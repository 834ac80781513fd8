/**
 * The five facilities of SPEC.md, built from the shared dependencies and
 * wired to each other only through their public APIs (`PlatformEvents`,
 * `AdminHooks`). One block per facility.
 */
import type { AdminHooks } from "./admin/admin-facility.ts";
import type { Deps, Facility } from "./facility.ts";
import { createAnalyticsFacility } from "./analytics/analytics-facility.ts";
import { createQueuesFacility } from "./queues/queues-facility.ts";
import { createSecretsFacility } from "./secrets/secrets-facility.ts";
import { createMailFacility } from "./mail/mail-facility.ts";
import { createInferenceFacility } from "./inference/inference-facility.ts";

export interface Facilities {
  list: Facility[];
  adminHooks: AdminHooks;
}

export async function createFacilities(deps: Deps): Promise<Facilities> {
  // queues — provides PlatformEvents (`events`) to secrets and the admin API.
  const queues = createQueuesFacility(deps);
  const events = queues.events;

  // analytics
  const analytics = createAnalyticsFacility(deps);

  // secrets — sets publish `secret.set` through the queues facility's `events`.
  const secrets = createSecretsFacility(deps, { events });

  // mail
  const mail = createMailFacility(deps);

  // inference
  const inference: Facility = createInferenceFacility(deps);

  return {
    list: [analytics, mail, inference, queues, secrets],
    adminHooks: {
      publishEvent: (appId, kind, data) => events.publish(appId, kind, data),
      declareSecrets: (appId, names) => secrets.declareSecrets(appId, names),
      setSecret: (app, name, value) => secrets.setSecret(app, name, value),
      listMail: (appId, limit) => mail.listMail(appId, limit),
      getMail: (appId, id) => mail.getMail(appId, id),
      // The operator's views call these facilities' own RPCs as the app.
      appFacilities: [analytics, queues, secrets],
    },
  };
}
