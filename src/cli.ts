/**
 * `npm run cli -- <command>`: the admin API from a shell. Every command but
 * `migrate`, `secrets rotate-key`, `admin-token adopt`, `backup` and `restore` is an AdminService
 * call to the running server (the same code path as any other admin client;
 * with the embedded database only the server may open DATA_DIR). The server's
 * address comes from `--url`, else PLATFORM_ADMIN_URL, else PUBLIC_URL, else
 * HOST:PORT; the operator's token from ADMIN_TOKEN, else DATA_DIR/admin-token.
 *
 * The commands are a table (`COMMANDS`): each has its own options, so an
 * option means one thing per command and an unknown one is a usage error
 * (exit 2), and the usage text is made from the table. A command that only
 * asks one AdminService method and shows its answer is a row naming the method
 * (`shows`) and the request fields its arguments fill; a destructive one says
 * what to confirm (`confirms`), and the table's runner asks. Output is JSON as a
 * person reads it (`src/cli-format.ts`); `--json` prints the canonical proto3
 * JSON for scripts.
 */
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import readline from "node:readline/promises";
import { parseArgs, type ParseArgsOptionDescriptor } from "node:util";
import { closest as closestMatch, distance } from "fastest-levenshtein";
import { Code, createClient, ConnectError, type Client } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { fromJson, toJson, type DescMessage, type JsonValue, type MessageShape } from "@bufbuild/protobuf";
import { ValueSchema, timestampFromDate } from "@bufbuild/protobuf/wkt";
import {
  AdminService,
  AppStatus,
  AppSchema,
  type App,
  ListAppsResponseSchema,
  ListMailResponseSchema,
  PublishEventResponseSchema,
  SetSecretResponseSchema,
  QueryAnalyticsResponseSchema,
  QueryAnalyticsFunnelResponseSchema,
  GetQueuePolicyResponseSchema,
  SetQueuePolicyResponseSchema,
  PutTestMessageResponseSchema,
  ListAuditEntriesResponseSchema,
  MailStatus,
  OperatorRole,
  RemoveSecretNamesResponseSchema,
  UpdateOperatorResponseSchema,
  type AppLimits,
} from "../gen/platform/admin/v1/admin_pb.js";
import { Aggregate, Interval } from "../gen/platform/analytics/v1/analytics_pb.js";
import { ErrorDetailSchema } from "../gen/platform/meta/v1/error_pb.js";
import { ConfigError, loadConfig, type Config } from "./core/config.ts";
import { adminTokenFile } from "./core/data-dir.ts";
import { openDatabase, migrate, type Db } from "./core/database/index.ts";
import { LIMIT_NAMES, LIMIT_RANGES, limitProblem } from "./core/apps/apps.ts";
import { toPlatformError } from "./core/errors.ts";
import { rotateSecretsKeyFromConfig } from "./secrets/rotate-key.ts";
import { checkSecretsKey } from "./secrets/check-key.ts";
import { backupDataDir, restoreDataDir } from "./backup-restore.ts";
import { humanTable, readableJson } from "./cli-format.ts";
import { adoptAdminToken } from "./core/shared-keys/index.ts";
import { createAuditStore } from "./admin/audit-store.ts";
import { INTERVAL_OF } from "./analytics/enum-names.ts";
import { AGGREGATE_OF } from "./analytics/query-extensions.ts";
import { parseWhere } from "./analytics/where-conditions.ts";
import { OWNER } from "./core/auth.ts";

class UsageError extends Error {}

type Env = Record<string, string | undefined>;
type Values = Record<string, string | boolean | string[] | undefined>;

interface Context {
  /** The positional arguments after the command's name. */
  args: string[];
  values: Values;
  config: Config;
  /** The AdminService client (built on first use: direct-database commands never need a server). */
  admin(): Client<typeof AdminService>;
  /** Prints a message: readable JSON, or canonical proto3 JSON with --json. */
  show<D extends DescMessage>(schema: D, message: MessageShape<D>): void;
}

interface CommandBase {
  /** The words that name it, e.g. "operators tokens issue". */
  name: string;
  /** Its arguments and options, as the usage shows them. */
  synopsis: string;
  summary: string;
  options?: Record<string, ParseArgsOptionDescriptor>;
  /**
   * A destructive command's question, asked before it runs unless `--yes` (an option it then takes):
   * the operator must type `expected` (`typeWhat`); `refused` names the command in the refusal
   * (else its name). The arguments it reads are checked here, so `run` may take them as given.
   */
  confirms?(ctx: Context): { question: string; expected: string; typeWhat: string; refused?: string };
}

/** A command that asks `shows` with its positional arguments as the request's `fields` (showAnswer). */
interface Asking extends CommandBase {
  shows: AdminMethod;
  fields: string[];
  /** Options `--OPTION N` (whole numbers), by the request field each one fills. */
  counts?: Record<string, string>;
  /** A page: `--limit N` fills this request field (the page's size), `--page TOKEN` its pageToken. */
  paged?: string;
}

type Command = (CommandBase & { run(ctx: Context): Promise<void> }) | Asking;

function print(value: unknown): void {
  process.stdout.write((typeof value === "string" ? value : JSON.stringify(value, null, 2)) + "\n");
}

/** A time given on the command line: epoch milliseconds or an ISO 8601 date-time. */
function cliTime(text: string, flag: string): Date {
  const date = /^\d+$/.test(text) ? new Date(Number(text)) : new Date(text);
  if (Number.isNaN(date.getTime()))
    throw new UsageError(`${flag}: must be epoch milliseconds or an ISO 8601 date-time`);
  return date;
}

function onOff(value: string | undefined, flag: string): boolean | undefined {
  if (value === undefined) return undefined;
  if (value === "on" || value === "true") return true;
  if (value === "off" || value === "false") return false;
  throw new UsageError(`${flag}: must be on or off`);
}

function count(value: string | undefined, flag: string): number | undefined {
  if (value === undefined) return undefined;
  if (!/^\d{1,9}$/.test(value)) throw new UsageError(`${flag}: must be a whole number`);
  return Number(value);
}

function operatorRole(text: string): OperatorRole {
  if (text === "admin") return OperatorRole.ADMIN;
  if (text === "viewer") return OperatorRole.VIEWER;
  throw new UsageError("--role: must be admin or viewer");
}

