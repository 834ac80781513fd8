/**
 * AdminService (proto/platform/admin/v1/admin.proto): the platform's side of apps, tokens,
 * blueprints, limits and usage. Operations that belong to another facility
 * (setting a secret, publishing an event, reading the mail log) are that
 * facility's own (`FacilityOperations`), called on the change's unit of work.
 */
import { toJson, type JsonObject, type JsonValue, type MessageInitShape } from "@bufbuild/protobuf";
import { ValueSchema, timestampFromDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { isInt64Text } from "../core/text.ts";
import { timestampToMs } from "../core/time.ts";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  AdminService,
  AppStatus,
  AppSchema,
  MailStatus,
  type AppLimits as AppLimitsMessage,
  type MailSchema,
} from "../../gen/platform/admin/v1/admin_pb.js";
import {
  LIMIT_NAMES,
  limitProblem,
  NAME_PATTERN,
  NAME_RULE,
  SECRET_NAME_PATTERN,
  SECRET_NAME_RULE,
  isUuid,
  type AppLimits,
  type AppRecord,
} from "../core/apps/apps.ts";
import {
  createAppStore,
  type AppChanges,
  type AppOrder,
  type AppPagePosition,
  type AppStore,
} from "../core/apps/app-store.ts";
import { isExactTimeText, type Db, type Tx } from "../core/database/index.ts";
import type { Logger } from "pino";
import { generateServiceToken, hashToken } from "../core/auth.ts";
import { PlatformError, invalidArgument } from "../core/errors.ts";
import { utcDay, type QuotaCounter, type Quotas } from "../core/quotas/index.ts";
import { rawMessage, type MailLogRecord, type MailLogStatus } from "../mail/index.ts";
import { createAppFacilityRpcs } from "./app-facility-rpcs.ts";
import { createAuditStore } from "./audit-store.ts";
import { createAuditor } from "./auditor.ts";
import type { FacilityOperations } from "./facility-operations.ts";
import { createOperatorAccountRpcs } from "./operator-accounts.ts";
import { withRoles } from "./roles.ts";
import { createOverview, type OverviewOptions } from "./overview.ts";

type MailInit = MessageInitShape<typeof MailSchema>;

export interface AdminServiceOptions {
  /** The platform database: a change and its audit entry share one transaction. */
  db: Db;
  logger: Logger;
  apps: AppStore;
  quotas: Quotas;
  /** The other facilities' operations (each from its `index.ts`). */
  operations: FacilityOperations;
  /** When this instance started (the owner's created_at in WhoAmI, and the overview's uptime). */
  startedAt?: Date;
  /** What GetOverview reports of this instance. */
  overview?: OverviewOptions;
  /** A new app's sender address is `<name>@<mailDomain>` when set. */
  mailDomain: string | undefined;
  /**
   * Runs after every change to an app or a token, before the answer, so this
   * instance's authenticator never serves what it remembered from before
   * (other instances hear of it through the database).
   */
  onAuthChanged?: () => void;
}

const MAIL_STATUS: Record<MailLogStatus, MailStatus> = {
  sent: MailStatus.SENT,
  stored: MailStatus.STORED,
  failed: MailStatus.FAILED,
  unconfirmed: MailStatus.UNCONFIRMED,
};

/** A mail log record as the admin API's Mail, each field named (the provider's name is not answered). */
function mailMessage(r: MailLogRecord): MailInit {
  const { id, to, from, subject, providerMessageId } = r;
  return {
    id,
    to,
    from,
    subject,
    providerMessageId,
    text: r.text ?? "",
    status: MAIL_STATUS[r.status],
    at: timestampFromDate(r.at),
  };
}

