/**
 * `npm run cli -- <command>`: the admin API from a shell. Every command but
 * `migrate` and `secrets rotate-key` is an AdminService call to the running
 * server (the same code path as any other admin client; with the embedded
 * database only the server may open DATA_DIR). The server's address comes
 * from PLATFORM_ADMIN_URL, else PUBLIC_URL, else HOST:PORT; the admin token
 * from ADMIN_TOKEN, else DATA_DIR/admin-token.
 */
import fs from "node:fs";
import path from "node:path";
import { parseArgs } from "node:util";
import readline from "node:readline/promises";
import { Code, createClient, ConnectError } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { fromJson, type JsonValue } from "@bufbuild/protobuf";
import { ValueSchema, timestampFromDate } from "@bufbuild/protobuf/wkt";
import {
  AdminService,
  AppStatus,
  AppSchema,
  type App,
  ListAppsResponseSchema,
  ListDeadLettersResponseSchema,
  GetUsageResponseSchema,
  ListMailResponseSchema,
  PublishEventResponseSchema,
  SetSecretResponseSchema,
  GetUsageHistoryResponseSchema,
  ListTokensResponseSchema,
  ListEventTypesResponseSchema,
  QueryAnalyticsResponseSchema,
  ListQueuesResponseSchema as AdminListQueuesResponseSchema,
  PeekMessagesResponseSchema,
  ListSecretsResponseSchema as AdminListSecretsResponseSchema,
  CreateSecretLinkResponseSchema as AdminCreateSecretLinkResponseSchema,
  GetMailResponseSchema,
  ListAuditEntriesResponseSchema,
  ListOperatorsResponseSchema,
  ListOperatorTokensResponseSchema,
  OperatorRole,
  UpdateOperatorResponseSchema,
  WhoAmIResponseSchema,
  type AppLimits,
} from "../gen/platform/admin/v1/admin_pb.js";
import { Interval } from "../gen/platform/analytics/v1/analytics_pb.js";
import { ErrorDetailSchema } from "../gen/platform/meta/v1/error_pb.js";
import { ConfigError, loadConfig } from "./core/config.ts";
import { openDatabase, migrate } from "./core/database/index.ts";
import { LIMIT_NAMES } from "./core/apps/apps.ts";
import { toPlatformError } from "./core/errors.ts";
import { rotateSecretsKeyFromConfig } from "./secrets/rotate-key.ts";
import { readableJson } from "./cli-format.ts";
import { adoptAdminToken } from "./core/shared-keys/index.ts";

const USAGE = `usage: npm run cli -- <command>

  apps create NAME                 create an app
  apps list                        list apps
  apps get NAME                    show one app
  apps stop NAME | apps start NAME stop or start an app
  apps delete NAME [--yes]         delete an app and everything it owns (asks first unless --yes)
  apps set NAME [--mail-from ADDR] [--analytics on|off] [--secrets on|off] [--limit NAME=VALUE ...]
  tokens issue NAME [--label TEXT] issue a service token (printed once)
  tokens revoke TOKEN_ID           revoke a token
  secrets declare NAME SECRET ...  declare more secret names (names already declared keep their value)
  secrets undeclare NAME SECRET ... [--yes]
                                   remove secret names; with a value set, only with --yes (destroys it)
  secrets set NAME SECRET          set a secret's value, read from standard input
  secrets rotate-key               re-encrypt every secret under SECRETS_KEY (direct database access)
  events publish NAME KIND [JSON]  put a platform event on the app's _events queue
  usage NAME                       today's use and caps
  usage history NAME [--days N]    use per UTC day, oldest first (default 30 days)
  tokens list NAME                 the app's tokens: label, created, last used
  analytics types NAME             the app's event types
  analytics query NAME TYPE --since TIME [--until TIME] [--interval hour|day|week|month] [--group-by PROP] [--timezone TZ]
                                   the app's QueryEvents (TIME: ISO 8601 or epoch ms)
  queues list NAME                 the app's queues: depth, in flight, oldest waiting
  queues peek NAME QUEUE [--limit N]  waiting messages, without leasing them
  queues purge NAME QUEUE          delete every message of the queue
  dead-letters list NAME QUEUE [--limit N] [--page TOKEN]
                                   the queue's dead letters, in the order they died (a page; --page continues)
  dead-letters replay NAME QUEUE (--all | ID ...)  put dead letters back in line, deliveries reset
  dead-letters purge NAME QUEUE (--all | ID ...)   delete dead letters
  secrets list NAME                declared secrets: set or not, version (never a value)
  secrets link NAME SECRET         a one-time link that sets the secret
  mail list NAME [--limit N]       the app's recent mail
  mail get NAME ID                 one mail of the app's log
  whoami                           the operator of the admin token used
  operators list                   named operators: role, last use
  operators create NAME [--role admin|viewer]   add an operator (role viewer unless given); prints its token once
  operators update ID [--role admin|viewer] [--disable | --enable]
  operators delete ID              delete an operator and its tokens
  operators tokens list ID         an operator's tokens: label, created, last used
  operators tokens issue ID [--label TEXT]   one more token (printed once)
  operators tokens revoke TOKEN_ID revoke an operator token
  audit list [--app NAME] [--operator ID] [--action ACTION] [--since TIME] [--until TIME] [--limit N] [--page TOKEN]
                                   the audit log, newest first (a page; --page continues)
  migrate                          run database migrations (direct database access)
  admin-token adopt                make ADMIN_TOKEN the admin token every instance must use (direct database access)

Options for every command: --url URL (the server; else PLATFORM_ADMIN_URL, else PUBLIC_URL, else HOST:PORT)
Limits: ${LIMIT_NAMES.join(", ")}`;