const need = (value: string | undefined, what: string): string => {
  if (!value) throw new UsageError(`missing ${what}`);
  return value;
};

/** A JSON argument (an event's data, a message's payload), or a usage error. */
function jsonArgument(text: string): JsonValue {
  try {
    return JSON.parse(text) as JsonValue;
  } catch {
    throw new UsageError("JSON: not valid JSON");
  }
}
const str = (values: Values, name: string) => values[name] as string | undefined;

/** Filter operators by their names on the command line. */
/** One `--where PROP:OP:JSON` (`w`) as a Condition; `shown` is how an error names it. */
function whereCondition(w: string, shown: string) {
  const parsed = parseWhere(w);
  if (parsed.problem !== undefined) throw new UsageError(`--where ${shown}: ${parsed.problem}`);
  return parsed.condition;
}

/**
 * The query extensions of `analytics query` (docs/analytics.md): `--group-by a,b`, `--aggregate`, `--of`,
 * `--where PROP:OP:JSON` (repeatable; the value is JSON: `plan:eq:"pro"`, `amount:gte:10`, `plan:in:["a","b"]`,
 * `paid:exists`), `--limit`. Kinds are the service's to check.
 */
function analyticsExtensions(values: Values) {
  const groupBy = str(values, "group-by");
  const list = groupBy?.includes(",") ?? false;
  const aggregate = str(values, "aggregate");
  const aggregates: Record<string, Aggregate> = AGGREGATE_OF;
  if (aggregate !== undefined && !Object.hasOwn(aggregates, aggregate))
    throw new UsageError(`--aggregate: must be ${Object.keys(aggregates).join(", ")}`);
  const where = ((values.where as string[] | undefined) ?? []).map((w) => whereCondition(w, w));
  const limit = str(values, "limit");
  if (limit !== undefined && !/^[0-9]{1,3}$/.test(limit)) throw new UsageError("--limit: must be 1 to 500");
  return {
    groupBy: list ? undefined : groupBy,
    groupByProperties: list ? groupBy!.split(",") : [],
    aggregate: aggregate === undefined ? Aggregate.UNSPECIFIED : aggregates[aggregate],
    of: str(values, "of"),
    where,
    limit: limit === undefined ? undefined : Number(limit),
  };
}

const flag = (values: Values, name: string) => (values[name] as boolean | undefined) ?? false;

/** Standard input as text, less one final line break; refused unless UTF-8 (a Latin-1 file would be changed). */
async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(Buffer.concat(chunks));
  } catch {
    throw new UsageError("standard input: is not UTF-8 text; convert it first (iconv -t UTF-8)");
  }
  return text.replace(/\r?\n$/, "");
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
 * Goes on when `--yes` was given or the operator typed `expected` at the
 * prompt; else a usage error saying what to type. A destructive command never
 * runs unasked: a script without a terminal must pass `--yes`.
 */
async function confirmOrRefuse(ctx: Context, command: string, question: string, expected: string, typeWhat: string) {
  if (flag(ctx.values, "yes") || (await confirm(`${question}? type ${typeWhat} to confirm: `, expected))) return;
  throw new UsageError(`${command}: not confirmed (type ${typeWhat}, or pass --yes)`);
}

const showApp = (ctx: Context, res: { app?: App }) => (res.app ? ctx.show(AppSchema, res.app) : print({}));

type AdminMethod = (typeof AdminService.method)[keyof typeof AdminService.method];
type AdminCall = (request: Record<string, string | number | undefined>) => Promise<MessageShape<DescMessage>>;

/**
 * Runs a command that asks one AdminService method and shows its answer (with the method's own
 * response schema): the positional arguments, in the synopsis' order, are the request's `fields`. One
 * whose synopsis word is in brackets (`[QUEUE]`) may be left out (""); any other is required.
 */
async function showAnswer(ctx: Context, { synopsis, shows, fields, counts = {}, paged }: Asking): Promise<void> {
  const words = synopsis.split(" ");
  const request: Record<string, string | number | undefined> = Object.fromEntries(
    fields.map((field, i) => [field, words[i].startsWith("[") ? (ctx.args[i] ?? "") : need(ctx.args[i], words[i])]),
  );
  for (const [option, field] of Object.entries(paged ? { ...counts, limit: paged } : counts))
    request[field] = count(str(ctx.values, option), `--${option}`);
  if (paged) request.pageToken = str(ctx.values, "page") ?? "";
  const call = ctx.admin()[shows.localName as keyof Client<typeof AdminService>] as unknown as AdminCall;
  ctx.show<DescMessage>(shows.output, await call(request));
}

/** The `NAME=NUMBER` values of a repeatable option; a usage error for one that `valid` refuses. */
function namedNumbers(
  items: unknown,
  valid: (name: string, value: string) => boolean,
  refusal: (item: string) => string,
): Record<string, number> {
  const out: Record<string, number> = {};
  for (const item of (items as string[] | undefined) ?? []) {
    const [name = "", value = ""] = item.split("=");
    if (!valid(name, value)) throw new UsageError(refusal(item));
    out[name] = Number(value);
  }
  return out;
}

const isLimitName = (name: string): name is (typeof LIMIT_NAMES)[number] => (LIMIT_NAMES as string[]).includes(name);
const STRING = { type: "string" } as const;
const BOOLEAN = { type: "boolean" } as const;

/**
 * The audit entry of a command that changes the database directly (no
 * AdminService call to record it): made by whoever holds the database's
 * credentials, so it is the owner's, marked as from the CLI. Never a key or a
 * token in `detail`.
 */
async function auditDirect(db: Db, action: string, detail: Record<string, unknown>): Promise<void> {
  await createAuditStore(db).record({
    operatorId: OWNER.id,
    operatorName: `${OWNER.name} (CLI, database access)`,
    action,
    requestId: `cli-${crypto.randomUUID()}`,
    outcome: "ok",
    detail,
  });
}

