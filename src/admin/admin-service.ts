/**
 * AdminService (DESIGN.md section 6): the platform's side of apps, tokens,
 * blueprints, limits and usage. Operations that belong to another facility
 * (setting a secret, publishing an event, reading the mail log) go through
 * that facility's public hooks, handed in by the composition root.
 */
import { toJson, type JsonValue, type MessageInitShape } from "@bufbuild/protobuf";
import { ValueSchema, timestampFromDate } from "@bufbuild/protobuf/wkt";
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
  NAME_PATTERN,
  NAME_RULE,
  SECRET_NAME_PATTERN,
  SECRET_NAME_RULE,
  isUuid,
  type AppLimits,
  type AppRecord,
} from "../core/apps/apps.ts";
import type { AppChanges, AppStore } from "../core/apps/app-store.ts";
import { generateServiceToken, hashToken } from "../core/auth.ts";
import { PlatformError, invalidArgument } from "../core/errors.ts";
import { utcDay, type QuotaCounter, type Quotas } from "../core/quotas/index.ts";
import type { MailLogRecord, MailLogStatus } from "../mail/index.ts";
import { createOperatorRpcs, type OperatorHooks } from "./operator-rpcs.ts";

type MailInit = MessageInitShape<typeof MailSchema>;

/**
 * What other facilities offer the admin API, through their public
 * interfaces (never their tables). A hook left out answers `Unimplemented`.
 */
export interface AdminHooks extends OperatorHooks {
  /** Replaces the blueprint's list of secret names; dropped names lose their value and links. */
  declareSecrets(appId: string, names: string[]): Promise<void>;
  /** The declared secret names of one app, or of every app, by app id, in name order. */
  declaredNames(appId?: string): Promise<Map<string, string[]>>;
  setSecret?(app: AppRecord, name: string, value: string): Promise<{ version: number; setAt: Date }>;
  publishEvent?(appId: string, kind: string, data: JsonValue): Promise<{ id: string }>;
  listMail?(appId: string, limit: number): Promise<MailLogRecord[]>;
  /**
   * Removes what the app keeps outside the platform database (its analytics events on MongoDB),
   * before the app's rows go: if that store cannot be reached, the deletion fails whole and can be retried.
   */
  deleteAppData?(appId: string): Promise<void>;
  getMail?(appId: string, id: string): Promise<MailLogRecord | undefined>;
}

export interface AdminServiceOptions {
  apps: AppStore;
  quotas: Quotas;
  hooks: AdminHooks;
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
};

function mailMessage(r: MailLogRecord): MailInit {
  return {
    id: r.id,
    to: r.to,
    from: r.from,
    subject: r.subject,
    text: r.text ?? "",
    status: MAIL_STATUS[r.status],
    at: timestampFromDate(r.at),
    providerMessageId: r.providerMessageId,
  };
}

const LIMIT_MAXIMUMS: Record<keyof AppLimits, number> = {
  eventsPerDay: 1_000_000_000,
  mailPerDay: 10_000_000,
  fastTokensPerDay: 2_000_000_000,
  embedTokensPerDay: 2_000_000_000,
  maxQueueDepth: 10_000_000,
  maxPayloadBytes: 16 * 1024 * 1024,
  messageTtlSeconds: 365 * 24 * 3600,
  leaseSeconds: 43_200,
  maxOutstandingLinks: 10_000,
  linkTtlSeconds: 30 * 24 * 3600,
  retentionDays: 3650,
  maxDeliveries: 1000,
};

const MAIL_FROM_PATTERN = /^[^\s@<>",;]{1,64}@[A-Za-z0-9.-]{1,253}$/;

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
  };
}

function requireAppId(appId: string): string {
  if (!appId) throw invalidArgument("app_id", "is required");
  return appId;
}

function unimplemented(what: string): never {
  throw new PlatformError("not_configured", `${what} is not available in this deployment`);
}

function validateLimits(limits: AppLimitsMessage | undefined): Partial<AppLimits> {
  const out: Partial<AppLimits> = {};
  if (!limits) return out;
  for (const name of LIMIT_NAMES) {
    const value = limits[name];
    if (value === undefined) continue;
    if (!Number.isInteger(value) || value < 0 || value > LIMIT_MAXIMUMS[name]) {
      throw invalidArgument(`limits.${name}`, `must be an integer from 0 to ${LIMIT_MAXIMUMS[name]}`);
    }
    if (
      (name === "leaseSeconds" ||
        name === "messageTtlSeconds" ||
        name === "linkTtlSeconds" ||
        name === "maxPayloadBytes" ||
        name === "retentionDays") &&
      value < 1
    ) {
      throw invalidArgument(`limits.${name}`, "must be at least 1");
    }
    out[name] = value;
  }
  return out;
}

