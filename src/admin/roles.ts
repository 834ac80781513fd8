/**
 * What each operator role may call. A viewer reads: every RPC not listed in
 * `VIEWER_RPCS` is refused by the server with `permission_denied` (and the
 * attempt is audited), whatever a screen shows or hides. A viewer never sees
 * a secret link or a value: creating and listing links are not viewer RPCs,
 * and no RPC returns a value.
 */
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type { AdminService } from "../../gen/platform/admin/v1/admin_pb.js";
import { PlatformError } from "../core/errors.ts";
import { RPC_ACTIONS } from "./audit-actions.ts";
import { operatorOf, type AuditedApp, type Auditor } from "./auditor.ts";

export { AUDIT_ACTIONS, RPC_ACTIONS } from "./audit-actions.ts";

type AdminImpl = ServiceImpl<typeof AdminService>;

/** The admin RPCs a viewer may call (by their local name). */
const VIEWER_RPCS: ReadonlySet<string> = new Set([
  "getApp",
  "listApps",
  "getUsage",
  "getUsageHistory",
  "listMail",
  "getMail",
  "listTokens",
  "listEventTypes",
  "queryAnalytics",
  "queryAnalyticsFunnel",
  "listQueues",
  "peekMessages",
  "listDeadLetters",
  "getQueueActivity",
  "getQueuePolicy",
  "getQueueMessage",
  "listQueueSchedules",
  "listSecrets",
  "whoAmI",
  "listOperators",
  "listOperatorTokens",
  "listAuditEntries",
  "getOverview",
]);

/** Wraps every RPC of `impl` with the role check. */
export function withRoles(
  impl: AdminImpl,
  auditor: Auditor,
  findApp: (ref: string) => Promise<AuditedApp | undefined>,
): AdminImpl {
  const guarded: Record<string, unknown> = {};
  for (const [name, fn] of Object.entries(impl) as [string, (req: unknown, ctx: HandlerContext) => unknown][]) {
    guarded[name] = async (req: { appId?: unknown }, context: HandlerContext) => {
      const operator = operatorOf(context);
      if (operator.role !== "admin" && !VIEWER_RPCS.has(name)) {
        const action = RPC_ACTIONS[name];
        const appRef = typeof req.appId === "string" && req.appId ? req.appId : undefined;
        if (action) {
          const app = appRef ? await findApp(appRef) : undefined;
          await auditor.refused(context, action, appRef ? { app: appRef } : {}, app);
        }
        throw new PlatformError(
          "permission_denied",
          `the ${operator.role} role may not call ${name[0].toUpperCase()}${name.slice(1)}`,
          {
            details: ["viewers read only; ask an admin operator"],
          },
        );
      }
      const action = RPC_ACTIONS[name];
      if (!action) return fn.call(impl, req, context);
      try {
        return await fn.call(impl, req, context);
      } catch (err) {
        // Refused before its change began (no such app, a malformed argument): still an attempt to record.
        const appRef = typeof req.appId === "string" && req.appId ? req.appId : undefined;
        const app = appRef ? await findApp(appRef) : undefined;
        await auditor.attempted(context, action, appRef ? { app: appRef } : {}, err, app);
        throw err;
      }
    };
  }
  return guarded as AdminImpl;
}
