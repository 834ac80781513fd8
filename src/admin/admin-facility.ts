/**
 * AdminService (DESIGN.md section 6): the platform's side of apps, tokens,
 * blueprints, limits and usage. Operations that belong to another facility
 * (setting a secret, publishing an event, reading the mail log) go through
 * that facility's public hooks, handed in by the composition root.
 */
import { toJson, type JsonValue, type MessageInitShape } from "@bufbuild/protobuf";
import { ValueSchema, timestampFromDate } from "@bufbuild/protobuf/wkt";
import {
  AdminService,
  AppStatus,
  AppSchema,
  type AppLimits as AppLimitsMessage,
  type MailSchema,
} from "../../gen/platform/admin/v1/admin_pb.js";
import { APP_COLUMNS, LIMIT_NAMES, NAME_PATTERN, NAME_RULE, SECRET_NAME_PATTERN, SECRET_NAME_RULE, appFromRow, getApp, isUuid, type AppLimits, type AppRecord } from "../apps.ts";
import { generateServiceToken, hashToken } from "../auth.ts";
import { PlatformError, invalidArgument } from "../errors.ts";
import type { Deps, Facility } from "../facility.ts";
import { utcDay, type QuotaCounter } from "../quotas.ts";
import { sql, type Db } from "../database.ts";
import { createOperatorRpcs, usageToday, type OperatorHooks } from "./operator-rpcs.ts";


export type MailInit = MessageInitShape<typeof MailSchema>;

/** What other facilities offer the admin API. A hook left out answers `Unimplemented`. */
export interface AdminHooks extends OperatorHooks {
  /** Replaces the blueprint's list of secret names; dropped names lose their value and links. */
  declareSecrets(appId: string, names: string[]): Promise<void>;
  setSecret?(app: AppRecord, name: string, value: string): Promise<{ version: number; setAt: Date }>;
  publishEvent?(appId: string, kind: string, data: JsonValue): Promise<{ id: string }>;
  listMail?(appId: string, limit: number): Promise<MailInit[]>;
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
};

const MAIL_FROM_PATTERN = /^[^\s@<>",;]{1,64}@[A-Za-z0-9.-]{1,253}$/;

async function declaredSecrets(db: Db, appId: string): Promise<string[]> {
  const rows = await db.selectFrom("secrets").select("name").where("app_id", "=", appId).orderBy("name").execute();
  return rows.map((r) => r.name);
}

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
    if ((name === "leaseSeconds" || name === "messageTtlSeconds" || name === "linkTtlSeconds" || name === "maxPayloadBytes") && value < 1) {
      throw invalidArgument(`limits.${name}`, "must be at least 1");
    }
    out[name] = value;
  }
  return out;
}

/**
 * `onAuthChanged` runs after every change to an app or a token, before the
 * answer, so this instance's authenticator never serves what it remembered
 * from before (other instances hear of it through the database).
 */