class UsageError extends Error {}

/** The server the last command talked to, for the message when it did not answer. */
let serverUrl = "";

/** A time given on the command line: epoch milliseconds or an ISO 8601 date-time. */
function cliTime(text: string, flag: string): Date {
  const date = /^\d+$/.test(text) ? new Date(Number(text)) : new Date(text);
  if (Number.isNaN(date.getTime()))
    throw new UsageError(`${flag}: must be epoch milliseconds or an ISO 8601 date-time`);
  return date;
}

function print(value: unknown): void {
  process.stdout.write((typeof value === "string" ? value : JSON.stringify(value, null, 2)) + "\n");
}

function onOff(value: string | undefined, flag: string): boolean | undefined {
  if (value === undefined) return undefined;
  if (value === "on" || value === "true") return true;
  if (value === "off" || value === "false") return false;
  throw new UsageError(`${flag}: must be on or off`);
}

function operatorRole(text: string): OperatorRole {
  if (text === "admin") return OperatorRole.ADMIN;
  if (text === "viewer") return OperatorRole.VIEWER;
  throw new UsageError("--role: must be admin or viewer");
}

/** Asks on the terminal; false without one (a script must say --yes). */
async function confirm(question: string, expected: string): Promise<boolean> {
  if (!process.stdin.isTTY) return false;
  const rl = readline.createInterface({ input: process.stdin, output: process.stderr });
  try {
    return (await rl.question(question)).trim() === expected;
  } finally {
    rl.close();
  }
}

/**
 * Whether a Connect error is the transport's (no answer from the server at all) rather than
 * the server's: the server's errors always carry our ErrorDetail.
 */
function unreachable(err: ConnectError): string | undefined {
  if (err.code !== Code.Unavailable && err.code !== Code.Unknown && err.code !== Code.Internal) return undefined;
  if (err.findDetails(ErrorDetailSchema).length > 0) return undefined;
  let cause: unknown = err.cause;
  for (let i = 0; i < 5 && cause instanceof Error; i++) {
    const code = (cause as NodeJS.ErrnoException).code;
    if (code && /^(ECONNREFUSED|ECONNRESET|ENOTFOUND|EAI_AGAIN|EHOSTUNREACH|ENETUNREACH|ETIMEDOUT|EPIPE)$/.test(code))
      return code;
    cause = cause.cause;
  }
  return undefined;
}

/** What to tell an operator whose CLI found no server at `url`. */
export function unreachableMessage(url: string, why: string): string {
  return (
    `error: no server answers at ${url} (${why}).\n` +
    `  Start it with \`npm start\` (it listens on HOST:PORT, default 127.0.0.1:8080),\n` +
    `  or point the CLI at a running one: PLATFORM_ADMIN_URL=https://host:port npm run cli -- ... (or --url URL).\n`
  );
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks)
    .toString("utf8")
    .replace(/\r?\n$/, "");
}

