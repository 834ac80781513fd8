/**
 * The admin API (`AdminService`, proto/platform/admin/v1/admin.proto): apps, tokens,
 * blueprints, limits and usage. It owns no tables: apps and tokens are the
 * core's (`core/apps/app-store.ts`), and what belongs to another facility
 * (secret names and values, platform events, the mail log) it asks through
 * that facility's operations (`FacilityOperations`), handed in by the
 * composition root. It has no REST routes: only Connect and gRPC.
 */
import { AdminService } from "../../gen/platform/admin/v1/admin_pb.js";
import type { Deps, Facility } from "../core/facility.ts";
import { createAdminService } from "./admin-service.ts";
import type { FacilityOperations } from "./facility-operations.ts";
import { createAuditStore } from "./audit-store.ts";
import type { OverviewOptions } from "./overview.ts";
import { inBatches, type HousekeepingTask } from "../core/housekeeping.ts";
import { retentionCutoff } from "../core/apps/apps.ts";
import { HOUR_MS } from "../core/time.ts";

export type { FacilityOperations } from "./facility-operations.ts";
export type { OverviewDependency, OverviewOptions } from "./overview.ts";
export { createTokenUsageRecorder } from "./token-usage.ts";
export { createAuditStore, type AuditEntryInput } from "./audit-store.ts";

/** How often the audit log's expired entries are deleted. */
const AUDIT_SWEEP_INTERVAL_MS = HOUR_MS;

/**
 * `onAuthChanged` runs after every change to an app, a token or an operator (see `AdminServiceOptions`);
 * `overview` is what GetOverview reports of this instance.
 */
export function createAdminFacility(
  deps: Deps,
  operations: FacilityOperations,
  onAuthChanged: () => void = () => {},
  overview?: OverviewOptions,
): Facility<typeof AdminService> {
  const audit = createAuditStore(deps.db);
  return {
    service: AdminService,
    housekeeping: (): HousekeepingTask[] => [
      {
        name: "audit log",
        intervalMs: AUDIT_SWEEP_INTERVAL_MS,
        run: (signal) => {
          const cutoff = retentionCutoff(deps.config.auditRetentionDays);
          return inBatches(signal, (batch) => audit.deleteOlderThan(cutoff, batch));
        },
      },
    ],
    impl: createAdminService({
      db: deps.db,
      logger: deps.logger,
      apps: deps.apps,
      quotas: deps.quotas,
      operations,
      mailDomain: deps.config.mailDomain,
      onAuthChanged,
      overview,
      startedAt: overview?.startedAt,
    }),
  };
}