export function createAdminService(options: AdminServiceOptions): ServiceImpl<typeof AdminService> {
  const { apps, quotas, hooks } = options;
  const onAuthChanged = options.onAuthChanged ?? (() => {});
  const getApp = (appId: string) => apps.get(requireAppId(appId));
  const load = async (appId: string) => {
    const app = await getApp(appId);
    return appMessage(app, (await hooks.declaredNames(app.id)).get(app.id) ?? []);
  };

  return {
    async createApp(req) {
      if (!NAME_PATTERN.test(req.name)) throw invalidArgument("name", NAME_RULE);
      if (await apps.nameTaken(req.name))
        throw invalidArgument("name", `an app named ${JSON.stringify(req.name)} exists already`);
      const app = await apps.create(req.name, options.mailDomain ? `${req.name}@${options.mailDomain}` : "");
      if (!app) throw invalidArgument("name", `an app named ${JSON.stringify(req.name)} exists already`);
      return { app: appMessage(app, []) };
    },

    async getApp(req) {
      return { app: await load(req.appId) };
    },

    async listApps() {
      const all = await apps.list();
      const secrets = await hooks.declaredNames();
      const today = await quotas.usedToday();
      const counter = (used: Map<QuotaCounter, number>, name: QuotaCounter, cap: number) => ({
        used: BigInt(used.get(name) ?? 0),
        cap: BigInt(cap),
      });
      return {
        apps: all.map((app) => appMessage(app, secrets.get(app.id) ?? [])),
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
      };
    },

    async updateApp(req) {
      const app = await getApp(req.appId);
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
      if (Object.keys(changes).length > 0) {
        await apps.update(app.id, changes);
        onAuthChanged();
      }
      return { app: await load(app.id) };
    },

    async deleteApp(req) {
      const app = await getApp(req.appId);
      await hooks.deleteAppData?.(app.id);
      await apps.delete(app.id);
      onAuthChanged();
      return {};
    },

    async issueToken(req) {
      const app = await getApp(req.appId);
      const label = req.label ?? "";
      if (label.length > 200) throw invalidArgument("label", "must be at most 200 characters");
      const token = generateServiceToken();
      const tokenId = await apps.insertToken(app.id, hashToken(token), label);
      return { tokenId, token };
    },

    async revokeToken(req) {
      if (!isUuid(req.tokenId)) throw invalidArgument("token_id", "must be a token id (a UUID)");
      const deleted = await apps.deleteToken(req.tokenId);
      onAuthChanged();
      if (!deleted) throw new PlatformError("not_found", "no such token");
      return {};
    },

    async declareSecrets(req) {
      const app = await getApp(req.appId);
      const names = [...new Set(req.names)];
      names.forEach((name, i) => {
        if (!SECRET_NAME_PATTERN.test(name)) throw invalidArgument(`names[${i}]`, SECRET_NAME_RULE);
      });
      await hooks.declareSecrets(app.id, names);
      return { app: await load(app.id) };
    },

    async setSecret(req) {
      if (!hooks.setSecret) unimplemented("SetSecret");
      const app = await getApp(req.appId);
      const result = await hooks.setSecret(app, req.name, req.value);
      return { name: req.name, version: BigInt(result.version), setAt: timestampFromDate(result.setAt) };
    },

    async publishEvent(req) {
      if (!hooks.publishEvent) unimplemented("PublishEvent");
      const app = await getApp(req.appId);
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
      return hooks.publishEvent(app.id, req.kind, data);
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
      if (!hooks.listMail) unimplemented("ListMail");
      const app = await getApp(req.appId);
      const limit = req.limit ?? 50;
      if (!Number.isInteger(limit) || limit < 1 || limit > 1000)
        throw invalidArgument("limit", "must be from 1 to 1000");
      return { mails: (await hooks.listMail(app.id, limit)).map(mailMessage) };
    },

    async getMail(req) {
      if (!hooks.getMail) unimplemented("GetMail");
      const app = await getApp(req.appId);
      if (!/^[1-9][0-9]{0,17}$/.test(req.id)) throw invalidArgument("id", "must be a mail id from ListMail");
      const mail = await hooks.getMail(app.id, req.id);
      if (!mail) throw new PlatformError("not_found", `no mail ${req.id} for this app`);
      return { mail: mailMessage(mail) };
    },

    ...createOperatorRpcs({ apps, quotas, hooks, getApp }),
  };
}