export async function runCli(argv: string[], env: Record<string, string | undefined> = process.env): Promise<void> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      "mail-from": { type: "string" },
      analytics: { type: "string" },
      secrets: { type: "string" },
      limit: { type: "string", multiple: true },
      label: { type: "string" },
      url: { type: "string" },
      days: { type: "string" },
      since: { type: "string" },
      until: { type: "string" },
      interval: { type: "string" },
      "group-by": { type: "string" },
      timezone: { type: "string" },
      page: { type: "string" },
      all: { type: "boolean" },
      yes: { type: "boolean" },
      role: { type: "string" },
      disable: { type: "boolean" },
      enable: { type: "boolean" },
      app: { type: "string" },
      operator: { type: "string" },
      action: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  });
  const [group, command, ...rest] = positionals;
  if (values.help || !group) {
    print(USAGE);
    return;
  }
  const config = loadConfig(env);

  if (group === "migrate") {
    const database = await openDatabase({ databaseUrl: config.databaseUrl, dataDir: config.dataDir });
    try {
      await migrate(database.db);
      print("migrations applied");
    } finally {
      await database.close();
    }
    return;
  }
  if (group === "admin-token" && command === "adopt") {
    if (!config.adminToken) throw new UsageError("admin-token adopt: set ADMIN_TOKEN to the new admin token");
    const database = await openDatabase({ databaseUrl: config.databaseUrl, dataDir: config.dataDir, poolSize: 2 });
    try {
      await migrate(database.db);
      await adoptAdminToken(database.db, config.adminToken);
    } finally {
      await database.close();
    }
    print("adopted: every instance on this database must now start with this ADMIN_TOKEN");
    return;
  }
  if (group === "secrets" && command === "rotate-key") {
    const { reencrypted } = await rotateSecretsKeyFromConfig(config);
    print(`re-encrypted ${reencrypted} secret value(s) under the current SECRETS_KEY`);
    return;
  }

  const baseUrl = values.url ?? env.PLATFORM_ADMIN_URL ?? config.publicUrl;
  serverUrl = baseUrl;
  const tokenFile = path.join(config.dataDir, "admin-token");
  const adminToken =
    config.adminToken ?? (fs.existsSync(tokenFile) ? fs.readFileSync(tokenFile, "utf8").trim() : undefined);
  if (!adminToken)
    throw new UsageError(`no admin token: set ADMIN_TOKEN or start the server once to create ${tokenFile}`);
  const admin = createClient(
    AdminService,
    createConnectTransport({
      baseUrl,
      httpVersion: "1.1",
      interceptors: [(next) => (req) => (req.header.set("authorization", `Bearer ${adminToken}`), next(req))],
    }),
  );
  const need = (value: string | undefined, what: string): string => {
    if (!value) throw new UsageError(`missing ${what}`);
    return value;
  };
  const showApp = (res: { app?: App }) => print(res.app ? readableJson(AppSchema, res.app) : {});

  if (group === "usage" && command === "history" && rest[0]) {
    const days = values.days === undefined ? undefined : Number(values.days);
    return print(readableJson(GetUsageHistoryResponseSchema, await admin.getUsageHistory({ appId: rest[0], days })));
  }
  if (group === "usage") {
    return print(readableJson(GetUsageResponseSchema, await admin.getUsage({ appId: need(command, "NAME") })));
  }
  switch (`${group} ${command ?? ""}`.trim()) {
    case "apps create":
      return showApp(await admin.createApp({ name: need(rest[0], "NAME") }));
    case "apps list":
      return print(readableJson(ListAppsResponseSchema, await admin.listApps({})));
    case "apps get":
      return showApp(await admin.getApp({ appId: need(rest[0], "NAME") }));
    case "apps stop":
      return showApp(await admin.updateApp({ appId: need(rest[0], "NAME"), status: AppStatus.STOPPED }));
    case "apps start":
      return showApp(await admin.updateApp({ appId: need(rest[0], "NAME"), status: AppStatus.RUNNING }));
    case "apps delete": {
      const name = need(rest[0], "NAME");
      if (!values.yes && !(await confirm(`delete ${name} and everything it owns? type its name to confirm: `, name)))
        throw new UsageError(`apps delete ${name}: not confirmed (type the app's name, or pass --yes)`);
      await admin.deleteApp({ appId: name });
      return print(`deleted ${name}`);
    }
    case "apps set": {
      const limits: Partial<Record<keyof AppLimits, number>> = {};
      for (const item of values.limit ?? []) {
        const [name, value] = item.split("=");
        if (!(LIMIT_NAMES as string[]).includes(name ?? "") || !/^\d+$/.test(value ?? "")) {
          throw new UsageError(`--limit ${item}: must be NAME=INTEGER with NAME one of ${LIMIT_NAMES.join(", ")}`);
        }
        limits[name as keyof AppLimits] = Number(value);
      }
      return showApp(
        await admin.updateApp({
          appId: need(rest[0], "NAME"),
          mailFrom: values["mail-from"],
          analyticsEnabled: onOff(values.analytics, "--analytics"),
          secretsEnabled: onOff(values.secrets, "--secrets"),
          limits: limits as never,
        }),
      );
    }
    case "tokens issue": {
      const res = await admin.issueToken({ appId: need(rest[0], "NAME"), label: values.label });
      process.stderr.write(`token id ${res.tokenId}; the token is shown once, now:\n`);
      return print(res.token);
    }
    case "tokens revoke":
      await admin.revokeToken({ tokenId: need(rest[0], "TOKEN_ID") });
      return print("revoked");
    case "secrets declare": {
      const appId = need(rest[0], "NAME");
      need(rest[1], "SECRET");
      return showApp(await admin.addSecretNames({ appId, names: rest.slice(1) }));
    }
    case "secrets undeclare": {
      const appId = need(rest[0], "NAME");
      need(rest[1], "SECRET");
      const res = await admin.removeSecretNames({
        appId,
        names: rest.slice(1),
        confirmDestroyValues: values.yes ?? false,
      });
      if (res.destroyedValues.length > 0)
        process.stderr.write(`destroyed the value(s) of ${res.destroyedValues.join(", ")}\n`);
      return showApp(res);
    }
    case "whoami":
      return print(readableJson(WhoAmIResponseSchema, await admin.whoAmI({})));
    case "operators list":
      return print(readableJson(ListOperatorsResponseSchema, await admin.listOperators({})));
    case "operators create": {
      const res = await admin.createOperator({
        name: need(rest[0], "NAME"),
        role: operatorRole(values.role ?? "viewer"),
      });
      process.stderr.write(`operator ${res.operator?.id} (token id ${res.tokenId}); the token is shown once, now:\n`);
      return print(res.token);
    }
    case "operators update": {
      if (values.disable && values.enable) throw new UsageError("operators update: --disable or --enable, not both");
      const res = await admin.updateOperator({
        operatorId: need(rest[0], "ID"),
        role: values.role === undefined ? undefined : operatorRole(values.role),
        disabled: values.disable ? true : values.enable ? false : undefined,
      });
      return print(readableJson(UpdateOperatorResponseSchema, res));
    }
    case "operators delete":
      await admin.deleteOperator({ operatorId: need(rest[0], "ID") });
      return print(`deleted operator ${rest[0]}`);
    case "operators tokens": {
      const [sub, arg] = rest;
      if (sub === "list")
        return print(
          readableJson(
            ListOperatorTokensResponseSchema,
            await admin.listOperatorTokens({ operatorId: need(arg, "ID") }),
          ),
        );
      if (sub === "issue") {
        const res = await admin.issueOperatorToken({ operatorId: need(arg, "ID"), label: values.label });
        process.stderr.write(`token id ${res.tokenId}; the token is shown once, now:\n`);
        return print(res.token);
      }
      if (sub === "revoke") {
        await admin.revokeOperatorToken({ tokenId: need(arg, "TOKEN_ID") });
        return print("revoked");
      }
      throw new UsageError(`unknown command: ${positionals.join(" ")}\n\n${USAGE}`);
    }
    case "audit list": {
      const res = await admin.listAuditEntries({
        appId: values.app,
        operatorId: values.operator,
        action: values.action,
        since: values.since === undefined ? undefined : timestampFromDate(cliTime(values.since, "--since")),
        until: values.until === undefined ? undefined : timestampFromDate(cliTime(values.until, "--until")),
        pageSize: values.limit?.[0] ? Number(values.limit[0]) : 0,
        pageToken: values.page ?? "",
      });
      return print(readableJson(ListAuditEntriesResponseSchema, res));
    }
    case "secrets set": {
      const value = await readStdin();
      const res = await admin.setSecret({ appId: need(rest[0], "NAME"), name: need(rest[1], "SECRET"), value });
      return print(readableJson(SetSecretResponseSchema, res));
    }
    case "events publish": {
      let data: JsonValue = null;
      if (rest[2] !== undefined) {
        try {
          data = JSON.parse(rest[2]) as JsonValue;
        } catch {
          throw new UsageError("JSON: not valid JSON");
        }
      }
      return print(
        readableJson(
          PublishEventResponseSchema,
          await admin.publishEvent({
            appId: need(rest[0], "NAME"),
            kind: need(rest[1], "KIND"),
            data: fromJson(ValueSchema, data),
          }),
        ),
      );
    }
    case "mail list": {
      const limit = values.limit?.[0] ? Number(values.limit[0]) : undefined;
      return print(readableJson(ListMailResponseSchema, await admin.listMail({ appId: need(rest[0], "NAME"), limit })));
    }
    case "tokens list":
      return print(readableJson(ListTokensResponseSchema, await admin.listTokens({ appId: need(rest[0], "NAME") })));
    case "analytics types":
      return print(
        readableJson(ListEventTypesResponseSchema, await admin.listEventTypes({ appId: need(rest[0], "NAME") })),
      );
    case "analytics query": {
      const interval = values.interval ?? "day";
      const intervals: Record<string, Interval> = {
        hour: Interval.HOUR,
        day: Interval.DAY,
        week: Interval.WEEK,
        month: Interval.MONTH,
      };
      if (!(interval in intervals)) throw new UsageError("--interval: must be hour, day, week or month");
      const res = await admin.queryAnalytics({
        appId: need(rest[0], "NAME"),
        type: need(rest[1], "TYPE"),
        since: timestampFromDate(cliTime(need(values.since, "--since"), "--since")),
        until: values.until === undefined ? undefined : timestampFromDate(cliTime(values.until, "--until")),
        interval: intervals[interval],
        groupBy: values["group-by"],
        timezone: values.timezone,
      });
      return print(readableJson(QueryAnalyticsResponseSchema, res));
    }
    case "queues list":
      return print(
        readableJson(AdminListQueuesResponseSchema, await admin.listQueues({ appId: need(rest[0], "NAME") })),
      );
    case "queues peek": {
      const limit = values.limit?.[0] ? Number(values.limit[0]) : undefined;
      const res = await admin.peekMessages({ appId: need(rest[0], "NAME"), queue: need(rest[1], "QUEUE"), limit });
      return print(readableJson(PeekMessagesResponseSchema, res));
    }
    case "queues purge": {
      const res = await admin.purgeQueue({ appId: need(rest[0], "NAME"), queue: need(rest[1], "QUEUE") });
      return print(`purged ${res.purged} message(s)`);
    }
    case "dead-letters list": {
      const pageSize = values.limit?.[0] ? Number(values.limit[0]) : undefined;
      const res = await admin.listDeadLetters({
        appId: need(rest[0], "NAME"),
        queue: need(rest[1], "QUEUE"),
        pageSize,
        pageToken: values.page ?? "",
      });
      return print(readableJson(ListDeadLettersResponseSchema, res));
    }
    case "dead-letters replay":
    case "dead-letters purge": {
      const ids = rest.slice(2);
      const all = values.all ?? false;
      const named = ids.length > 0;
      if (all === named)
        throw new UsageError(`dead-letters ${command}: give --all or one or more dead letter ids, not both`);
      const req = { appId: need(rest[0], "NAME"), queue: need(rest[1], "QUEUE"), all, ids };
      if (command === "replay")
        return print(`replayed ${(await admin.replayDeadLetters(req)).replayed} dead letter(s)`);
      return print(`purged ${(await admin.purgeDeadLetters(req)).purged} dead letter(s)`);
    }
    case "secrets list":
      return print(
        readableJson(AdminListSecretsResponseSchema, await admin.listSecrets({ appId: need(rest[0], "NAME") })),
      );
    case "secrets link":
      return print(
        readableJson(
          AdminCreateSecretLinkResponseSchema,
          await admin.createSecretLink({ appId: need(rest[0], "NAME"), name: need(rest[1], "SECRET") }),
        ),
      );
    case "mail get":
      return print(
        readableJson(
          GetMailResponseSchema,
          await admin.getMail({ appId: need(rest[0], "NAME"), id: need(rest[1], "ID") }),
        ),
      );
    default:
      throw new UsageError(`unknown command: ${positionals.join(" ")}\n\n${USAGE}`);
  }
}

const isMain = import.meta.url === `file://${process.argv[1]}` || process.argv[1]?.endsWith("/src/cli.ts");
if (isMain) {
  runCli(process.argv.slice(2)).catch((err: unknown) => {
    if (
      err instanceof UsageError ||
      err instanceof ConfigError ||
      String((err as NodeJS.ErrnoException).code).startsWith("ERR_PARSE_ARGS_")
    ) {
      process.stderr.write(`${(err as Error).message}\n`);
      process.exit(2);
    }
    if (err instanceof ConnectError) {
      const why = unreachable(err);
      if (why) {
        process.stderr.write(unreachableMessage(serverUrl, why));
        process.exit(1);
      }
      const e = toPlatformError(err);
      const more = (e.details ?? []).filter((d) => d !== e.message);
      process.stderr.write(`error: ${e.code}: ${e.message}${more.length ? `\n  ${more.join("\n  ")}` : ""}\n`);
      process.exit(1);
    }
    const code = (err as NodeJS.ErrnoException).code;
    process.stderr.write(
      code === "ECONNREFUSED"
        ? unreachableMessage(serverUrl, code)
        : `error: ${err instanceof Error ? err.message : String(err)}\n`,
    );
    process.exit(1);
  });
}
