/**
 * GetOverview: this instance (version, uptime), the readiness of each
 * dependency (the checks of `/ready`), and what needs attention across apps:
 * apps stopped, daily caps near (80 %) or reached today, secret links about
 * to expire (within the hour), and, when the queues facility reports them,
 * queues with dead letters or whose oldest waiting message is old.
 */
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { GetOverviewResponseSchema } from "../../gen/platform/admin/v1/admin_pb.js";
import type { AppStore } from "../core/apps/app-store.ts";
import type { QuotaCounter, Quotas } from "../core/quotas/index.ts";
import type { ReadinessReport } from "../core/readiness.ts";

type Overview = MessageInitShape<typeof GetOverviewResponseSchema>;
type Attention = NonNullable<Overview["attention"]>[number];

export interface OverviewOptions {
  version: string;
  startedAt: Date;
  /** The checks of `/ready`. */
  readiness(): Promise<ReadinessReport>;
}

/** A queue as the overview needs it, across apps. */
export interface QueueAttention {
  appId: string;
  queue: string;
  deadLetters: number;
  /** Age in seconds of the oldest waiting message; 0 when none waits. */
  oldestAgeSeconds: number;
}

export interface OverviewHooks {
  /** Every queue with dead letters or old waiting messages, across apps. */
  queueAttention?(oldAgeSeconds: number): Promise<QueueAttention[]>;
  /** Outstanding links expiring within `seconds`, across apps. */
  expiringLinks?(seconds: number): Promise<{ appId: string; name: string; expiresAt: Date }[]>;
}

/** A waiting message older than this is worth a look. */
export const OLD_MESSAGE_SECONDS = 3600;
/** A link expiring within this is worth a look. */
export const LINK_EXPIRING_SECONDS = 3600;
/** The share of a daily cap from which an app is "near" it. */
export const CAP_NEAR_SHARE = 0.8;

const CAPS: [QuotaCounter, "eventsPerDay" | "mailPerDay" | "fastTokensPerDay" | "embedTokensPerDay"][] = [
  ["events", "eventsPerDay"],
  ["mail", "mailPerDay"],
  ["fast_tokens", "fastTokensPerDay"],
  ["embed_tokens", "embedTokensPerDay"],
];

export function createOverview(
  options: OverviewOptions | undefined,
  apps: AppStore,
  quotas: Quotas,
  hooks: OverviewHooks,
): () => Promise<Overview> {
  return async () => {
    const [report, all, today, queues, links] = await Promise.all([
      options?.readiness() ?? Promise.resolve<ReadinessReport>({ ready: true, checks: {} }),
      apps.list(),
      quotas.usedToday(),
      hooks.queueAttention?.(OLD_MESSAGE_SECONDS) ?? Promise.resolve([]),
      hooks.expiringLinks?.(LINK_EXPIRING_SECONDS) ?? Promise.resolve([]),
    ]);
    const byId = new Map(all.map((a) => [a.id, a]));
    const attention: Attention[] = [];
    const item = (a: Attention) => attention.push(a);
    for (const app of all) {
      if (app.status === "stopped")
        item({
          kind: "app_stopped",
          severity: "warning",
          appId: app.id,
          appName: app.name,
          subject: "",
          message: `${app.name} is stopped: its service tokens are refused`,
        });
      const used = today.get(app.id);
      if (!used) continue;
      for (const [counter, limit] of CAPS) {
        const cap = app.limits[limit];
        const n = used.get(counter) ?? 0;
        if (n === 0) continue;
        if (n >= cap)
          item({
            kind: "cap_reached",
            severity: "critical",
            appId: app.id,
            appName: app.name,
            subject: counter,
            message: `${app.name} reached its daily ${counter} cap (${n} of ${cap})`,
          });
        else if (n >= cap * CAP_NEAR_SHARE)
          item({
            kind: "cap_near",
            severity: "warning",
            appId: app.id,
            appName: app.name,
            subject: counter,
            message: `${app.name} used ${Math.floor((n / cap) * 100)} % of its daily ${counter} cap (${n} of ${cap})`,
          });
      }
    }
    for (const q of queues) {
      const app = byId.get(q.appId);
      if (!app) continue;
      if (q.deadLetters > 0)
        item({
          kind: "dead_letters",
          severity: "critical",
          appId: app.id,
          appName: app.name,
          subject: q.queue,
          message: `${q.deadLetters} dead letter(s) wait in ${app.name}/${q.queue}`,
        });
      if (q.oldestAgeSeconds >= OLD_MESSAGE_SECONDS)
        item({
          kind: "old_messages",
          severity: "warning",
          appId: app.id,
          appName: app.name,
          subject: q.queue,
          message: `the oldest message of ${app.name}/${q.queue} waits for ${Math.floor(q.oldestAgeSeconds / 60)} minutes`,
        });
    }
    for (const link of links) {
      const app = byId.get(link.appId);
      if (!app) continue;
      item({
        kind: "link_expiring",
        severity: "warning",
        appId: app.id,
        appName: app.name,
        subject: link.name,
        message: `the link that sets ${app.name}'s ${link.name} expires at ${link.expiresAt.toISOString()}`,
      });
    }
    const startedAt = options?.startedAt ?? new Date();
    return {
      version: options?.version ?? "",
      uptimeSeconds: BigInt(Math.max(0, Math.floor((Date.now() - startedAt.getTime()) / 1000))),
      readiness: Object.entries(report.checks).map(([name, state]) => ({
        name,
        ok: state === "ok",
        detail: state,
      })),
      attention,
    };
  };
}
