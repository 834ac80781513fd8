/**
 * The AdminService RPCs that reach into one app's facilities: its tokens with
 * their last use, its daily usage history, and views into (and operator
 * actions on) its analytics, queues and secrets.
 *
 * What an app can already ask for itself (its event types and buckets, its
 * queues, its secrets' status, a secret link) is answered by calling that
 * facility's own implementation with the app as the principal, so the
 * operator sees exactly what the app would (same validation, same errors).
 * What no app may do (peek without leasing, purge) is one of the queues
 * facility's operations. No secret value is ever read.
 */
import { createContextValues, createHandlerContext, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import type { DescMethod, DescService } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { AdminService } from "../../gen/platform/admin/v1/admin_pb.js";
import { AnalyticsService } from "../../gen/platform/analytics/v1/analytics_pb.js";
import { QueueService, type GetMessageResponse } from "../../gen/platform/queues/v1/queues_pb.js";
import { SecretsService } from "../../gen/platform/secrets/v1/secrets_pb.js";
import { isUuid, type AppRecord } from "../core/apps/apps.ts";
import type { AppStore } from "../core/apps/app-store.ts";
import { principalKey } from "../core/auth.ts";
import { PlatformError, invalidArgument } from "../core/errors.ts";
import type { Quotas } from "../core/quotas/index.ts";
import type { Auditor } from "./auditor.ts";
import type { FacilityOperations } from "./facility-operations.ts";
import { tokenMessage } from "./token-usage.ts";
import {
  EVENTS_QUEUE,
  checkQueueName,
  isPeekPosition,
  type DeadLetterSelection,
  policyChangeOf,
  policyMessage,
  type QueuePolicy,
  type StoredPolicy,
} from "../queues/index.ts";

/** Payloads longer than this are cut in a peek: the dashboard shows them, it does not page through them. */
const PEEK_PAYLOAD_CHARS = 4096;

export type AppFacilityRpcs = Pick<
  ServiceImpl<typeof AdminService>,
  | "listTokens"
  | "getUsageHistory"
  | "listEventTypes"
  | "queryAnalytics"
  | "queryAnalyticsFunnel"
  | "listQueues"
  | "peekMessages"
  | "purgeQueue"
  | "getQueueActivity"
  | "putTestMessage"
  | "listSecrets"
  | "createSecretLink"
  | "listDeadLetters"
  | "replayDeadLetters"
  | "purgeDeadLetters"
  | "getQueuePolicy"
  | "setQueuePolicy"
  | "getQueueMessage"
  | "listQueueSchedules"
>;

/** Most ids one ReplayDeadLetters or PurgeDeadLetters call may name. */
const MAX_DEAD_LETTER_IDS = 1_000;

/**
 * Where a queue's max_deliveries comes from (the rule of the queues facility's `effectivePolicy`): the queue's
 * own value unless the app's limit bounds it, else the app's limit, else none (unlimited).
 */
function maxDeliveriesSource(app: AppRecord, stored: StoredPolicy | undefined): "queue" | "app" | "default" {
  const limit = app.limits.maxDeliveries;
  const own = stored?.maxDeliveries ?? null;
  if (own !== null && !(limit > 0 && (own === 0 || own > limit))) return "queue";
  return limit > 0 ? "app" : "default";
}

/**
 * What a peeked message and a dead letter show alike: the payload cut at PEEK_PAYLOAD_CHARS (and whether it
 * was), its size and when it was put.
 */
function peekedFields(m: { id: string; payload: string; sizeBytes: number; enqueuedAt: Date }) {
  const truncated = m.payload.length > PEEK_PAYLOAD_CHARS;
  return {
    id: m.id,
    payload: truncated ? m.payload.slice(0, PEEK_PAYLOAD_CHARS) : m.payload,
    truncated,
    sizeBytes: BigInt(m.sizeBytes),
    enqueuedAt: timestampFromDate(m.enqueuedAt),
  };
}

/** GetQueuePolicy's and SetQueuePolicy's answer: the effective policy and where its max_deliveries comes from. */
function policyAnswer(app: AppRecord, queue: string, policy: QueuePolicy, stored: StoredPolicy | undefined) {
  return {
    policy: policyMessage(queue, policy),
    maxDeliveriesSource: maxDeliveriesSource(app, stored),
    appMaxDeliveries: app.limits.maxDeliveries,
  };
}

/** `all` or `ids`, exactly one: an empty list never means "every one" by accident. */
function deadLetterSelection(req: { all: boolean; ids: string[] }): DeadLetterSelection {
  if (req.all && req.ids.length > 0) throw invalidArgument("ids", "must be empty when all is true");
  if (req.all) return { all: true };
  if (req.ids.length === 0) throw invalidArgument("ids", "must name 1 to 1000 dead letters, or set all");
  if (req.ids.length > MAX_DEAD_LETTER_IDS)
    throw invalidArgument("ids", `must name at most ${MAX_DEAD_LETTER_IDS} dead letters (was ${req.ids.length})`);
  req.ids.forEach((id, i) => {
    if (!isUuid(id)) throw invalidArgument(`ids[${i}]`, "must be a dead letter id (a UUID)");
  });
  return { ids: [...new Set(req.ids.map((id) => id.toLowerCase()))] };
}

function unavailable(what: string): never {
  throw new PlatformError("not_configured", `${what} is not available in this deployment`);
}

export function createAppFacilityRpcs(options: {
  apps: AppStore;
  quotas: Quotas;
  operations: FacilityOperations;
  getApp: (appId: string) => Promise<AppRecord>;
  auditor: Auditor;
}): AppFacilityRpcs {
  const { apps, quotas, operations, getApp: load, auditor } = options;
  const { queues, secrets } = operations;

  /** Calls a facility's own implementation of `method` as `app` would. */
  async function asApp<I, O>(
    app: AppRecord,
    service: DescService,
    method: DescMethod,
    request: I,
    signal: AbortSignal,
  ): Promise<O> {
    const facility = operations.appFacilities.find((f) => f.service.typeName === service.typeName);
    const impl = facility?.impl as
      Record<string, ((req: I, ctx: HandlerContext) => Promise<O>) | undefined> | undefined;
    const fn = impl?.[method.localName];
    if (!fn) unavailable(`${service.name}.${method.name}`);
    const context = createHandlerContext({
      service,
      method,
      protocolName: "connect",
      requestMethod: "POST",
      url: `/${service.typeName}/${method.name}`,
      requestSignal: signal,
      contextValues: createContextValues().set(principalKey, { kind: "app", app, tokenId: "" }),
    });
    return fn.call(impl, request, context);
  }

  return {
    async listTokens(req) {
      const app = await load(req.appId);
      const tokens = await apps.listTokens(app.id);
      return {
        tokens: tokens.map(tokenMessage),
      };
    },

    async getUsageHistory(req) {
      const app = await load(req.appId);
      const days = req.days ?? 30;
      if (!Number.isInteger(days) || days < 1 || days > 366) throw invalidArgument("days", "must be from 1 to 366");
      const history = await quotas.history(app.id, days);
      return {
        days: history.map(({ day, used }) => ({
          day,
          events: BigInt(used.events),
          mail: BigInt(used.mail),
          fastTokens: BigInt(used.fast_tokens),
          embedTokens: BigInt(used.embed_tokens),
        })),
        limits: { ...app.limits },
      };
    },

    async listEventTypes(req, context) {
      const app = await load(req.appId);
      return asApp(app, AnalyticsService, AnalyticsService.method.listEventTypes, {}, context.signal);
    },

    async queryAnalytics(req, context) {
      const app = await load(req.appId);
      const { type, since, until, interval, groupBy, timezone, aggregate, of, where, groupByProperties, limit } = req;
      return asApp(
        app,
        AnalyticsService,
        AnalyticsService.method.queryEvents,
        { type, since, until, interval, groupBy, timezone, aggregate, of, where, groupByProperties, limit },
        context.signal,
      );
    },

    async queryAnalyticsFunnel(req, context) {
      const app = await load(req.appId);
      const { steps, since, until, windowSeconds, breakdown, limit } = req;
      return asApp(
        app,
        AnalyticsService,
        AnalyticsService.method.queryFunnel,
        { steps, since, until, windowSeconds, breakdown, limit },
        context.signal,
      );
    },

    async listQueues(req, context) {
      const app = await load(req.appId);
      const listed = await asApp<object, { queues: { name: string }[] }>(
        app,
        QueueService,
        QueueService.method.listQueues,
        {},
        context.signal,
      );
      const policies = await Promise.all(
        listed.queues.map(async (q) => policyMessage(q.name, (await queues.policy(app, q.name)).policy)),
      );
      return { ...listed, policies };
    },

    async listQueueSchedules(req) {
      const app = await load(req.appId);
      const queue = req.queue === "" ? undefined : checkQueueName(req.queue, true);
      return { schedules: await queues.schedules(app.id, queue) };
    },

    async getQueuePolicy(req) {
      const app = await load(req.appId);
      const queue = checkQueueName(req.queue, true);
      const { policy, stored } = await queues.policy(app, queue);
      return policyAnswer(app, queue, policy, stored);
    },

    async setQueuePolicy(req, context) {
      const app = await load(req.appId);
      // What was asked, as given: the entry of a refused change says it too.
      const change = policyChangeOf(req);
      const asked = Object.fromEntries(Object.entries(change).filter(([, v]) => v !== undefined));
      const { queue, policy } = await auditor.audited(
        context,
        "queue.policy",
        app,
        { queue: req.queue, ...asked },
        async (tx) => {
          const queue = checkQueueName(req.queue, true);
          if (Object.keys(asked).length === 0) throw invalidArgument("policy", "must change at least one field");
          return { queue, policy: await queues.setPolicy(tx, app, queue, change) };
        },
      );
      // Read once the change committed (a read on the pool while it is open would wait for it on PGlite).
      const { stored } = await queues.policy(app, queue);
      return policyAnswer(app, queue, policy, stored);
    },

    async getQueueMessage(req, context) {
      const app = await load(req.appId);
      const message = await asApp<{ queue: string; id: string }, GetMessageResponse>(
        app,
        QueueService,
        QueueService.method.getMessage,
        { queue: req.queue, id: req.id },
        context.signal,
      );
      return { message };
    },

    async peekMessages(req) {
      const app = await load(req.appId);
      const queue = checkQueueName(req.queue, true);
      const limit = req.limit ?? 20;
      if (!Number.isInteger(limit) || limit < 1 || limit > 100) throw invalidArgument("limit", "must be from 1 to 100");
      const after = req.pageToken === "" ? undefined : Buffer.from(req.pageToken, "base64url").toString("utf8");
      if (after !== undefined && !isPeekPosition(after))
        throw invalidArgument("page_token", "must be the next_page_token of a previous PeekMessages answer");
      // One more than asked tells whether a next page exists.
      const found = await queues.peek({ appId: app.id, queue, limit: limit + 1, maxChars: PEEK_PAYLOAD_CHARS, after });
      const messages = found.slice(0, limit);
      return {
        nextPageToken:
          found.length > limit ? Buffer.from(messages[messages.length - 1].position, "utf8").toString("base64url") : "",
        messages: messages.map((m) => ({
          ...peekedFields(m),
          expiresAt: timestampFromDate(m.expiresAt),
          deliveries: m.deliveries,
        })),
      };
    },

    async purgeQueue(req, context) {
      const app = await load(req.appId);
      return auditor.audited(context, "queue.purge", app, { queue: req.queue }, async (tx) => ({
        purged: BigInt(await queues.purge(tx, app.id, checkQueueName(req.queue, true))),
      }));
    },

    async getQueueActivity(req) {
      const app = await load(req.appId);
      const hours = await queues.activity(app.id, checkQueueName(req.queue, true));
      return {
        hours: hours.map((h) => ({ at: timestampFromDate(h.at), puts: BigInt(h.puts), acks: BigInt(h.acks) })),
      };
    },

    async putTestMessage(req, context) {
      const app = await load(req.appId);
      // `_events` carries the platform's events (docs/queues.md#platform-events): an operator's test message there would read as one.
      if (req.queue === EVENTS_QUEUE)
        throw invalidArgument("queue", `must be an app's own queue, not ${EVENTS_QUEUE} (use PublishEvent)`);
      const queue = checkQueueName(req.queue, false);
      const payload = req.payload;
      if (payload === undefined) throw invalidArgument("payload", "is required (any JSON value)");
      // As the app would put it: same validation, caps and limits, and its consumers are woken.
      return auditor.audited(context, "queue.put", app, { queue }, async (tx) => {
        const put = await queues.put(tx, app, queue, payload, req.groupKey);
        return { id: put.id };
      });
    },

    async listDeadLetters(req) {
      const app = await load(req.appId);
      const queue = checkQueueName(req.queue, true);
      const pageSize = req.pageSize ?? 20;
      if (!Number.isInteger(pageSize) || pageSize < 1 || pageSize > 100)
        throw invalidArgument("page_size", "must be from 1 to 100");
      const page = await queues.listDeadLetters({
        appId: app.id,
        queue,
        pageSize,
        pageToken: req.pageToken,
        maxChars: PEEK_PAYLOAD_CHARS,
      });
      return {
        deadLetters: page.deadLetters.map((d) => ({
          ...peekedFields(d),
          deliveries: d.deliveries,
          diedAt: timestampFromDate(d.diedAt),
          expiresAt: timestampFromDate(d.expiresAt),
          failureReason: d.failureReason ?? undefined,
          groupKey: d.groupKey ?? undefined,
        })),
        nextPageToken: page.nextPageToken,
      };
    },

    async replayDeadLetters(req, context) {
      const app = await load(req.appId);
      const detail = { queue: req.queue, ...(req.all ? { all: true } : { ids: req.ids.length }) };
      return auditor.audited(context, "dead_letters.replay", app, detail, async (tx) => {
        const queue = checkQueueName(req.queue, true);
        const which = deadLetterSelection(req);
        const ttl = app.limits.messageTtlSeconds;
        return { replayed: BigInt(await queues.replayDeadLetters(tx, app.id, queue, which, ttl)) };
      });
    },

    async purgeDeadLetters(req, context) {
      const app = await load(req.appId);
      const detail = { queue: req.queue, ...(req.all ? { all: true } : { ids: req.ids.length }) };
      return auditor.audited(context, "dead_letters.purge", app, detail, async (tx) => {
        const queue = checkQueueName(req.queue, true);
        return { purged: BigInt(await queues.purgeDeadLetters(tx, app.id, queue, deadLetterSelection(req))) };
      });
    },

    async listSecrets(req, context) {
      const app = await load(req.appId);
      return asApp(app, SecretsService, SecretsService.method.listSecrets, {}, context.signal);
    },

    async createSecretLink(req, context) {
      const app = await load(req.appId);
      return auditor.audited(context, "secret.link", app, { name: req.name }, async (tx) => {
        const link = await secrets.createLink(tx, app, req.name);
        return { url: link.url, name: link.name, expiresAt: timestampFromDate(link.expiresAt) };
      });
    },
  };
}