export const COMMANDS: readonly Command[] = [
  {
    name: "apps create",
    synopsis: "NAME",
    summary: "create an app",
    run: async (ctx) => showApp(ctx, await ctx.admin().createApp({ name: need(ctx.args[0], "NAME") })),
  },
  {
    name: "apps list",
    synopsis:
      "[--filter TEXT] [--status running|stopped] [--order-by name|-name|created_at|-created_at] [--page-size N] [--page TOKEN]",
    summary: "list apps (every app unless --page-size)",
    options: { filter: STRING, status: STRING, "order-by": STRING, "page-size": STRING, page: STRING },
    async run(ctx) {
      const status = str(ctx.values, "status");
      if (status !== undefined && status !== "running" && status !== "stopped")
        throw new UsageError("--status: must be running or stopped");
      const res = await ctx.admin().listApps({
        filter: str(ctx.values, "filter"),
        status: status === undefined ? undefined : status === "running" ? AppStatus.RUNNING : AppStatus.STOPPED,
        orderBy: str(ctx.values, "order-by"),
        pageSize: count(str(ctx.values, "page-size"), "--page-size"),
        pageToken: str(ctx.values, "page") ?? "",
      });
      ctx.show(ListAppsResponseSchema, res);
    },
  },
  {
    name: "apps get",
    synopsis: "NAME",
    summary: "show one app",
    run: async (ctx) => showApp(ctx, await ctx.admin().getApp({ appId: need(ctx.args[0], "NAME") })),
  },
  {
    name: "apps stop",
    synopsis: "NAME",
    summary: "stop an app (its service tokens are refused)",
    run: async (ctx) =>
      showApp(ctx, await ctx.admin().updateApp({ appId: need(ctx.args[0], "NAME"), status: AppStatus.STOPPED })),
  },
  {
    name: "apps start",
    synopsis: "NAME",
    summary: "start a stopped app",
    run: async (ctx) =>
      showApp(ctx, await ctx.admin().updateApp({ appId: need(ctx.args[0], "NAME"), status: AppStatus.RUNNING })),
  },
  {
    name: "apps delete",
    synopsis: "NAME [--yes]",
    summary: "delete an app and everything it owns (asks first unless --yes)",
    confirms(ctx) {
      const name = need(ctx.args[0], "NAME");
      const question = `delete ${name} and everything it owns`;
      return { question, expected: name, typeWhat: "the app's name", refused: `apps delete ${name}` };
    },
    async run(ctx) {
      await ctx.admin().deleteApp({ appId: ctx.args[0] });
      print(`deleted ${ctx.args[0]}`);
    },
  },
  {
    name: "apps set",
    synopsis: "NAME [--mail-from ADDR] [--analytics on|off] [--secrets on|off] [--limit NAME=VALUE ...]",
    summary: "change an app's settings and limits (only those given)",
    options: { "mail-from": STRING, analytics: STRING, secrets: STRING, limit: { type: "string", multiple: true } },
    async run(ctx) {
      const limits: Partial<Record<keyof AppLimits, number>> = namedNumbers(
        ctx.values.limit,
        // The server's own ranges (LIMIT_RANGES), checked here so the refusal names the flag.
        (name, value) =>
          isLimitName(name) && /^\d{1,12}$/.test(value) && limitProblem(name, Number(value)) === undefined,
        (item) => {
          const [name = "", value = ""] = item.split("=");
          if (!isLimitName(name) || !/^\d+$/.test(value))
            return `--limit ${item}: must be NAME=INTEGER with NAME one of ${LIMIT_NAMES.join(", ")}${suggestion(name, LIMIT_NAMES)}`;
          const { min, max } = LIMIT_RANGES[name];
          return `--limit ${item}: ${name} must be an integer from ${min} to ${max}`;
        },
      );
      showApp(
        ctx,
        await ctx.admin().updateApp({
          appId: need(ctx.args[0], "NAME"),
          mailFrom: str(ctx.values, "mail-from"),
          analyticsEnabled: onOff(str(ctx.values, "analytics"), "--analytics"),
          secretsEnabled: onOff(str(ctx.values, "secrets"), "--secrets"),
          limits: limits as never,
        }),
      );
    },
  },
  {
    name: "tokens issue",
    synopsis: "NAME [--label TEXT]",
    summary: "issue a service token (printed once)",
    options: { label: STRING },
    async run(ctx) {
      const res = await ctx.admin().issueToken({ appId: need(ctx.args[0], "NAME"), label: str(ctx.values, "label") });
      process.stderr.write(`token id ${res.tokenId}; the token is shown once, now:\n`);
      print(res.token);
    },
  },
  {
    name: "tokens revoke",
    synopsis: "TOKEN_ID",
    summary: "revoke a service token",
    async run(ctx) {
      await ctx.admin().revokeToken({ tokenId: need(ctx.args[0], "TOKEN_ID") });
      print("revoked");
    },
  },
  {
    name: "tokens list",
    synopsis: "NAME",
    summary: "the app's tokens: label, created, last used",
    shows: AdminService.method.listTokens,
    fields: ["appId"],
  },
  {
    name: "secrets declare",
    synopsis: "NAME SECRET ...",
    summary: "declare more secret names (names already declared keep their value)",
    async run(ctx) {
      const appId = need(ctx.args[0], "NAME");
      need(ctx.args[1], "SECRET");
      showApp(ctx, await ctx.admin().addSecretNames({ appId, names: ctx.args.slice(1) }));
    },
  },
  {
    name: "secrets undeclare",
    synopsis: "NAME SECRET ... [--yes] [--expect-version SECRET=VERSION ...]",
    summary:
      "remove secret names; one with a value only with --yes (which destroys it); --expect-version refuses if that secret's version (0: no value) changed since you looked",
    options: { yes: BOOLEAN, "expect-version": { type: "string", multiple: true } },
    async run(ctx) {
      const appId = need(ctx.args[0], "NAME");
      need(ctx.args[1], "SECRET");
      const names = ctx.args.slice(1);
      const expectedVersions = namedNumbers(
        ctx.values["expect-version"],
        (name, version) => names.includes(name) && /^\d{1,9}$/.test(version),
        (item) => `--expect-version ${item}: must be SECRET=VERSION, a secret named in this command`,
      );
      const res = await ctx.admin().removeSecretNames({
        appId,
        names,
        confirmDestroyValues: flag(ctx.values, "yes"),
        expectedVersions,
      });
      if (res.destroyedValues.length > 0)
        process.stderr.write(`destroyed the value(s) of ${res.destroyedValues.join(", ")}\n`);
      ctx.show(RemoveSecretNamesResponseSchema, res);
    },
  },
  {
    name: "secrets set",
    synopsis: "NAME SECRET < value",
    summary: "set a secret's value, read from standard input",
    async run(ctx) {
      const appId = need(ctx.args[0], "NAME");
      const name = need(ctx.args[1], "SECRET");
      const value = await readStdin();
      ctx.show(SetSecretResponseSchema, await ctx.admin().setSecret({ appId, name, value }));
    },
  },
  {
    name: "secrets list",
    synopsis: "NAME",
    summary: "declared secrets: set or not, version (never a value)",
    shows: AdminService.method.listSecrets,
    fields: ["appId"],
  },
  {
    name: "secrets link",
    synopsis: "NAME SECRET",
    summary: "a one-time link that sets the secret",
    shows: AdminService.method.createSecretLink,
    fields: ["appId", "name"],
  },
  {
    name: "secrets links",
    synopsis: "NAME",
    summary: "the app's outstanding links (never their URL)",
    shows: AdminService.method.listSecretLinks,
    fields: ["appId"],
  },
  {
    name: "secrets unlink",
    synopsis: "NAME LINK_ID",
    summary: "revoke an outstanding link",
    async run(ctx) {
      await ctx.admin().revokeSecretLink({ appId: need(ctx.args[0], "NAME"), linkId: need(ctx.args[1], "LINK_ID") });
      print("revoked");
    },
  },
  {
    name: "secrets rotate-key",
    synopsis: "",
    summary: "re-encrypt every secret under SECRETS_KEY (direct database access)",
    async run(ctx) {
      const { reencrypted } = await rotateSecretsKeyFromConfig(ctx.config, (db, report) =>
        auditDirect(db, "secrets.rotate_key", {
          keyId: report.keyId,
          reencrypted: report.reencrypted,
          alreadyCurrent: report.alreadyCurrent,
        }),
      );
      print(`re-encrypted ${reencrypted} secret value(s) under the current SECRETS_KEY`);
    },
  },
  {
    name: "secrets check-key",
    synopsis: "",
    summary:
      "whether SECRETS_KEY (or SECRETS_KEY_FILE) opens the database's secrets; exit 0 if so, 1 if not (direct database access, changes nothing)",
    async run(ctx) {
      const check = await checkSecretsKey(ctx.config);
      print(flag(ctx.values, "json") ? check : check.summary);
      if (!check.opens) process.exitCode = 1;
    },
  },
  {
    name: "events publish",
    synopsis: "NAME KIND [JSON]",
    summary: "put a platform event on the app's _events queue",
    async run(ctx) {
      const data = ctx.args[2] === undefined ? null : jsonArgument(ctx.args[2]);
      const res = await ctx.admin().publishEvent({
        appId: need(ctx.args[0], "NAME"),
        kind: need(ctx.args[1], "KIND"),
        data: fromJson(ValueSchema, data),
      });
      ctx.show(PublishEventResponseSchema, res);
    },
  },
  {
    name: "usage history",
    synopsis: "NAME [--days N]",
    summary: "use per UTC day, oldest first (default 30 days)",
    shows: AdminService.method.getUsageHistory,
    fields: ["appId"],
    counts: { days: "days" },
  },
  {
    name: "usage",
    synopsis: "NAME",
    summary: "today's use and caps",
    shows: AdminService.method.getUsage,
    fields: ["appId"],
  },
  {
    name: "analytics types",
    synopsis: "NAME",
    summary: "the app's event types",
    shows: AdminService.method.listEventTypes,
    fields: ["appId"],
  },
  {
    name: "analytics query",
    synopsis:
      "NAME TYPE --since TIME [--until TIME] [--interval hour|day|week|month] [--group-by PROP[,PROP]] [--timezone TZ] [--aggregate count|unique|sum|avg|min|max] [--of PROP] [--where PROP:OP:JSON ...] [--limit N]",
    summary: 'the app\'s QueryEvents (TIME: ISO 8601 or epoch ms; --where plan:eq:"pro", amount:gte:10)',
    options: {
      since: STRING,
      until: STRING,
      interval: STRING,
      "group-by": STRING,
      timezone: STRING,
      aggregate: STRING,
      of: STRING,
      where: { type: "string", multiple: true },
      limit: STRING,
    },
    async run(ctx) {
      const interval = str(ctx.values, "interval") ?? "day";
      const intervals: Record<string, Interval> = INTERVAL_OF;
      if (!(interval in intervals)) throw new UsageError("--interval: must be hour, day, week or month");
      const until = str(ctx.values, "until");
      const res = await ctx.admin().queryAnalytics({
        appId: need(ctx.args[0], "NAME"),
        type: need(ctx.args[1], "TYPE"),
        since: timestampFromDate(cliTime(need(str(ctx.values, "since"), "--since"), "--since")),
        until: until === undefined ? undefined : timestampFromDate(cliTime(until, "--until")),
        interval: intervals[interval],
        ...analyticsExtensions(ctx.values),
        timezone: str(ctx.values, "timezone"),
      });
      ctx.show(QueryAnalyticsResponseSchema, res);
    },
  },
  {
    name: "analytics funnel",
    synopsis:
      "NAME TYPE TYPE... --since TIME [--until TIME] [--window SECONDS] [--breakdown PROP] [--limit N] [--where STEP:PROP:OP:JSON ...]",
    summary: 'the app\'s QueryFunnel: 2 to 8 steps in order (--where 1:plan:eq:"pro" filters step 1)',
    options: {
      since: STRING,
      until: STRING,
      window: STRING,
      breakdown: STRING,
      where: { type: "string", multiple: true },
      limit: STRING,
    },
    async run(ctx) {
      const types = ctx.args.slice(1);
      if (types.length === 0) throw new UsageError("TYPE: give the steps' event types, in order");
      const steps = types.map((type) => ({ type, where: [] as ReturnType<typeof whereCondition>[] }));
      for (const w of (ctx.values.where as string[] | undefined) ?? []) {
        const m = /^([0-9]+):(.*)$/s.exec(w);
        const step = m ? steps[Number(m[1]) - 1] : undefined;
        if (!m || !step) throw new UsageError(`--where ${w}: must be STEP:PROP:OP:JSON (STEP 1 to ${steps.length})`);
        step.where.push(whereCondition(m[2], w));
      }
      const window = str(ctx.values, "window");
      if (window !== undefined && !/^[0-9]{1,8}$/.test(window)) throw new UsageError("--window: must be seconds");
      const limit = str(ctx.values, "limit");
      if (limit !== undefined && !/^[0-9]{1,3}$/.test(limit)) throw new UsageError("--limit: must be 1 to 500");
      const until = str(ctx.values, "until");
      const res = await ctx.admin().queryAnalyticsFunnel({
        appId: need(ctx.args[0], "NAME"),
        steps,
        since: timestampFromDate(cliTime(need(str(ctx.values, "since"), "--since"), "--since")),
        until: until === undefined ? undefined : timestampFromDate(cliTime(until, "--until")),
        windowSeconds: window === undefined ? undefined : BigInt(window),
        breakdown: str(ctx.values, "breakdown"),
        limit: limit === undefined ? undefined : Number(limit),
      });
      ctx.show(QueryAnalyticsFunnelResponseSchema, res);
    },
  },
  {
    name: "overview",
    synopsis: "",
    summary: "the platform at a glance: apps, requests and errors per facility, queues, mail, tokens, dependencies",
    shows: AdminService.method.getOverview,
    fields: [],
  },
  {
    name: "queues list",
    synopsis: "NAME",
    summary: "the app's queues: depth, in flight, oldest waiting",
    shows: AdminService.method.listQueues,
    fields: ["appId"],
  },
  {
    name: "queues peek",
    synopsis: "NAME QUEUE [--limit N] [--page TOKEN]",
    summary: "waiting messages, without leasing them (a page; --page continues)",
    shows: AdminService.method.peekMessages,
    fields: ["appId", "queue"],
    paged: "limit",
  },
  {
    name: "queues message",
    synopsis: "NAME QUEUE ID",
    summary:
      "where one message is: waiting, delayed, leased or dead, with its deliveries (as the app's GET .../messages/ID)",
    shows: AdminService.method.getQueueMessage,
    fields: ["appId", "queue", "id"],
  },
  {
    name: "queues activity",
    synopsis: "NAME QUEUE",
    summary: "puts and acks per UTC hour, the last 24 hours",
    shows: AdminService.method.getQueueActivity,
    fields: ["appId", "queue"],
  },
  {
    name: "queues policy",
    synopsis:
      "NAME QUEUE [--max-deliveries N] [--dead-letter-queue Q|_drop|''] [--retry-delay-seconds N] [--retry-backoff X] [--max-retry-delay-seconds N] [--lease-seconds N] [--dedup-window-seconds N] [--max-deliveries-per-second X]",
    summary: "the queue's policy as it applies; with options, change those fields (as the app's PUT .../policy)",
    options: {
      "max-deliveries": STRING,
      "dead-letter-queue": STRING,
      "retry-delay-seconds": STRING,
      "retry-backoff": STRING,
      "max-retry-delay-seconds": STRING,
      "lease-seconds": STRING,
      "dedup-window-seconds": STRING,
      "max-deliveries-per-second": STRING,
    },
    async run(ctx) {
      const [appId, queue] = [need(ctx.args[0], "NAME"), need(ctx.args[1], "QUEUE")];
      const backoff = str(ctx.values, "retry-backoff");
      if (backoff !== undefined && !/^\d+(\.\d+)?$/.test(backoff))
        throw new UsageError("--retry-backoff: must be a number such as 2 or 1.5");
      const rate = str(ctx.values, "max-deliveries-per-second");
      if (rate !== undefined && !/^\d+(\.\d+)?$/.test(rate))
        throw new UsageError("--max-deliveries-per-second: must be a number such as 20 or 0.5 (0: no limit)");
      const change = {
        maxDeliveries: count(str(ctx.values, "max-deliveries"), "--max-deliveries"),
        deadLetterQueue: str(ctx.values, "dead-letter-queue"),
        retryDelaySeconds: count(str(ctx.values, "retry-delay-seconds"), "--retry-delay-seconds"),
        retryBackoff: backoff === undefined ? undefined : Number(backoff),
        maxRetryDelaySeconds: count(str(ctx.values, "max-retry-delay-seconds"), "--max-retry-delay-seconds"),
        leaseSeconds: count(str(ctx.values, "lease-seconds"), "--lease-seconds"),
        dedupWindowSeconds: count(str(ctx.values, "dedup-window-seconds"), "--dedup-window-seconds"),
        maxDeliveriesPerSecond: rate === undefined ? undefined : Number(rate),
      };
      if (Object.values(change).every((v) => v === undefined))
        ctx.show(GetQueuePolicyResponseSchema, await ctx.admin().getQueuePolicy({ appId, queue }));
      else ctx.show(SetQueuePolicyResponseSchema, await ctx.admin().setQueuePolicy({ appId, queue, ...change }));
    },
  },
  {
    name: "queues schedules",
    synopsis: "NAME [QUEUE]",
    summary: "the app's queue schedules (of one queue, when given), each with its next run",
    shows: AdminService.method.listQueueSchedules,
    fields: ["appId", "queue"],
  },
  {
    name: "queues put",
    synopsis: "NAME QUEUE JSON [--group-key KEY]",
    summary: "put a test message on the queue, as the app would (in an ordered group with --group-key)",
    options: { "group-key": STRING },
    async run(ctx) {
      const payload = jsonArgument(need(ctx.args[2], "JSON"));
      const groupKey = str(ctx.values, "group-key");
      const res = await ctx.admin().putTestMessage({
        appId: need(ctx.args[0], "NAME"),
        queue: need(ctx.args[1], "QUEUE"),
        payload: fromJson(ValueSchema, payload),
        ...(groupKey !== undefined && { groupKey }),
      });
      ctx.show(PutTestMessageResponseSchema, res);
    },
  },
  {
    name: "queues purge",
    synopsis: "NAME QUEUE [--yes]",
    summary: "delete every message of the queue (asks first unless --yes)",
    confirms(ctx) {
      const [name, queue] = [need(ctx.args[0], "NAME"), need(ctx.args[1], "QUEUE")];
      return { question: `delete every message of ${queue} of ${name}`, expected: queue, typeWhat: "the queue's name" };
    },
    async run(ctx) {
      const res = await ctx.admin().purgeQueue({ appId: ctx.args[0], queue: ctx.args[1] });
      print(`purged ${res.purged} message(s)`);
    },
  },
  {
    name: "dead-letters list",
    synopsis: "NAME QUEUE [--limit N] [--page TOKEN]",
    summary: "the queue's dead letters, in the order they died (a page; --page continues)",
    shows: AdminService.method.listDeadLetters,
    fields: ["appId", "queue"],
    paged: "pageSize",
  },
  ...(["replay", "purge"] as const).map((verb): Command => ({
    name: `dead-letters ${verb}`,
    synopsis: verb === "replay" ? "NAME QUEUE (--all | ID ...)" : "NAME QUEUE (--all | ID ...) [--yes]",
    summary:
      verb === "replay"
        ? "put dead letters back in line, deliveries reset"
        : "delete dead letters (asks first unless --yes)",
    options: verb === "replay" ? { all: BOOLEAN } : { all: BOOLEAN, yes: BOOLEAN },
    async run(ctx) {
      const ids = ctx.args.slice(2);
      const all = flag(ctx.values, "all");
      if (all === ids.length > 0)
        throw new UsageError(`dead-letters ${verb}: give --all or one or more dead letter ids, not both`);
      const req = { appId: need(ctx.args[0], "NAME"), queue: need(ctx.args[1], "QUEUE"), all, ids };
      if (verb === "purge") {
        const which = all ? "every dead letter" : `${ids.length} dead letter(s)`;
        await confirmOrRefuse(
          ctx,
          "dead-letters purge",
          `delete ${which} of ${req.queue}`,
          req.queue,
          "the queue's name",
        );
      }
      if (verb === "replay") print(`replayed ${(await ctx.admin().replayDeadLetters(req)).replayed} dead letter(s)`);
      else print(`purged ${(await ctx.admin().purgeDeadLetters(req)).purged} dead letter(s)`);
    },
  })),
  {
    name: "mail list",
    synopsis:
      "NAME [--limit N] [--query TEXT] [--status sent|stored|failed|unconfirmed] [--since TIME] [--until TIME] [--page TOKEN]",
    summary: "the app's mail, newest first (a page; --page continues)",
    options: { limit: STRING, query: STRING, status: STRING, since: STRING, until: STRING, page: STRING },
    async run(ctx) {
      const statuses: Record<string, MailStatus> = {
        sent: MailStatus.SENT,
        stored: MailStatus.STORED,
        failed: MailStatus.FAILED,
        unconfirmed: MailStatus.UNCONFIRMED,
      };
      const status = str(ctx.values, "status");
      if (status !== undefined && !(status in statuses))
        throw new UsageError("--status: must be sent, stored, failed or unconfirmed");
      const since = str(ctx.values, "since");
      const until = str(ctx.values, "until");
      const res = await ctx.admin().listMail({
        appId: need(ctx.args[0], "NAME"),
        limit: count(str(ctx.values, "limit"), "--limit"),
        query: str(ctx.values, "query"),
        status: status === undefined ? undefined : statuses[status],
        since: since === undefined ? undefined : timestampFromDate(cliTime(since, "--since")),
        until: until === undefined ? undefined : timestampFromDate(cliTime(until, "--until")),
        pageToken: str(ctx.values, "page") ?? "",
      });
      ctx.show(ListMailResponseSchema, res);
    },
  },
  {
    name: "mail get",
    synopsis: "NAME ID",
    summary: "one mail of the app's log, with its raw message and headers",
    shows: AdminService.method.getMail,
    fields: ["appId", "mailId"],
  },
  {
    name: "whoami",
    synopsis: "",
    summary: "the operator of the token used",
    shows: AdminService.method.whoAmI,
    fields: [],
  },
  {
    name: "operators list",
    synopsis: "",
    summary: "named operators: role, last use",
    shows: AdminService.method.listOperators,
    fields: [],
  },
  {
    name: "operators create",
    synopsis: "NAME [--role admin|viewer]",
    summary: "add an operator (a viewer unless --role admin); prints its token once",
    options: { role: STRING },
    async run(ctx) {
      const res = await ctx.admin().createOperator({
        name: need(ctx.args[0], "NAME"),
        role: operatorRole(str(ctx.values, "role") ?? "viewer"),
      });
      process.stderr.write(`operator ${res.operator?.id} (token id ${res.tokenId}); the token is shown once, now:\n`);
      print(res.token);
    },
  },
  {
    name: "operators update",
    synopsis: "ID [--role admin|viewer] [--disable | --enable]",
    summary: "change an operator's role, or disable or enable all its tokens",
    options: { role: STRING, disable: BOOLEAN, enable: BOOLEAN },
    async run(ctx) {
      if (flag(ctx.values, "disable") && flag(ctx.values, "enable"))
        throw new UsageError("operators update: --disable or --enable, not both");
      const role = str(ctx.values, "role");
      const res = await ctx.admin().updateOperator({
        operatorId: need(ctx.args[0], "ID"),
        role: role === undefined ? undefined : operatorRole(role),
        disabled: flag(ctx.values, "disable") ? true : flag(ctx.values, "enable") ? false : undefined,
      });
      ctx.show(UpdateOperatorResponseSchema, res);
    },
  },
  {
    name: "operators delete",
    synopsis: "ID [--yes]",
    summary: "delete an operator and its tokens (asks first unless --yes)",
    confirms(ctx) {
      const id = need(ctx.args[0], "ID");
      return { question: `delete operator ${id} and its tokens`, expected: id, typeWhat: "the operator's id" };
    },
    async run(ctx) {
      await ctx.admin().deleteOperator({ operatorId: ctx.args[0] });
      print(`deleted operator ${ctx.args[0]}`);
    },
  },
  {
    name: "operators tokens list",
    synopsis: "ID",
    summary: "an operator's tokens: label, created, last used",
    shows: AdminService.method.listOperatorTokens,
    fields: ["operatorId"],
  },
  {
    name: "operators tokens issue",
    synopsis: "ID [--label TEXT]",
    summary: "one more token of an operator (printed once)",
    options: { label: STRING },
    async run(ctx) {
      const res = await ctx
        .admin()
        .issueOperatorToken({ operatorId: need(ctx.args[0], "ID"), label: str(ctx.values, "label") });
      process.stderr.write(`token id ${res.tokenId}; the token is shown once, now:\n`);
      print(res.token);
    },
  },
  {
    name: "operators tokens revoke",
    synopsis: "TOKEN_ID",
    summary: "revoke an operator token",
    async run(ctx) {
      await ctx.admin().revokeOperatorToken({ tokenId: need(ctx.args[0], "TOKEN_ID") });
      print("revoked");
    },
  },
  {
    name: "audit list",
    synopsis: "[--app NAME] [--operator ID] [--action ACTION] [--since TIME] [--until TIME] [--limit N] [--page TOKEN]",
    summary: "the audit log, newest first (a page; --page continues)",
    options: {
      app: STRING,
      operator: STRING,
      action: STRING,
      since: STRING,
      until: STRING,
      limit: STRING,
      page: STRING,
    },
    async run(ctx) {
      const since = str(ctx.values, "since");
      const until = str(ctx.values, "until");
      const res = await ctx.admin().listAuditEntries({
        appId: str(ctx.values, "app"),
        operatorId: str(ctx.values, "operator"),
        action: str(ctx.values, "action"),
        since: since === undefined ? undefined : timestampFromDate(cliTime(since, "--since")),
        until: until === undefined ? undefined : timestampFromDate(cliTime(until, "--until")),
        pageSize: count(str(ctx.values, "limit"), "--limit") ?? 0,
        pageToken: str(ctx.values, "page") ?? "",
      });
      ctx.show(ListAuditEntriesResponseSchema, res);
    },
  },
  {
    name: "backup",
    synopsis: "FILE",
    summary:
      "the embedded database to a new archive, server stopped (no key or admin token in it; direct database access)",
    async run(ctx) {
      for (const line of await backupDataDir(ctx.config, need(ctx.args[0], "FILE"))) print(line);
    },
  },
  {
    name: "restore",
    synopsis: "FILE [--key-file KEY_FILE] [--force]",
    summary:
      "a backup into DATA_DIR, server stopped; refused unless the key opens its secrets, or over a database without --force",
    options: { "key-file": STRING, force: BOOLEAN },
    async run(ctx) {
      const lines = await restoreDataDir(ctx.config, need(ctx.args[0], "FILE"), {
        keyFile: str(ctx.values, "key-file"),
        force: flag(ctx.values, "force"),
        audit: (db, detail) => auditDirect(db, "database.restore", detail),
      });
      for (const line of lines) print(line);
    },
  },
  {
    name: "migrate",
    synopsis: "",
    summary: "run database migrations (direct database access)",
    async run(ctx) {
      const database = await openDatabase({ databaseUrl: ctx.config.databaseUrl, dataDir: ctx.config.dataDir });
      try {
        await migrate(database.db);
        print(`migrations applied to ${databaseName(ctx.config)}`);
      } finally {
        await database.close();
      }
    },
  },
  {
    name: "admin-token adopt",
    synopsis: "",
    summary: "make ADMIN_TOKEN the admin token every instance must use (direct database access)",
    async run(ctx) {
      const adminToken = ctx.config.adminToken;
      if (!adminToken) throw new UsageError("admin-token adopt: set ADMIN_TOKEN to the new admin token");
      const database = await openDatabase({
        databaseUrl: ctx.config.databaseUrl,
        dataDir: ctx.config.dataDir,
        poolSize: 2,
      });
      try {
        await migrate(database.db);
        await adoptAdminToken(database.db, adminToken);
        await auditDirect(database.db, "admin_token.adopt", {});
      } finally {
        await database.close();
      }
      print("adopted: every instance on this database must now start with this ADMIN_TOKEN");
    },
  },
];

