/**
 * The AdminService RPCs the operator dashboard needs beyond the original
 * admin API: tokens with their last use, the daily usage history, and views
 * into an app's analytics, queues, secrets and mail.
 *
 * What an app can already ask for itself (its event types and buckets, its
 * queues, its secrets' status, a secret link) is answered by calling that
 * facility's own implementation with the app as the principal, so the
 * operator sees exactly what the app would (same validation, same errors).
 * Only what no app may do (peek without leasing, purge, read one mail) is
 * SQL here, always scoped by the app's id. No secret value is ever read.
 */
import { createContextValues, createHandlerContext, type HandlerContext } from "@connectrpc/connect";
import type { DescMethod, DescService } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { AdminService } from "../../gen/platform/admin/v1/admin_pb.js";
import { AnalyticsService } from "../../gen/platform/analytics/v1/analytics_pb.js";
import { QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import { SecretsService } from "../../gen/platform/secrets/v1/secrets_pb.js";
import type { ServiceImpl } from "@connectrpc/connect";
import { NAME_PATTERN, NAME_RULE, getApp, type AppRecord } from "../apps.ts";
import { principalKey } from "../auth.ts";
import { PlatformError, invalidArgument } from "../errors.ts";
import type { Deps, Facility } from "../facility.ts";
import { sql } from "../database.ts";
import { utcDay, type QuotaCounter } from "../quotas.ts";
import type { MailInit } from "./admin-facility.ts";

/** Payloads longer than this are cut in a peek: the dashboard shows them, it does not page through them. */
export const PEEK_PAYLOAD_CHARS = 4096;
const EVENTS_QUEUE = "_events";

export type OperatorRpcs = Pick<
  ServiceImpl<typeof AdminService>,
  | "listTokens"
  | "getUsageHistory"
  | "listEventTypes"
  | "queryAnalytics"
  | "listQueues"
  | "peekMessages"
  | "purgeQueue"
  | "listSecrets"
  | "createSecretLink"
  | "getMail"
>;

export interface OperatorHooks {
  /** The facilities whose own RPCs answer for an app (analytics, queues, secrets). */
  appFacilities?: readonly Facility[];
  getMail?(appId: string, id: string): Promise<MailInit | undefined>;
}

function requireAppId(appId: string): string {
  if (!appId) throw invalidArgument("app_id", "is required");
  return appId;
}

function checkQueue(name: string): string {
  if (name !== EVENTS_QUEUE && !NAME_PATTERN.test(name)) throw invalidArgument("queue", `${NAME_RULE} or be ${EVENTS_QUEUE}`);
  return name;
}

/** Today's use of every app that used anything today, as ListApps' at-a-glance column. */
export async function usageToday(deps: Deps): Promise<Map<string, Map<QuotaCounter, number>>> {
  const rows = await deps.db.selectFrom("quota_usage").select(["app_id", "counter", "used"]).where("day", "=", utcDay()).execute();
  const out = new Map<string, Map<QuotaCounter, number>>();
  for (const r of rows) {
    let app = out.get(r.app_id);
    if (!app) out.set(r.app_id, (app = new Map()));
    app.set(r.counter as QuotaCounter, Number(r.used));
  }
  return out;
}

export function createOperatorRpcs(deps: Deps, hooks: OperatorHooks): OperatorRpcs {
  const { db } = deps;
  const load = (appId: string) => getApp(db, requireAppId(appId));

  /** Calls a facility's own implementation of `method` as `app` would. */
  async function asApp<I, O>(app: AppRecord, service: DescService, method: DescMethod, request: I, signal: AbortSignal): Promise<O> {
    const facility = hooks.appFacilities?.find((f) => f.service.typeName === service.typeName);
    const impl = facility?.impl as Record<string, ((req: I, ctx: HandlerContext) => Promise<O>) | undefined> | undefined;
    const fn = impl?.[method.localName];
    if (!fn) throw new PlatformError("not_configured", `${service.name}.${method.name} is not available in this deployment`);
    const values = createContextValues().set(principalKey, { kind: "app", app, tokenId: "" });
    const context = createHandlerContext({
      service,
      method,
      protocolName: "connect",
      requestMethod: "POST",
      url: `/${service.typeName}/${method.name}`,
      requestSignal: signal,
      contextValues: values,
    });
    return fn.call(impl, request, context);
  }

  return {
    async listTokens(req) {
      const app = await load(req.appId);
      const rows = await db
        .selectFrom("app_tokens")
        .select(["id", "label", "created_at", "last_used_at"])
        .where("app_id", "=", app.id)
        .orderBy("created_at", "desc")
        .orderBy("id")
        .execute();
      return {
        tokens: rows.map((r) => ({
          id: r.id,
          label: r.label,
          createdAt: timestampFromDate(new Date(r.created_at as unknown as string)),
          lastUsedAt: r.last_used_at ? timestampFromDate(new Date(r.last_used_at)) : undefined,
        })),
      };
    },

    async getUsageHistory(req) {
      const app = await load(req.appId);
      const days = req.days ?? 30;
      if (!Number.isInteger(days) || days < 1 || days > 366) throw invalidArgument("days", "must be from 1 to 366");
      const today = new Date(`${utcDay()}T00:00:00Z`);
      const first = new Date(today.getTime() - (days - 1) * 86_400_000);
      const rows = await db
        .selectFrom("quota_usage")
        .select([sql<string>`to_char(day, 'YYYY-MM-DD')`.as("day"), "counter", "used"])
        .where("app_id", "=", app.id)
        .where("day", ">=", utcDay(first) as never)
        .execute();
      const byDay = new Map<string, Record<string, bigint>>();
      for (const r of rows) {
        const d = byDay.get(r.day) ?? {};
        d[r.counter] = BigInt(r.used);
        byDay.set(r.day, d);
      }
      const out = [];
      for (let i = 0; i < days; i++) {
        const day = utcDay(new Date(first.getTime() + i * 86_400_000));
        const d = byDay.get(day) ?? {};
        out.push({ day, events: d.events ?? 0n, mail: d.mail ?? 0n, fastTokens: d.fast_tokens ?? 0n, embedTokens: d.embed_tokens ?? 0n });
      }
      return { days: out, limits: { ...app.limits } };
    },

    async listEventTypes(req, context) {
      const app = await load(req.appId);
      return asApp(app, AnalyticsService, AnalyticsService.method.listEventTypes, {}, context.signal);
    },

    async queryAnalytics(req, context) {
      const app = await load(req.appId);
      const { appId: _appId, $typeName: _typeName, ...query } = req;
      return asApp(app, AnalyticsService, AnalyticsService.method.queryEvents, query, context.signal);
    },

    async listQueues(req, context) {
      const app = await load(req.appId);
      return asApp(app, QueueService, QueueService.method.listQueues, {}, context.signal);
    },

    async peekMessages(req) {
      const app = await load(req.appId);
      const queue = checkQueue(req.queue);
      const limit = req.limit ?? 20;
      if (!Number.isInteger(limit) || limit < 1 || limit > 100) throw invalidArgument("limit", "must be from 1 to 100");
      // The waiting line in claim order, read only: no lease is taken, no delivery counted.
      const { rows } = await sql<{ id: string; payload: string; size: number; enqueued_at: Date | string; expires_at: Date | string; deliveries: number }>`
        SELECT id, left(payload, ${PEEK_PAYLOAD_CHARS + 1}) AS payload, octet_length(payload) AS size, enqueued_at, expires_at, deliveries
        FROM queue_messages
        WHERE app_id = ${app.id} AND queue = ${queue}
          AND (deliveries = 0 OR visible_at <= now()) AND expires_at > now()
        ORDER BY visible_at, enqueued_at
        LIMIT ${limit}`.execute(db);
      return {
        messages: rows.map((r) => {
          const truncated = r.payload.length > PEEK_PAYLOAD_CHARS;
          return {
            id: r.id,
            payload: truncated ? r.payload.slice(0, PEEK_PAYLOAD_CHARS) : r.payload,
            truncated,
            sizeBytes: BigInt(r.size),
            enqueuedAt: timestampFromDate(new Date(r.enqueued_at)),
            expiresAt: timestampFromDate(new Date(r.expires_at)),
            deliveries: Number(r.deliveries),
          };
        }),
      };
    },

    async purgeQueue(req) {
      const app = await load(req.appId);
      const queue = checkQueue(req.queue);
      const result = await db.deleteFrom("queue_messages").where("app_id", "=", app.id).where("queue", "=", queue).executeTakeFirst();
      return { purged: BigInt(result.numDeletedRows) };
    },

    async listSecrets(req, context) {
      const app = await load(req.appId);
      return asApp(app, SecretsService, SecretsService.method.listSecrets, {}, context.signal);
    },

    async createSecretLink(req, context) {
      const app = await load(req.appId);
      return asApp(app, SecretsService, SecretsService.method.createSecretLink, { name: req.name }, context.signal);
    },

    async getMail(req) {
      if (!hooks.getMail) throw new PlatformError("not_configured", "GetMail is not available in this deployment");
      const app = await load(req.appId);
      if (!/^[1-9][0-9]{0,17}$/.test(req.id)) throw invalidArgument("id", "must be a mail id from ListMail");
      const mail = await hooks.getMail(app.id, req.id);
      if (!mail) throw new PlatformError("not_found", `no mail ${req.id} for this app`);
      return { mail };
    },
  };
}
