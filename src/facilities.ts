/**
 * The five facilities (docs/api.md), built from the shared dependencies and
 * wired to each other only through what each exports from its `index.ts`
 * (`PlatformEvents`, `SecretsAdmin`, `listMail`). One block per facility.
 */
import type { AdminHooks } from "./admin/index.ts";
import type { Deps, Facility } from "./core/facility.ts";
import { createAnalyticsFacility } from "./analytics/index.ts";
import { createQueuesFacility } from "./queues/index.ts";
import { createSecretsFacility } from "./secrets/index.ts";
import { createMailFacility } from "./mail/index.ts";
import { createInferenceFacility } from "./inference/index.ts";

export interface Facilities {
  list: Facility[];
  adminHooks: AdminHooks;
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
    adminHooks: {
      publishEvent: (appId, kind, data, within) => events.publish(appId, kind, data, within),
      declareSecrets: (appId, names, within) => secrets.declareSecrets(appId, names, within),
      addSecretNames: (appId, names, within) => secrets.addSecretNames(appId, names, within),
      removeSecretNames: (appId, names, guard, within) => secrets.removeSecretNames(appId, names, guard, within),
      listLinks: (appId) => secrets.listLinks(appId),
      createSecretLink: (app, name, within) => secrets.createLink(app, name, within),
      revokeLink: (appId, linkId, within) => secrets.revokeLink(appId, linkId, within),
      expiringLinks: (seconds) => secrets.expiringLinks(seconds),
      declaredNames: (appId) => secrets.declaredNames(appId),
      setSecret: (app, name, value, within) => secrets.setSecret(app, name, value, within),
      listMail: (appId, limit) => mail.listMail(appId, limit),
      searchMail: (appId, search) => mail.searchMail(appId, search),
      deleteAppData: (appId) => analytics.deleteAppData(appId),
      beforeAppDelete: (trx, appId) => secrets.lockForAppDeletion(trx, appId),
      getMail: (appId, id) => mail.getMail(appId, id),
      peekMessages: (appId, queue, limit, maxChars, after) =>
        queues.operator.peek(appId, queue, limit, maxChars, after),
      queueActivity: (appId, queue) => queues.operator.activity(appId, queue),
      purgeQueue: (appId, queue, within) => queues.operator.purge(appId, queue, within),
      deadLetters: queues.operator.deadLetters,
      putTestMessage: (app, queue, payload, within, groupKey) =>
        queues.operator.put(app, queue, payload, within, groupKey),
      queueAttention: (oldAgeSeconds) => queues.operator.attention(oldAgeSeconds),
      queueOverview: (oldAgeSeconds) => queues.operator.overview(oldAgeSeconds),
      mailOnDay: (day) => mail.mailOnDay(day),
      queuePolicy: (app, queue) => queues.operator.policy(app, queue),
      setQueuePolicy: (app, queue, change, within) => queues.operator.setPolicy(app, queue, change, within),
      queueSchedules: (appId, queue) => queues.operator.schedules(appId, queue),
      // The operator's views call these facilities' own RPCs as the app.
      appFacilities: [analytics, queues, secrets],
    },
  };
}