/**
 * The database a direct-database command opened, as the operator knows it:
 * PostgreSQL's host, port and database (never the user's password), or the
 * embedded database's directory, saying that DATABASE_URL was not set (an
 * operator who forgot it must not think production was migrated).
 */
export function databaseName(config: { databaseUrl?: string | undefined; dataDir: string }): string {
  if (!config.databaseUrl)
    return `the embedded database (PGlite) in ${path.resolve(config.dataDir, "pg")} (DATABASE_URL is not set)`;
  try {
    const url = new URL(config.databaseUrl);
    // A socket directory may come as ?host=/run/postgresql instead of the URL's host.
    const host = url.hostname || url.searchParams.get("host") || "localhost";
    const database = decodeURIComponent(url.pathname.replace(/^\//, "")) || "(the user's default database)";
    return `PostgreSQL database ${database} on ${host}:${url.port || "5432"}`;
  } catch {
    return "the PostgreSQL database of DATABASE_URL";
  }
}

/** Options every command takes. */
const COMMON_OPTIONS: Record<string, ParseArgsOptionDescriptor> = {
  url: STRING,
  json: BOOLEAN,
  output: STRING,
  help: { type: "boolean", short: "h" },
};

const usageLine = (c: Command) => `${c.name}${c.synopsis ? ` ${c.synopsis}` : ""}`;

/** How the command is run: `npm run cli --` in a checkout, `platform-batteries` where the package is installed. */
let program = "npm run cli --";

/** The usage of every command, as `program` runs them. */
export function usage(run: string = program): string {
  return `usage: ${run} <command> [--url URL] [--output table|json] [--json]

${COMMANDS.map((c) => {
  const line = usageLine(c);
  return line.length <= 40 ? `  ${line.padEnd(40)} ${c.summary}` : `  ${line}\n  ${"".padEnd(40)} ${c.summary}`;
}).join("\n")}

--url URL   the server (else PLATFORM_ADMIN_URL, else PUBLIC_URL, else HOST:PORT)
--output    table (the default on a terminal) or json (the default otherwise: readable JSON)
--json      canonical proto3 JSON (64-bit integers as strings, enum names in full) for scripts
Limits: ${LIMIT_NAMES.join(", ")}`;
}

/** ` (did you mean --x?)` for the candidate closest to `typed`, or "" when none is close. */
function suggestion(typed: string, candidates: readonly string[]): string {
  const near = closest(typed, candidates);
  return near ? ` (did you mean ${near}?)` : "";
}

/** The candidate within two typos of `typed` (three in words of nine letters or more), else undefined. */
function closest(typed: string, candidates: readonly string[]): string | undefined {
  if (typed === "" || candidates.length === 0) return undefined;
  const best = closestMatch(typed, candidates);
  return distance(typed, best) <= Math.min(3, Math.max(2, Math.floor(typed.length / 3))) ? best : undefined;
}

/** The command meant by mistyped words: the closest name with as many words, or with the first word right. */
function closestCommand(words: string[]): string | undefined {
  for (let n = Math.min(3, words.length); n >= 1; n--) {
    const typed = words.slice(0, n).join(" ");
    const near = closest(
      typed,
      COMMANDS.map((c) => c.name).filter((name) => name.split(" ").length === n),
    );
    if (near) return near;
  }
  return undefined;
}

/** `--output`: table or json; a terminal gets a table, a pipe or a file JSON. */
function outputOf(value: string | undefined, terminal: boolean): "table" | "json" {
  if (value === undefined) return terminal ? "table" : "json";
  if (value === "table" || value === "json") return value;
  throw new UsageError(`--output: must be table or json${suggestion(value, ["table", "json"])}`);
}

/** A command's own options: its table's, those its `counts` and `paged` fill, and `--yes` where it `confirms`. */
function optionsOf(command: Command): Record<string, ParseArgsOptionDescriptor> {
  const options = { ...command.options };
  if ("shows" in command) {
    for (const option of Object.keys(command.counts ?? {})) options[option] = STRING;
    if (command.paged) Object.assign(options, { limit: STRING, page: STRING });
  }
  if (command.confirms) options.yes = BOOLEAN;
  return options;
}

/** The command named by the first words of `argv` (the longest name that matches), and the rest. */
function findCommand(words: string[]): { command: Command; rest: string[] } | undefined {
  for (let n = 3; n >= 1; n--) {
    const name = words.slice(0, n).join(" ");
    const command = COMMANDS.find((c) => c.name === name);
    if (command && words.length >= n) return { command, rest: words.slice(n) };
  }
  return undefined;
}

/** The server the last command talked to, for the message when it did not answer. */
let serverUrl = "";

export async function runCli(argv: string[], env: Env = process.env): Promise<void> {
  // The command's words: the leading arguments; common options may come before them.
  const words: string[] = [];
  const others: string[] = [];
  let i = 0;
  while (i < argv.length && words.length < 3) {
    const arg = argv[i];
    if (arg === "--url" && i + 1 < argv.length) {
      others.push(arg, argv[i + 1]);
      i += 2;
    } else if (arg === "--json" || arg.startsWith("--url=")) {
      others.push(arg);
      i++;
    } else if (arg.startsWith("-")) {
      break;
    } else {
      words.push(arg);
      i++;
    }
  }
  others.push(...argv.slice(i));
  const found = findCommand(words);
  if (!found) {
    if (words.length === 0 || argv.includes("--help") || argv.includes("-h")) return print(usage());
    const near = closestCommand(words);
    // "apps" alone, or "apps lsit": the commands of that group, when the first word is one.
    const group = COMMANDS.filter((c) => c.name.startsWith(`${words[0]} `)).map((c) => c.name);
    throw new UsageError(
      `unknown command: ${words.join(" ")}${near ? `\ndid you mean: ${program} ${near}?` : ""}\n` +
        (group.length ? `${words[0]} commands: ${group.join(", ")}\n` : "") +
        `every command: ${program} --help`,
    );
  }
  const { command } = found;
  let parsed: { values: Values; positionals: string[] };
  try {
    const { values, positionals } = parseArgs({
      args: [...found.rest, ...others],
      allowPositionals: true,
      options: { ...COMMON_OPTIONS, ...optionsOf(command) },
    });
    parsed = { values: values as Values, positionals };
  } catch (err) {
    // "Unknown option '--limt'": name the option meant, when one is close.
    const unknown = /^Unknown option '(--?[^']+)'/.exec((err as Error).message)?.[1];
    const options = Object.keys({ ...COMMON_OPTIONS, ...optionsOf(command) }).map((o) => `--${o}`);
    const message = unknown
      ? `unknown option ${unknown}${suggestion(unknown.split("=")[0], options)}`
      : (err as Error).message;
    throw new UsageError(`${message}\nusage: ${program} ${usageLine(command)}`);
  }
  if (parsed.values.help) return print(`usage: ${program} ${usageLine(command)}\n  ${command.summary}`);
  const config = loadConfig(env);
  let client: Client<typeof AdminService> | undefined;
  const json = flag(parsed.values, "json");
  const output = outputOf(str(parsed.values, "output"), process.stdout.isTTY === true);
  const ctx: Context = {
    args: parsed.positionals,
    values: parsed.values,
    config,
    show: (schema, message) =>
      print(
        json
          ? toJson(schema, message)
          : output === "table"
            ? humanTable(readableJson(schema, message))
            : readableJson(schema, message),
      ),
    admin() {
      if (client) return client;
      const baseUrl = str(parsed.values, "url") ?? config.adminUrl ?? config.publicUrl;
      serverUrl = baseUrl;
      const tokenFile = adminTokenFile(config.dataDir);
      const adminToken =
        config.adminToken ?? (fs.existsSync(tokenFile) ? fs.readFileSync(tokenFile, "utf8").trim() : undefined);
      if (!adminToken)
        throw new UsageError(
          `no admin token: set ADMIN_TOKEN or ADMIN_TOKEN_FILE, or start the server once to create ${tokenFile}`,
        );
      client = createClient(
        AdminService,
        createConnectTransport({
          baseUrl,
          httpVersion: "1.1",
          interceptors: [(next) => (req) => (req.header.set("authorization", `Bearer ${adminToken}`), next(req))],
        }),
      );
      return client;
    },
  };
  const asked = command.confirms?.(ctx);
  if (asked) await confirmOrRefuse(ctx, asked.refused ?? command.name, asked.question, asked.expected, asked.typeWhat);
  await ("shows" in command ? showAnswer(ctx, command) : command.run(ctx));
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
    `  or point the CLI at a running one: PLATFORM_ADMIN_URL=https://host:port ${program} ... (or --url URL).\n`
  );
}

/**
 * Runs one command and exits with its status: 0, 1 for a refused or failed
 * call, 2 for a usage or configuration error. `run` is how the operator ran
 * it, for the usage lines (`platform-batteries` from the installed package).
 */
export function main(argv: string[], run?: string): void {
  if (run !== undefined) program = run;
  runCli(argv).catch((err: unknown) => {
    if (err instanceof UsageError || err instanceof ConfigError) {
      process.stderr.write(`${err.message}\n`);
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

const isMain =
  import.meta.url === `file://${process.argv[1]}` || /\/(src|dist)\/cli\.[jt]s$/.test(process.argv[1] ?? "");
if (isMain) main(process.argv.slice(2));
