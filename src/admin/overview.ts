/**
 * GetOverview: this instance (version, uptime), the readiness of each
 * dependency (the checks of `/ready`), the platform's activity (apps by
 * status; per facility the requests of the last hour and day, by hour, with
 * their 4xx and 5xx; the top apps of the day; queue backlog and dead letters;
 * mail and tokens of the day), and what needs attention across apps:
 * apps stopped, daily caps near (80 %) or reached today, secret links about
 * to expire (within the hour), and queues with dead letters or whose oldest
 * waiting message is old.
 *
 * Every figure is read from what is kept as the work happens (request counts
 * in 5-minute buckets, the daily quota counters, the per-queue counts, the
 * mail day counts), never by counting events, messages or mail, so the call
 * costs the same whatever the traffic (docs/operators.md "The overview").
 */
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { GetOverviewResponseSchema } from "../../gen/platform/admin/v1/admin_pb.js";
import type { AppStore } from "../core/apps/app-store.ts";
import type { QuotaCounter, Quotas } from "../core/quotas/index.ts";
import type { ReadinessReport } from "../core/readiness.ts";
import { COUNTED_FACILITIES, BUCKET_MS, type RequestCountStore } from "../core/request-counts/index.ts";
import { HOUR_MS } from "../core/time.ts";
import { utcDay } from "../core/quotas/index.ts";
import type { FacilityOperations } from "./facility-operations.ts";

type Overview = MessageInitShape<typeof GetOverviewResponseSchema>;
type Attention = NonNullable<Overview["attention"]>[number];

export interface OverviewOptions {
  version: string;
  startedAt: Date;
  /** The checks of `/ready`. */
  readiness(): Promise<ReadinessReport>;
  /** The facilities' request counts. */
  requestCounts?: RequestCountStore;
  /** What serves each dependency; its state is its readiness check's (`check`), or `embedded` without one. */
  dependencies?: OverviewDependency[];
}

export interface OverviewDependency {
  name: string;
  provider: string;
  /** The name of its check in the readiness report; none for what runs in-process. */
  check?: string;
}

/** How many apps the overview names as the most active of the day. */
const TOP_APPS = 5;
/** The hours of the overview's per-facility chart. */
const OVERVIEW_HOURS = 24;

/** A waiting message older than this is worth a look. */
const OLD_MESSAGE_SECONDS = 3600;
/** A link expiring within this is worth a look. */
const LINK_EXPIRING_SECONDS = 3600;
/** The share of a daily cap from which an app is "near" it. */
const CAP_NEAR_SHARE = 0.8;

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
  operations: Pick<FacilityOperations, "queues" | "secrets" | "mail">,
): () => Promise<Overview> {
  return async () => {
    const now = Date.now();
    const day = utcDay(new Date(now));
    // The first hour of the chart: the current hour is the last of OVERVIEW_HOURS.
    const firstHour = now - (now % HOUR_MS) - (OVERVIEW_HOURS - 1) * HOUR_MS;
    const counts = options?.requestCounts;
    const [report, all, today, totals, links, buckets, top, mail] = await Promise.all([
      options?.readiness() ?? Promise.resolve<ReadinessReport>({ ready: true, checks: {} }),
      apps.list(),
      quotas.usedToday(),
      operations.queues.overview(OLD_MESSAGE_SECONDS),
      operations.secrets.expiringLinks(LINK_EXPIRING_SECONDS),
      counts?.buckets(new Date(firstHour)) ?? Promise.resolve([]),
      counts?.topApps(day, TOP_APPS) ?? Promise.resolve([]),
      operations.mail.mailOnDay(day),
    ]);
    const queues = totals.attention;
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
    // The last hour: the 12 buckets ending with the current one.
    const lastHourFrom = now - (now % BUCKET_MS) - HOUR_MS + BUCKET_MS;
    const facilities = COUNTED_FACILITIES.map((facility) => {
      const hourly = new Array<number>(OVERVIEW_HOURS).fill(0);
      let lastHour = 0;
      let clientErrors = 0;
      let serverErrors = 0;
      for (const b of buckets) {
        if (b.facility !== facility) continue;
        const at = b.bucket.getTime();
        const i = Math.floor((at - firstHour) / HOUR_MS);
        if (i < 0 || i >= OVERVIEW_HOURS) continue;
        hourly[i] += b.requests;
        clientErrors += b.clientErrors;
        serverErrors += b.serverErrors;
        if (at >= lastHourFrom) lastHour += b.requests;
      }
      return {
        facility,
        requestsLastHour: BigInt(lastHour),
        requestsLastDay: BigInt(hourly.reduce((a, b) => a + b, 0)),
        clientErrorsLastDay: BigInt(clientErrors),
        serverErrorsLastDay: BigInt(serverErrors),
        hourly: hourly.map(BigInt),
      };
    });
    let fastTokens = 0;
    let embedTokens = 0;
    for (const used of today.values()) {
      fastTokens += used.get("fast_tokens") ?? 0;
      embedTokens += used.get("embed_tokens") ?? 0;
    }
    const running = all.filter((a) => a.status === "running").length;
    const dependencies = (options?.dependencies ?? []).map((d) => {
      const state = d.check ? (report.checks[d.check] ?? "not checked") : "embedded";
      return { name: d.name, provider: d.provider, ok: state === "ok" || state === "embedded", state };
    });
    const startedAt = options?.startedAt ?? new Date();
    return {
      appsRunning: running,
      appsStopped: all.length - running,
      day,
      facilities,
      // An app deleted since its requests were counted has no name: left out.
      topApps: top.flatMap((t) => {
        const app = byId.get(t.appId);
        return app
          ? [
              {
                appId: app.id,
                appName: app.name,
                requests: BigInt(t.requests),
                clientErrors: BigInt(t.clientErrors),
                serverErrors: BigInt(t.serverErrors),
              },
            ]
          : [];
      }),
      queueBacklog: BigInt(totals.messages),
      deadLetters: BigInt(totals.deadLetters),
      mailSentToday: BigInt(mail?.sent ?? 0),
      mailFailedToday: BigInt(mail?.failed ?? 0),
      fastTokensToday: BigInt(fastTokens),
      embedTokensToday: BigInt(embedTokens),
      dependencies,
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
