/**
 * The mail facility (docs/mail.md): wires its provider, its store (the mail
 * log), its one implementation and its REST route. Other facilities use only
 * what this file exports.
 */
import { MailService } from "../../gen/platform/mail/v1/mail_pb.js";
import type { Deps, Facility } from "../core/facility.ts";
import type { MailProvider } from "./mail-provider.ts";
import { mailRoutes } from "./mail-routes.ts";
import { createMailService } from "./mail-service.ts";
import { createMailStore, type MailLogRecord, type MailSearch } from "./mail-store.ts";
import { createOutboxProvider } from "./outbox-provider.ts";
import { readinessOf } from "../core/readiness.ts";
import { retentionTask } from "../core/housekeeping.ts";
import { HOUR_MS } from "../core/time.ts";
import { createMailDayStore } from "./mail-day-store.ts";

export type { MailLogRecord, MailLogStatus } from "./mail-store.ts";
export { rawMessage } from "./raw-message.ts";

/** The mail facility's operations for the admin API (reads only: an operator changes no mail). */
export interface MailOperations {
  /** `AdminService.ListMail`: the app's mail log searched, newest first. */
  searchMail(appId: string, search: MailSearch): Promise<MailLogRecord[]>;
  /** `AdminService.GetMail`: one mail of the app's log. */
  getMail(appId: string, id: string): Promise<MailLogRecord | undefined>;
  /** The overview's mail of one UTC day across apps: accepted (sent or stored) and failed (or unconfirmed). */
  mailOnDay(day: string): Promise<{ sent: number; failed: number }>;
}

export interface MailFacility extends Facility<typeof MailService> {
  readonly operations: MailOperations;
}

export interface MailFacilityOptions {
  /** Overrides the provider chosen by `MAIL_PROVIDER`. */
  provider?: MailProvider;
}

/**
 * The provider of `MAIL_PROVIDER`: SES in production, the outbox by default.
 * The SES module (and the AWS SDK under it) is loaded only when configured.
 */
async function createMailProvider(deps: Deps): Promise<MailProvider> {
  const { config, logger } = deps;
  if (config.mailProvider !== "ses") return createOutboxProvider();
  const { createSesProvider } = await import("./ses-provider.ts");
  return createSesProvider({
    region: config.awsRegion,
    endpoint: config.sesEndpoint,
    logger: logger.child({ facility: "mail" }),
  });
}

export async function createMailFacility(deps: Deps, options: MailFacilityOptions = {}): Promise<MailFacility> {
  const logger = deps.logger.child({ facility: "mail" });
  const provider = options.provider ?? (await createMailProvider(deps));
  const store = createMailStore(deps.db);
  const days = createMailDayStore(deps.db);
  const apps = deps.apps;
  return {
    service: MailService,
    impl: createMailService({ provider, store, quotas: deps.quotas, logger, metrics: deps.metrics }),
    routes: mailRoutes,
    readiness: () => readinessOf("mail", provider.ping?.bind(provider)),
    housekeeping: () => [
      retentionTask("mail retention", apps, (appId, before, batch) => store.deleteOlderThan(appId, before, batch)),
      { name: "mail days", intervalMs: HOUR_MS, run: () => days.prune() },
    ],
    operations: {
      searchMail: (appId, search) => store.search(appId, search),
      getMail: (appId, id) => store.get(appId, id),
      async mailOnDay(day) {
        const by = await days.onDay(day);
        const n = (status: string) => by.get(status) ?? 0;
        return { sent: n("sent") + n("stored"), failed: n("failed") + n("unconfirmed") };
      },
    },
    async start() {
      logger.info(`mail provider: ${provider.description}`);
    },
    async close() {
      await provider.close?.();
    },
  };
}
