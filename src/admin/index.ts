/**
 * The admin API (DESIGN.md section 6, `AdminService`): apps, tokens,
 * blueprints, limits and usage. It owns no tables: apps and tokens are the
 * core's (`core/apps/app-store.ts`), and what belongs to another facility
 * (secret names and values, platform events, the mail log) it asks through
 * that facility's public interface (`AdminHooks`), handed in by the
 * composition root. It has no REST routes: only Connect and gRPC.
 */
import { AdminService } from "../../gen/platform/admin/v1/admin_pb.js";
import type { Deps, Facility } from "../core/facility.ts";
import { createAdminService, type AdminHooks } from "./admin-service.ts";

export type { AdminHooks } from "./admin-service.ts";
export { createTokenUsageRecorder } from "./token-usage.ts";

/** `onAuthChanged` runs after every change to an app or a token (see `AdminServiceOptions`). */
export function createAdminFacility(
  deps: Deps,
  hooks: AdminHooks,
  onAuthChanged: () => void = () => {},
): Facility<typeof AdminService> {
  return {
    service: AdminService,
    impl: createAdminService({
      apps: deps.apps,
      quotas: deps.quotas,
      hooks,
      mailDomain: deps.config.mailDomain,
      onAuthChanged,
    }),
  };
}