export function createAdminFacility(deps: Deps, hooks: AdminHooks, onAuthChanged: () => void = () => {}): Facility<typeof AdminService> {
  const { db, config, quotas } = deps;
  const load = async (appId: string) => {
    const app = await getApp(db, requireAppId(appId));
    return appMessage(app, await declaredSecrets(db, app.id));
  };

  return {
    service: AdminService,
    impl: {
      async createApp(req) {
        if (!NAME_PATTERN.test(req.name)) throw invalidArgument("name", NAME_RULE);
        const existing = await db.selectFrom("apps").select("id").where("name", "=", req.name).executeTakeFirst();
        if (existing) throw invalidArgument("name", `an app named ${JSON.stringify(req.name)} exists already`);
        const row = await db
          .insertInto("apps")
          .values({ name: req.name, status: "running", mail_from: config.mailDomain ? `${req.name}@${config.mailDomain}` : "", limits: "{}" })
          .onConflict((oc) => oc.column("name").doNothing())
          .returning(APP_COLUMNS.map((c) => c.replace("apps.", "")) as never)
          .executeTakeFirst();
        if (!row) throw invalidArgument("name", `an app named ${JSON.stringify(req.name)} exists already`);
        return { app: appMessage(appFromRow(row as never), []) };
      },

      async getApp(req) {
        return { app: await load(req.appId) };
      },

      async listApps() {
        const rows = await db.selectFrom("apps").select(APP_COLUMNS).orderBy("apps.name").execute();
        const secrets = await db.selectFrom("secrets").select(["app_id", "name"]).orderBy("name").execute();
        const today = await usageToday(deps);
        const counter = (used: Map<string, number>, name: QuotaCounter, cap: number) => ({ used: BigInt(used.get(name) ?? 0), cap: BigInt(cap) });
        return {
          usageToday: rows.flatMap((row) => {
            const used = today.get(row.id);
            if (!used) return [];
            const { limits } = appFromRow(row);
            return [
              {
                appId: row.id,
                events: counter(used, "events", limits.eventsPerDay),
                mail: counter(used, "mail", limits.mailPerDay),
                fastTokens: counter(used, "fast_tokens", limits.fastTokensPerDay),
                embedTokens: counter(used, "embed_tokens", limits.embedTokensPerDay),
              },
            ];
          }),
          apps: rows.map((row) =>
            appMessage(
              appFromRow(row),
              secrets.filter((s) => s.app_id === row.id).map((s) => s.name),
            ),
          ),
        };
      },

      async updateApp(req) {
        const app = await getApp(db, requireAppId(req.appId));
        const changes: Record<string, unknown> = {};
        if (req.status !== undefined) {
          if (req.status !== AppStatus.RUNNING && req.status !== AppStatus.STOPPED) {
            throw invalidArgument("status", "must be APP_STATUS_RUNNING or APP_STATUS_STOPPED");
          }
          changes.status = req.status === AppStatus.RUNNING ? "running" : "stopped";
        }
        if (req.mailFrom !== undefined) {
          if (req.mailFrom !== "" && !MAIL_FROM_PATTERN.test(req.mailFrom)) throw invalidArgument("mail_from", "must be an email address or empty");
          changes.mail_from = req.mailFrom;
        }
        if (req.analyticsEnabled !== undefined) changes.analytics_enabled = req.analyticsEnabled;
        if (req.secretsEnabled !== undefined) changes.secrets_enabled = req.secretsEnabled;
        const limits = validateLimits(req.limits);
        if (Object.keys(limits).length > 0) {
          // Merge in the database, so two concurrent updates of different limits both stay.
          changes.limits = sql`apps.limits || ${JSON.stringify(limits)}::jsonb`;
        }
        if (Object.keys(changes).length > 0) {
          await db.updateTable("apps").set(changes as never).where("id", "=", app.id).execute();
          onAuthChanged();
        }
        return { app: await load(app.id) };
      },

      async deleteApp(req) {
        const app = await getApp(db, requireAppId(req.appId));
        await db.deleteFrom("apps").where("id", "=", app.id).execute();
        onAuthChanged();
        return {};
      },

      async issueToken(req) {
        const app = await getApp(db, requireAppId(req.appId));
        const label = req.label ?? "";
        if (label.length > 200) throw invalidArgument("label", "must be at most 200 characters");
        const token = generateServiceToken();
        const row = await db
          .insertInto("app_tokens")
          .values({ app_id: app.id, token_hash: hashToken(token), label })
          .returning("id")
          .executeTakeFirstOrThrow();
        return { tokenId: row.id, token };
      },

      async revokeToken(req) {
        if (!isUuid(req.tokenId)) throw invalidArgument("token_id", "must be a token id (a UUID)");
        const result = await db.deleteFrom("app_tokens").where("id", "=", req.tokenId).executeTakeFirst();
        onAuthChanged();
        if (Number(result.numDeletedRows) === 0) throw new PlatformError("not_found", "no such token");
        return {};
      },

      async declareSecrets(req) {
        const app = await getApp(db, requireAppId(req.appId));
        const names = [...new Set(req.names)];
        names.forEach((name, i) => {
          if (!SECRET_NAME_PATTERN.test(name)) throw invalidArgument(`names[${i}]`, SECRET_NAME_RULE);
        });
        await hooks.declareSecrets(app.id, names);
        return { app: await load(app.id) };
      },

      async setSecret(req) {
        if (!hooks.setSecret) unimplemented("SetSecret");
        const app = await getApp(db, requireAppId(req.appId));
        const result = await hooks.setSecret(app, req.name, req.value);
        return { name: req.name, version: BigInt(result.version), setAt: timestampFromDate(result.setAt) };
      },

      async publishEvent(req) {
        if (!hooks.publishEvent) unimplemented("PublishEvent");
        const app = await getApp(db, requireAppId(req.appId));
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
        const app = await getApp(db, requireAppId(req.appId));
        const counter = async (name: QuotaCounter, cap: number) => ({ used: BigInt(await quotas.used(app.id, name)), cap: BigInt(cap) });
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
        const app = await getApp(db, requireAppId(req.appId));
        const limit = req.limit ?? 50;
        if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw invalidArgument("limit", "must be from 1 to 1000");
        return { mails: await hooks.listMail(app.id, limit) };
      },

      ...createOperatorRpcs(deps, hooks),
    },
  };
}