const MAIL_ID_PATTERN = /^[1-9][0-9]{0,17}$/;
// eslint-disable-next-line no-control-regex -- control characters are what it keeps out
const MAIL_FROM_PATTERN = /^[^\s@<>",;\x00-\x1f\x7f]{1,64}@[A-Za-z0-9.-]{1,253}$/;

function appMessage(app: AppRecord, secrets: string[]): MessageInitShape<typeof AppSchema> {
  return {
    id: app.id,
    name: app.name,
    status: app.status === "running" ? AppStatus.RUNNING : AppStatus.STOPPED,
    mailFrom: app.mailFrom,
    analyticsEnabled: app.analyticsEnabled,
    secretsEnabled: app.secretsEnabled,
    declaredSecrets: secrets,
    limits: { ...app.limits },
    createdAt: timestampFromDate(app.createdAt),
    revision: BigInt(app.revision),
  };
}

const APP_ORDERS: readonly AppOrder[] = ["name", "-name", "created_at", "-created_at"];

/**
 * ListApps' page token, opaque to the caller: the order it was made in and
 * where the page ended (the last app's sort key and id), so the next page
 * starts right after that app, whatever was created or deleted meanwhile.
 */
function appPageToken(order: AppOrder, end: AppPagePosition): string {
  return Buffer.from(JSON.stringify(["apps", order, end.key, end.id])).toString("base64url");
}

function appPagePosition(token: string, order: AppOrder): AppPagePosition {
  const refused = () => invalidArgument("page_token", "must be the next_page_token of the previous page");
  let parts: unknown;
  try {
    parts = JSON.parse(Buffer.from(token, "base64url").toString("utf8"));
  } catch {
    throw refused();
  }
  if (!Array.isArray(parts) || parts.length !== 4 || parts[0] !== "apps") throw refused();
  const [, madeIn, key, id] = parts as unknown[];
  if (typeof key !== "string" || typeof id !== "string" || !isUuid(id) || key.length > 256) throw refused();
  if (madeIn !== order)
    throw invalidArgument("page_token", "was made for another order_by: start again from the first page");
  if ((order === "created_at" || order === "-created_at") && !isExactTimeText(key)) throw refused();
  return { key, id };
}

/** A request's Timestamp as a Date, within years 1 to 9999 (binary protobuf carries any seconds; SQL does not). */
function checkedDate(field: string, ts: Timestamp): Date {
  const ms = timestampToMs(ts);
  if (ms === undefined) throw invalidArgument(field, "must be a time from year 1 to 9999");
  return new Date(ms);
}

/** The `expected_revision` of a request, checked for range. */
function expectedRevision(value: bigint | undefined): number | undefined {
  if (value === undefined) return undefined;
  if (value < 1n || value > BigInt(Number.MAX_SAFE_INTEGER))
    throw invalidArgument("expected_revision", "must be a revision the app had (GetApp's revision)");
  return Number(value);
}

/** The secret names an add or a remove gives, each once: at least one, each a valid name. */
function someSecretNames(names: string[]): string[] {
  const unique = [...new Set(names)];
  unique.forEach((name) => {
    if (!SECRET_NAME_PATTERN.test(name))
      throw invalidArgument(
        "names",
        `${JSON.stringify(name)} is not a secret name: use letters, digits and underscores, not starting with a digit (at most 128)`,
      );
  });
  if (unique.length === 0) throw invalidArgument("names", "must name at least one secret");
  return unique;
}

function requireAppId(appId: string): string {
  if (!appId) throw invalidArgument("app_id", "is required");
  return appId;
}

function validateLimits(limits: AppLimitsMessage | undefined): Partial<AppLimits> {
  const out: Partial<AppLimits> = {};
  if (!limits) return out;
  for (const name of LIMIT_NAMES) {
    const value = limits[name];
    if (value === undefined) continue;
    const problem = limitProblem(name, value);
    if (problem) throw invalidArgument(`limits.${name}`, problem);
    out[name] = value;
  }
  return out;
}

export function createAdminService(options: AdminServiceOptions): ServiceImpl<typeof AdminService> {
  const { apps, quotas, operations, db } = options;
  const { secrets, queues, mail, analytics } = operations;
  const auditor = createAuditor(db, options.logger);
  const auditStore = createAuditStore(db);
  const onAuthChanged = options.onAuthChanged ?? (() => {});
  const getApp = (appId: string) => apps.get(requireAppId(appId));
  /**
   * A change of the blueprint is a change of the app: changes an app's secret names in `tx` (`change`),
   * then, on the same unit of work, moves its revision on, refused (and the change with it) unless the app
   * was at `expected` (GetApp's revision).
   */
  const changeBlueprint = async <T>(
    tx: Tx,
    appId: string,
    expected: bigint | undefined,
    change: () => Promise<T>,
  ): Promise<T> => {
    const revision = expectedRevision(expected);
    const changed = await change();
    await createAppStore(tx.db).update(appId, {}, revision);
    return changed;
  };
  const load = async (appId: string) => {
    const app = await getApp(appId);
    return appMessage(app, (await secrets.declaredNames(app.id)).get(app.id) ?? []);
  };

  const impl: ServiceImpl<typeof AdminService> = {
    async createApp(req, context) {
      return auditor.audited(context, "app.create", undefined, { name: req.name }, async (tx, concerns) => {
        if (!NAME_PATTERN.test(req.name)) throw invalidArgument("name", NAME_RULE);
        // Every call that takes an app takes its id or its name; a name shaped like an id would be read as one.
        if (isUuid(req.name)) throw invalidArgument("name", "must not have the shape of an app id (a UUID)");
        const taken = () => invalidArgument("name", `an app named ${JSON.stringify(req.name)} exists already`);
        const store = createAppStore(tx.db);
        if (await store.nameTaken(req.name)) throw taken();
        const mailFrom = options.mailDomain ? `${req.name}@${options.mailDomain}` : "";
        const created = await store.create(req.name, mailFrom);
        if (!created) throw taken();
        concerns(created);
        return { app: appMessage(created, []) };
      });
    },

    async getApp(req) {
      return { app: await load(req.appId) };
    },

    async listApps(req) {
      const pageSize = req.pageSize ?? 0;
      if (!Number.isInteger(pageSize) || pageSize < 0 || pageSize > 1000)
        throw invalidArgument("page_size", "must be from 1 to 1000 (or 0 for every app)");
      const order = (req.orderBy || "name") as AppOrder;
      if (!APP_ORDERS.includes(order)) throw invalidArgument("order_by", `must be one of ${APP_ORDERS.join(", ")}`);
      const after = req.pageToken === "" ? undefined : appPagePosition(req.pageToken, order);
      const filter = req.filter ?? "";
      if (filter.length > 64) throw invalidArgument("filter", "must be at most 64 characters");
      let status: "running" | "stopped" | undefined;
      if (req.status !== undefined && req.status !== AppStatus.UNSPECIFIED) {
        if (req.status !== AppStatus.RUNNING && req.status !== AppStatus.STOPPED)
          throw invalidArgument("status", "must be APP_STATUS_RUNNING or APP_STATUS_STOPPED");
        status = req.status === AppStatus.RUNNING ? "running" : "stopped";
      }
      const {
        apps: all,
        total,
        next,
      } = await apps.page({
        filter: filter || undefined,
        status,
        order,
        after,
        limit: pageSize === 0 ? undefined : pageSize,
      });
      const nextPageToken = next ? appPageToken(order, next) : "";
      const declared = await secrets.declaredNames();
      const today = await quotas.usedToday();
      const counter = (used: Map<QuotaCounter, number>, name: QuotaCounter, cap: number) => ({
        used: BigInt(used.get(name) ?? 0),
        cap: BigInt(cap),
      });
      return {
        apps: all.map((app) => appMessage(app, declared.get(app.id) ?? [])),
        usageToday: all.flatMap((app) => {
          const used = today.get(app.id);
          if (!used) return [];
          return [
            {
              appId: app.id,
              events: counter(used, "events", app.limits.eventsPerDay),
              mail: counter(used, "mail", app.limits.mailPerDay),
              fastTokens: counter(used, "fast_tokens", app.limits.fastTokensPerDay),
              embedTokens: counter(used, "embed_tokens", app.limits.embedTokensPerDay),
            },
          ];
        }),
        nextPageToken,
        totalSize: total,
      };
    },

    async updateApp(req, context) {
      const app = await getApp(req.appId);
      // What was asked, as given: the entry of a refused attempt (a bad limit, a stale revision) says it too.
      const asked: Record<string, unknown> = {};
      if (req.status !== undefined)
        asked.status =
          req.status === AppStatus.RUNNING ? "running" : req.status === AppStatus.STOPPED ? "stopped" : req.status;
      if (req.mailFrom !== undefined) asked.mailFrom = req.mailFrom;
      if (req.analyticsEnabled !== undefined) asked.analyticsEnabled = req.analyticsEnabled;
      if (req.secretsEnabled !== undefined) asked.secretsEnabled = req.secretsEnabled;
      const askedLimits = Object.fromEntries(
        LIMIT_NAMES.flatMap((name) => (req.limits?.[name] === undefined ? [] : [[name, req.limits[name]]])),
      );
      if (Object.keys(askedLimits).length > 0) asked.limits = askedLimits;
      const only = Object.keys(asked);
      if (only.length === 0 && req.expectedRevision === undefined) return { app: await load(app.id) };
      if (req.expectedRevision !== undefined)
        asked.expectedRevision =
          req.expectedRevision <= BigInt(Number.MAX_SAFE_INTEGER)
            ? Number(req.expectedRevision)
            : String(req.expectedRevision);
      const action =
        only.length === 1 && (asked.status === "stopped" || asked.status === "running")
          ? asked.status === "stopped"
            ? "app.stop"
            : "app.start"
          : only.length === 1 && asked.limits
            ? "app.limits"
            : "app.update";
      await auditor.audited(context, action, app, asked, async (tx) => {
        const changes: AppChanges = {};
        if (req.status !== undefined) {
          if (req.status !== AppStatus.RUNNING && req.status !== AppStatus.STOPPED) {
            throw invalidArgument("status", "must be APP_STATUS_RUNNING or APP_STATUS_STOPPED");
          }
          changes.status = req.status === AppStatus.RUNNING ? "running" : "stopped";
        }
        if (req.mailFrom !== undefined) {
          if (req.mailFrom !== "" && !MAIL_FROM_PATTERN.test(req.mailFrom))
            throw invalidArgument("mail_from", "must be an email address or empty");
          changes.mailFrom = req.mailFrom;
        }
        if (req.analyticsEnabled !== undefined) changes.analyticsEnabled = req.analyticsEnabled;
        if (req.secretsEnabled !== undefined) changes.secretsEnabled = req.secretsEnabled;
        const limits = validateLimits(req.limits);
        if (Object.keys(limits).length > 0) changes.limits = limits;
        const expected = expectedRevision(req.expectedRevision);
        await createAppStore(tx.db).update(app.id, changes, expected);
      });
      onAuthChanged();
      return { app: await load(app.id) };
    },

    async deleteApp(req, context) {
      const app = await getApp(req.appId);
      await auditor.audited(context, "app.delete", app, {}, async (tx) => {
        // The locks the secrets facility needs are taken before the row goes (see its `lockForAppDeletion`).
        await secrets.lockForAppDeletion(tx, app.id);
        await createAppStore(tx.db).delete(app.id);
      });
      onAuthChanged();
      // Not before: a deletion refused after it (a conflict) left the app without its data. Should it fail,
      // the hourly orphan sweep removes that data.
      try {
        await analytics.deleteAppData(app.id);
      } catch (err) {
        options.logger.warn(
          { appId: app.id, err: err instanceof Error ? err.message : String(err) },
          "a deleted app's data outside the database is left to the hourly orphan sweep",
        );
      }
      return {};
    },

    async issueToken(req, context) {
      const app = await getApp(req.appId);
      const label = req.label ?? "";
      return auditor.audited(context, "token.issue", app, { label }, async (tx) => {
        if (label.length > 200) throw invalidArgument("label", "must be at most 200 characters");
        const token = generateServiceToken();
        const tokenId = await createAppStore(tx.db).insertToken(app.id, hashToken(token), label);
        return { tokenId, token };
      });
    },

    async revokeToken(req, context) {
      await auditor.audited(context, "token.revoke", undefined, { tokenId: req.tokenId }, async (tx, concerns) => {
        if (!isUuid(req.tokenId)) throw invalidArgument("token_id", "must be a token id (a UUID)");
        const store = createAppStore(tx.db);
        const appId = await store.deleteToken(req.tokenId);
        if (!appId) throw new PlatformError("not_found", "no such token");
        concerns(await store.get(appId));
      });
      onAuthChanged();
      return {};
    },

    // The names and revisions are checked inside `audited`: a refused attempt is recorded as `failed` too.
    async declareSecrets(req, context) {
      const app = await getApp(req.appId);
      const names = [...new Set(req.names)];
      await auditor.audited(context, "secrets.declare", app, { names }, async (tx) => {
        names.forEach((name, i) => {
          if (!SECRET_NAME_PATTERN.test(name)) throw invalidArgument(`names[${i}]`, SECRET_NAME_RULE);
        });
        await changeBlueprint(tx, app.id, req.expectedRevision, () => secrets.declareSecrets(tx, app.id, names));
      });
      return { app: await load(app.id) };
    },

    async addSecretNames(req, context) {
      const app = await getApp(req.appId);
      await auditor.audited(context, "secrets.add", app, { names: [...new Set(req.names)] }, async (tx) => {
        const names = someSecretNames(req.names);
        await changeBlueprint(tx, app.id, req.expectedRevision, () => secrets.addSecretNames(tx, app.id, names));
      });
      return { app: await load(app.id) };
    },

    async removeSecretNames(req, context) {
      const app = await getApp(req.appId);
      const destroyed = await auditor.audited(
        context,
        "secrets.remove",
        app,
        { names: [...new Set(req.names)], confirmDestroyValues: req.confirmDestroyValues },
        async (tx) => {
          const names = someSecretNames(req.names);
          return changeBlueprint(tx, app.id, req.expectedRevision, () => {
            const expectedVersions = new Map<string, number>();
            for (const [name, version] of Object.entries(req.expectedVersions)) {
              if (!names.includes(name))
                throw invalidArgument("expected_versions", "may only give versions of the names removed");
              if (version < 0)
                throw invalidArgument("expected_versions", "must give 0 (no value) or a version, never less");
              expectedVersions.set(name, version);
            }
            const guard = { confirmDestroyValues: req.confirmDestroyValues, expectedVersions };
            return secrets.removeSecretNames(tx, app.id, names, guard);
          });
        },
      );
      return { app: await load(app.id), destroyedValues: destroyed };
    },

    async setSecret(req, context) {
      const app = await getApp(req.appId);
      // The value is never part of the record, nor its length.
      const result = await auditor.audited(context, "secret.set", app, { name: req.name }, (tx) =>
        secrets.setSecret(tx, app, req.name, req.value),
      );
      return { name: req.name, version: BigInt(result.version), setAt: timestampFromDate(result.setAt) };
    },

    async publishEvent(req, context) {
      const app = await getApp(req.appId);
      return auditor.audited(context, "event.publish", app, { kind: req.kind }, async (tx) => {
        if (!NAME_PATTERN.test(req.kind)) throw invalidArgument("kind", NAME_RULE);
        // A Value with no kind set (an empty message on the wire) means null; one
        // with an unset Value nested inside it is not JSON at all.
        let data: JsonValue = null;
        if (req.data && req.data.kind.case !== undefined) {
          try {
            data = toJson(ValueSchema, req.data);
          } catch {
            throw invalidArgument("data", "must be a JSON value (a google.protobuf.Value with every nested kind set)");
          }
        }
        return queues.publishEvent(tx, app, req.kind, data);
      });
    },

    async getUsage(req) {
      const app = await getApp(req.appId);
      const counter = async (name: QuotaCounter, cap: number) => ({
        used: BigInt(await quotas.used(app.id, name)),
        cap: BigInt(cap),
      });
      return {
        day: utcDay(),
        events: await counter("events", app.limits.eventsPerDay),
        mail: await counter("mail", app.limits.mailPerDay),
        fastTokens: await counter("fast_tokens", app.limits.fastTokensPerDay),
        embedTokens: await counter("embed_tokens", app.limits.embedTokensPerDay),
      };
    },

    async listMail(req) {
      const app = await getApp(req.appId);
      const limit = req.limit ?? 50;
      if (!Number.isInteger(limit) || limit < 1 || limit > 1000)
        throw invalidArgument("limit", "must be from 1 to 1000");
      if (req.pageToken !== "" && !MAIL_ID_PATTERN.test(req.pageToken))
        throw invalidArgument("page_token", "must be the next_page_token of the previous page");
      const query = req.query ?? "";
      if (query.length > 200) throw invalidArgument("query", "must be at most 200 characters");
      let status: MailLogStatus | undefined;
      if (req.status !== undefined && req.status !== MailStatus.UNSPECIFIED) {
        status = (Object.keys(MAIL_STATUS) as MailLogStatus[]).find((k) => MAIL_STATUS[k] === req.status);
        if (!status)
          throw invalidArgument(
            "status",
            "must be MAIL_STATUS_SENT, MAIL_STATUS_STORED, MAIL_STATUS_FAILED or MAIL_STATUS_UNCONFIRMED",
          );
      }
      const found = await mail.searchMail(app.id, {
        query: query || undefined,
        status,
        since: req.since ? checkedDate("since", req.since) : undefined,
        until: req.until ? checkedDate("until", req.until) : undefined,
        beforeId: req.pageToken || undefined,
        limit: limit + 1,
      });
      const page = found.slice(0, limit);
      return { mails: page.map(mailMessage), nextPageToken: found.length > limit ? page.at(-1)!.id : "" };
    },

    async getMail(req) {
      const app = await getApp(req.appId);
      const id = req.mailId || req.id;
      if (!MAIL_ID_PATTERN.test(id))
        throw invalidArgument(req.mailId ? "mail_id" : "id", "must be a mail id from ListMail");
      const found = await mail.getMail(app.id, id);
      if (!found) throw new PlatformError("not_found", `no mail ${id} for this app`);
      return { mail: mailMessage(found), ...rawMessage(found) };
    },

    async listSecretLinks(req) {
      const app = await getApp(req.appId);
      const links = await secrets.listLinks(app.id);
      return {
        links: links.map((l) => ({
          id: l.id,
          name: l.name,
          createdAt: timestampFromDate(l.createdAt),
          expiresAt: timestampFromDate(l.expiresAt),
        })),
      };
    },

    async revokeSecretLink(req, context) {
      const app = await getApp(req.appId);
      await auditor.audited(context, "secret.link.revoke", app, { linkId: req.linkId }, async (tx) => {
        if (!isUuid(req.linkId)) throw invalidArgument("link_id", "must be a link id from ListSecretLinks (a UUID)");
        await secrets.revokeLink(tx, app.id, req.linkId);
      });
      return {};
    },

    async listAuditEntries(req) {
      const pageSize = req.pageSize || 50;
      if (!Number.isInteger(pageSize) || pageSize < 1 || pageSize > 500)
        throw invalidArgument("page_size", "must be from 1 to 500");
      if (req.pageToken !== "" && !(/^[1-9][0-9]{0,18}$/.test(req.pageToken) && isInt64Text(req.pageToken)))
        throw invalidArgument("page_token", "must be the next_page_token of the previous page");
      // By id also once the app is gone (its entries outlive it); a name is looked up.
      const appId = !req.appId ? undefined : isUuid(req.appId) ? req.appId.toLowerCase() : (await getApp(req.appId)).id;
      const entries = await auditStore.list({
        appId,
        operatorId: req.operatorId || undefined,
        action: req.action || undefined,
        since: req.since ? checkedDate("since", req.since) : undefined,
        until: req.until ? checkedDate("until", req.until) : undefined,
        beforeId: req.pageToken || undefined,
        limit: pageSize + 1,
      });
      const page = entries.slice(0, pageSize);
      return {
        entries: page.map((e) => ({
          id: e.id,
          at: timestampFromDate(e.at),
          operatorId: e.operatorId,
          operatorName: e.operatorName,
          action: e.action,
          appId: e.appId,
          appName: e.appName,
          requestId: e.requestId,
          outcome: e.outcome,
          detail: e.detail as JsonObject,
        })),
        nextPageToken: entries.length > pageSize ? page.at(-1)!.id : "",
      };
    },

    async getOverview() {
      return createOverview(options.overview, apps, quotas, operations)();
    },

    ...createAppFacilityRpcs({ apps, quotas, operations, getApp, auditor }),
    ...createOperatorAccountRpcs({ db, auditor, onAuthChanged, startedAt: options.startedAt ?? new Date() }),
  };
  // A refused attempt names the app it was aimed at, when there is one (so the app's own log lists it).
  return withRoles(impl, auditor, (ref) => getApp(ref).catch(() => undefined));
}
