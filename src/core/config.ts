/**
 * Configuration, parsed from the environment once at start (docs/configuration.md)
 * by one zod schema that holds every variable, its default and its rule. The
 * server, the CLI and the build scripts read the environment only through
 * `loadConfig`. A bad value throws `ConfigError` naming the variable, so the
 * process stops with one clear line instead of failing later at first use.
 */
import fs from "node:fs";
import path from "node:path";
import { z } from "zod";

export class ConfigError extends Error {
  override readonly name = "ConfigError";
  readonly variable: string;
  constructor(variable: string, rule: string) {
    super(`${variable}: ${rule}`);
    this.variable = variable;
  }
}

type MailProviderName = "ses" | "outbox";
type InferenceProviderName = "bedrock" | "local";

export interface Config {
  port: number;
  host: string;
  /** PostgreSQL connection string; undefined means PGlite in `dataDir/pg`. */
  databaseUrl: string | undefined;
  dataDir: string;
  mongodbUrl: string | undefined;
  mongodbDb: string;
  /** Undefined means: read or generate `dataDir/admin-token`. */
  adminToken: string | undefined;
  /** Undefined means: read or generate `dataDir/secrets-key`. */
  secretsKey: Buffer | undefined;
  /** `SECRETS_OLD_KEYS`: earlier keys that still decrypt (not encrypt) values, until `secrets rotate-key` re-encrypted them. */
  secretsOldKeys: Buffer[];
  publicUrl: string;
  mailProvider: MailProviderName;
  mailDomain: string | undefined;
  inferenceProvider: InferenceProviderName;
  bedrockFastModel: string;
  bedrockEmbedModel: string;
  awsRegion: string | undefined;
  /** `AWS_ENDPOINT_URL_SES`, handed to the SES client explicitly so it follows this config, not only `process.env`. */
  sesEndpoint: string | undefined;
  /** `AWS_ENDPOINT_URL_BEDROCK_RUNTIME`, handed to the Bedrock client explicitly for the same reason. */
  bedrockEndpoint: string | undefined;
  tls: { keyFile: string; certFile: string } | undefined;
  /** Connection timeouts of the one port (src/core/http/one-port.ts). */
  http: HttpTimeouts;
  /** Bounds of the platform database's statements and pool (src/core/database/pg-pool.ts). */
  databaseTimeouts: DatabaseTimeouts;
  /**
   * `DATABASE_WAIT_SECONDS`: how long a start waits for a PostgreSQL that cannot be reached yet (0 to 3600,
   * default 60), listening meanwhile (`/health` 200, `/ready` 503); past it the process exits 1.
   */
  databaseWaitSeconds: number;
  /** Who may read `/metrics`, and where it is served. */
  metrics: MetricsAccess;
  /** OpenTelemetry traces (src/core/tracing.ts), when `OTEL_EXPORTER_OTLP_ENDPOINT` is set. */
  tracing: TracingConfig | undefined;
  /**
   * `DATABASE_POOL_APP_SHARE` (percent, default 50): the most of the database pool one app holds, so the
   * rest is there for the others; apps waiting for a connection are served in turn.
   */
  databasePoolAppShare: number;
  /** `LIMIT_EXCHANGE_MS`: how often the instances trade the demand that shares out every app's rate limits. */
  limitExchangeMs: number;
  /**
   * `FAIR_SHARE_UTILIZATION` (percent, default 60; 0 turns it off): the event-loop utilization above which
   * the process counts as saturated, and apps asking for more than their share of the calls are refused
   * (src/core/limits/fair-share.ts).
   */
  fairShareUtilization: number;
  /** `FAIR_SHARE_MIN_RATE` (calls a second, default 200): an app asking for fewer is never refused for its share. */
  fairShareMinRate: number;
  logLevel: string;
  /** `PLATFORM_ADMIN_URL`: the server the CLI calls; undefined means `publicUrl`. */
  adminUrl: string | undefined;
  /** `AUDIT_RETENTION_DAYS`: days the admin API's audit log is kept (1 to 3650, default 90). */
  auditRetentionDays: number;
  /** `CONNECT_SHORT_PATH` (`on` | `off`): unary calls may take the short path in front of connect-fastify. */
  connectShortPath: boolean;
  /** `CORS_ORIGINS`: origins allowed to call Connect and gRPC-Web from a browser (comma-separated); none by default. */
  corsOrigins: string[];
  /** The dashboard's single sign-on (`OIDC_*`); undefined when `OIDC_ISSUER` is unset. */
  oidc: OidcConfig | undefined;
}

/** OpenID Connect sign-in for the dashboard (docs/operators.md#single-sign-on). */
export interface OidcConfig {
  /** `OIDC_ISSUER`: the provider's issuer URL (its discovery document is under it). */
  issuer: string;
  /** `OIDC_CLIENT_ID`. */
  clientId: string;
  /** `OIDC_CLIENT_SECRET` (or `OIDC_CLIENT_SECRET_FILE`); undefined for a public client (PKCE only). */
  clientSecret: string | undefined;
  /** `OIDC_REDIRECT_URL`, default `PUBLIC_URL` + `/dashboard/sso/callback`: registered at the provider. */
  redirectUrl: string;
  /**
   * `OIDC_OPERATORS`: who may sign in, as which operator: a verified e-mail address (`alice@example.com`) or a
   * subject (`sub:248289761001`), each mapped to a named operator (or `owner`). Keys are lower-case e-mails.
   */
  operators: ReadonlyMap<string, string>;
  /** `OIDC_SCOPES`, default `openid email`. */
  scopes: string;
  /** `OIDC_SESSION_MINUTES` (1 to 43200, default 480): how long a dashboard session lasts after sign-in. */
  sessionMinutes: number;
}

export interface HttpTimeouts {
  /** `HTTP_HEADERS_TIMEOUT_MS`: a connection must send a whole request header (or the HTTP/2 preface) within this. */
  headersTimeoutMs: number;
  /** `HTTP_REQUEST_TIMEOUT_MS`: ... and the whole request, body included (a long-poll's wait is not part of it). */
  requestTimeoutMs: number;
  /** `HTTP_KEEPALIVE_TIMEOUT_MS`: an idle kept-alive connection (or an HTTP/2 session with no stream) is closed after this. */
  keepAliveTimeoutMs: number;
}

interface MetricsAccess {
  /** `METRICS_TOKEN`: when set, `/metrics` needs `Authorization: Bearer <token>`. */
  token: string | undefined;
  /** `METRICS_PORT`: when set, `/metrics` is served on this port of HOST only, not on the public port. */
  port: number | undefined;
  /**
   * `METRICS_APPS_TOP` (0 to 1000, default 20): the per-app series of /metrics name at most this many apps per
   * metric (those with the largest values); the others are folded into one `app="_other"` series.
   */
  appsTop: number;
}

/** Where traces go; undefined (`OTEL_EXPORTER_OTLP_ENDPOINT` unset) means no tracing at all. */
export interface TracingConfig {
  /** `OTEL_EXPORTER_OTLP_ENDPOINT`: the OTLP/HTTP receiver's base URL; spans are posted to `<it>/v1/traces`. */
  endpoint: string;
  /** `OTEL_SERVICE_NAME` (default `platform-batteries`): the `service.name` of every span. */
  serviceName: string;
}

interface DatabaseTimeouts {
  /** `DATABASE_STATEMENT_TIMEOUT_MS`: a statement running longer fails (503 `unavailable`); a long-poll's wait is not a statement. */
  statementMs: number;
  /** `DATABASE_POOL_WAIT_MS`: a request waiting longer for a pool connection (or a new one) fails the same way. */
  poolWaitMs: number;
}

type Env = Record<string, string | undefined>;

/** A variable's text, trimmed; an empty value counts as unset (as `VAR=` in a compose file means). */
function set(value: unknown): string | undefined {
  return typeof value === "string" && value.trim() !== "" ? value.trim() : undefined;
}

/**
 * One variable: its text parsed by `parse` (undefined when it breaks the rule) into its value,
 * or `fallback` when unset. The rule is what `ConfigError` says after the variable's name.
 */
function variable<T>(parse: (text: string) => T | undefined, rule: string | ((text: string) => string)) {
  const checked = z.string().transform((text, ctx): T => {
    const value = parse(text);
    if (value === undefined) ctx.addIssue({ code: "custom", message: typeof rule === "string" ? rule : rule(text) });
    return value as T;
  });
  return {
    default: (fallback: T) => z.preprocess(set, checked.optional()).transform((v) => v ?? fallback),
    optional: () => z.preprocess(set, checked.optional()),
  };
}

const text = variable((t) => t, "");

function wholeNumber({ min, max }: { min: number; max: number }, rule: string) {
  return variable((t) => (/^\d+$/.test(t) && Number(t) >= min && Number(t) <= max ? Number(t) : undefined), rule);
}

const milliseconds = wholeNumber(
  { min: 100, max: 3_600_000 },
  "must be a whole number of milliseconds from 100 to 3600000",
);

function oneOf<T extends string>(allowed: readonly T[]) {
  return variable(
    (t) => ((allowed as readonly string[]).includes(t) ? (t as T) : undefined),
    (t) => `must be one of ${allowed.join(", ")} (got "${t}")`,
  );
}

function url(protocols: string[]) {
  return variable(
    (t) => (URL.canParse(t) && protocols.includes(new URL(t).protocol) ? t : undefined),
    (t) =>
      URL.canParse(t)
        ? `must be a URL with scheme ${protocols.map((p) => p.replace(":", "")).join(" or ")}`
        : "must be a URL",
  );
}

/** A 32-byte key in base64 (`openssl rand -base64 32`), or undefined. */
function base64Key(text: string): Buffer | undefined {
  const key = Buffer.from(text, "base64");
  return key.length === 32 && /^[A-Za-z0-9+/]+={0,2}$/.test(text) ? key : undefined;
}

/** Each comma-separated item of `text` parsed, or undefined when one breaks the rule. */
function list<T>(parse: (item: string) => T | undefined) {
  return (text: string): T[] | undefined => {
    const items = text
      .split(",")
      .map((item) => item.trim())
      .filter((item) => item !== "")
      .map(parse);
    return items.includes(undefined) ? undefined : (items as T[]);
  };
}

/** Hosts where an `http:` issuer is accepted: only this machine (a provider run beside the service, or a test's). */
const LOOPBACK_HOSTS = new Set(["localhost", "127.0.0.1", "[::1]"]);

/** `PUBLIC_URL` without a trailing slash, default this server's own address. */
function publicUrlOf(env: { PUBLIC_URL?: string; HOST: string; PORT: number }): string {
  return (env.PUBLIC_URL ?? `http://${env.HOST.includes(":") ? `[${env.HOST}]` : env.HOST}:${env.PORT}`).replace(
    /\/+$/,
    "",
  );
}

/** One `OIDC_OPERATORS` item, `identity=operator`: a key of `OidcConfig.operators` and the operator's name. */
function operatorMapping(item: string): [string, string] | undefined {
  const at = item.lastIndexOf("=");
  if (at <= 0) return undefined;
  const identity = item.slice(0, at).trim();
  const operator = item.slice(at + 1).trim();
  if (operator === "" || identity === "") return undefined;
  if (identity.startsWith("sub:")) return identity.length > 4 ? [identity, operator] : undefined;
  return /^[^@\s]+@[^@\s]+$/.test(identity) ? [identity.toLowerCase(), operator] : undefined;
}

const namePattern = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+$/i;
const originPattern = /^https?:\/\/[^/\s]+$/;

/**
 * Every variable, its default and its rule, in one place; what depends on
 * two variables is checked after them, naming the one to change.
 */
const environmentSchema = z
  .object({
    PORT: wholeNumber({ min: 0, max: 65535 }, "must be an integer from 0 to 65535").default(8080),
    HOST: text.default("127.0.0.1"),
    DATABASE_URL: url(["postgres:", "postgresql:"]).optional(),
    DATA_DIR: text.default("./data"),
    MONGODB_URL: url(["mongodb:", "mongodb+srv:"]).optional(),
    MONGODB_DB: variable(
      (t) => (/^[A-Za-z0-9_-]{1,63}$/.test(t) ? t : undefined),
      "must be 1 to 63 letters, digits, _ or -",
    ).default("platform_batteries"),
    ADMIN_TOKEN: variable((t) => (t.length >= 32 ? t : undefined), "must be at least 32 characters").optional(),
    SECRETS_KEY: variable(base64Key, "must be the base64 of exactly 32 bytes (openssl rand -base64 32)").optional(),
    SECRETS_OLD_KEYS: variable(
      list(base64Key),
      "must be a comma-separated list of base64 keys of exactly 32 bytes each",
    ).default([]),
    PUBLIC_URL: url(["http:", "https:"]).optional(),
    MAIL_PROVIDER: oneOf(["ses", "outbox"] as const).default("outbox"),
    MAIL_DOMAIN: variable(
      (t) => (namePattern.test(t) ? t : undefined),
      "must be a domain name such as mail.example.com",
    ).optional(),
    INFERENCE_PROVIDER: oneOf(["bedrock", "local"] as const).default("local"),
    BEDROCK_FAST_MODEL: text.default("amazon.nova-micro-v1:0"),
    BEDROCK_EMBED_MODEL: text.default("amazon.titan-embed-text-v2:0"),
    AWS_REGION: text.optional(),
    AWS_DEFAULT_REGION: text.optional(),
    AWS_ENDPOINT_URL_SES: url(["http:", "https:"]).optional(),
    AWS_ENDPOINT_URL_BEDROCK_RUNTIME: url(["http:", "https:"]).optional(),
    TLS_KEY_FILE: text.optional(),
    TLS_CERT_FILE: text.optional(),
    HTTP_HEADERS_TIMEOUT_MS: milliseconds.default(10_000),
    HTTP_REQUEST_TIMEOUT_MS: milliseconds.default(30_000),
    HTTP_KEEPALIVE_TIMEOUT_MS: milliseconds.default(5_000),
    DATABASE_STATEMENT_TIMEOUT_MS: milliseconds.default(10_000),
    DATABASE_POOL_WAIT_MS: milliseconds.default(5_000),
    DATABASE_WAIT_SECONDS: wholeNumber(
      { min: 0, max: 3600 },
      "must be a whole number of seconds from 0 to 3600",
    ).default(60),
    METRICS_TOKEN: variable(
      (t) => (t.length >= 16 && !/\s/.test(t) ? t : undefined),
      "must be at least 16 characters, without spaces",
    ).optional(),
    METRICS_PORT: wholeNumber({ min: 0, max: 65535 }, "must be an integer from 0 to 65535").optional(),
    METRICS_APPS_TOP: wholeNumber({ min: 0, max: 1000 }, "must be a whole number from 0 to 1000").default(20),
    OTEL_EXPORTER_OTLP_ENDPOINT: url(["http:", "https:"]).optional(),
    OTEL_SERVICE_NAME: text.default("platform-batteries"),
    DATABASE_POOL_APP_SHARE: wholeNumber({ min: 1, max: 100 }, "must be a whole percentage from 1 to 100").default(50),
    LIMIT_EXCHANGE_MS: milliseconds.default(1_000),
    FAIR_SHARE_UTILIZATION: wholeNumber({ min: 0, max: 100 }, "must be a whole percentage from 0 (off) to 100").default(
      60,
    ),
    FAIR_SHARE_MIN_RATE: wholeNumber({ min: 0, max: 1_000_000 }, "must be a whole number of calls a second").default(
      200,
    ),
    LOG_LEVEL: oneOf(["fatal", "error", "warn", "info", "debug", "trace", "silent"] as const).default("info"),
    AUDIT_RETENTION_DAYS: wholeNumber({ min: 1, max: 3650 }, "must be a whole number of days from 1 to 3650").default(
      90,
    ),
    PLATFORM_ADMIN_URL: url(["http:", "https:"]).optional(),
    CONNECT_SHORT_PATH: oneOf(["on", "off"] as const).default("on"),
    CORS_ORIGINS: variable(
      list((origin) => (origin === "*" || originPattern.test(origin) ? origin : undefined)),
      (t) =>
        `must be a comma-separated list of origins such as https://app.example.com (was ${t
          .split(",")
          .map((o) => o.trim())
          .find((o) => o !== "" && o !== "*" && !originPattern.test(o))})`,
    ).default([]),
    OIDC_ISSUER: url(["http:", "https:"]).optional(),
    OIDC_CLIENT_ID: text.optional(),
    OIDC_CLIENT_SECRET: text.optional(),
    OIDC_REDIRECT_URL: url(["http:", "https:"]).optional(),
    OIDC_OPERATORS: variable(
      list(operatorMapping),
      "must be a comma-separated list of identity=operator, the identity an e-mail address or sub:<subject>",
    ).default([]),
    OIDC_SCOPES: text.default("openid email"),
    OIDC_SESSION_MINUTES: wholeNumber(
      { min: 1, max: 43_200 },
      "must be a whole number of minutes from 1 to 43200",
    ).default(480),
  })
  .superRefine((env, ctx) => {
    if (env.OIDC_ISSUER !== undefined) {
      if (
        new URL(env.OIDC_ISSUER).protocol === "http:" &&
        !LOOPBACK_HOSTS.has(new URL(env.OIDC_ISSUER).host.replace(/:\d+$/, ""))
      ) {
        ctx.addIssue({
          code: "custom",
          path: ["OIDC_ISSUER"],
          message: "must be https (http only for a provider on localhost)",
        });
      }
      if (env.OIDC_CLIENT_ID === undefined) {
        ctx.addIssue({ code: "custom", path: ["OIDC_CLIENT_ID"], message: "must be set when OIDC_ISSUER is" });
      }
      if (env.OIDC_OPERATORS.length === 0) {
        ctx.addIssue({
          code: "custom",
          path: ["OIDC_OPERATORS"],
          message: "must map at least one identity to an operator when OIDC_ISSUER is set (nobody could sign in)",
        });
      }
      if (!env.OIDC_SCOPES.split(/\s+/).includes("openid")) {
        ctx.addIssue({ code: "custom", path: ["OIDC_SCOPES"], message: "must include openid" });
      }
    }
    const awsRegion = env.AWS_REGION ?? env.AWS_DEFAULT_REGION;
    if (awsRegion === undefined && (env.MAIL_PROVIDER === "ses" || env.INFERENCE_PROVIDER === "bedrock")) {
      ctx.addIssue({
        code: "custom",
        path: ["AWS_REGION"],
        message: `must be set when ${env.MAIL_PROVIDER === "ses" ? "MAIL_PROVIDER=ses" : "INFERENCE_PROVIDER=bedrock"}`,
      });
    }
    if ((env.TLS_KEY_FILE === undefined) !== (env.TLS_CERT_FILE === undefined)) {
      ctx.addIssue({
        code: "custom",
        path: [env.TLS_KEY_FILE === undefined ? "TLS_KEY_FILE" : "TLS_CERT_FILE"],
        message: "TLS_KEY_FILE and TLS_CERT_FILE must be set together",
      });
    }
    if (env.METRICS_PORT !== undefined && env.METRICS_PORT !== 0 && env.METRICS_PORT === env.PORT) {
      ctx.addIssue({
        code: "custom",
        path: ["METRICS_PORT"],
        message: "must differ from PORT (it serves /metrics apart from the public port)",
      });
    }
    if (env.HTTP_REQUEST_TIMEOUT_MS < env.HTTP_HEADERS_TIMEOUT_MS) {
      ctx.addIssue({
        code: "custom",
        path: ["HTTP_REQUEST_TIMEOUT_MS"],
        message: "must not be shorter than HTTP_HEADERS_TIMEOUT_MS (the header is part of the request)",
      });
    }
  })
  .transform((env): Config => ({
    port: env.PORT,
    host: env.HOST,
    databaseUrl: env.DATABASE_URL,
    dataDir: path.resolve(env.DATA_DIR),
    mongodbUrl: env.MONGODB_URL,
    mongodbDb: env.MONGODB_DB,
    adminToken: env.ADMIN_TOKEN,
    secretsKey: env.SECRETS_KEY,
    secretsOldKeys: env.SECRETS_OLD_KEYS,
    publicUrl: publicUrlOf(env),
    mailProvider: env.MAIL_PROVIDER,
    mailDomain: env.MAIL_DOMAIN,
    inferenceProvider: env.INFERENCE_PROVIDER,
    bedrockFastModel: env.BEDROCK_FAST_MODEL,
    bedrockEmbedModel: env.BEDROCK_EMBED_MODEL,
    awsRegion: env.AWS_REGION ?? env.AWS_DEFAULT_REGION,
    sesEndpoint: env.AWS_ENDPOINT_URL_SES,
    bedrockEndpoint: env.AWS_ENDPOINT_URL_BEDROCK_RUNTIME,
    tls: env.TLS_KEY_FILE && env.TLS_CERT_FILE ? { keyFile: env.TLS_KEY_FILE, certFile: env.TLS_CERT_FILE } : undefined,
    http: {
      headersTimeoutMs: env.HTTP_HEADERS_TIMEOUT_MS,
      requestTimeoutMs: env.HTTP_REQUEST_TIMEOUT_MS,
      keepAliveTimeoutMs: env.HTTP_KEEPALIVE_TIMEOUT_MS,
    },
    databaseTimeouts: {
      statementMs: env.DATABASE_STATEMENT_TIMEOUT_MS,
      poolWaitMs: env.DATABASE_POOL_WAIT_MS,
    },
    databaseWaitSeconds: env.DATABASE_WAIT_SECONDS,
    metrics: { token: env.METRICS_TOKEN, port: env.METRICS_PORT, appsTop: env.METRICS_APPS_TOP },
    tracing:
      env.OTEL_EXPORTER_OTLP_ENDPOINT === undefined
        ? undefined
        : { endpoint: env.OTEL_EXPORTER_OTLP_ENDPOINT.replace(/\/+$/, ""), serviceName: env.OTEL_SERVICE_NAME },
    databasePoolAppShare: env.DATABASE_POOL_APP_SHARE / 100,
    limitExchangeMs: env.LIMIT_EXCHANGE_MS,
    fairShareUtilization: env.FAIR_SHARE_UTILIZATION / 100,
    fairShareMinRate: env.FAIR_SHARE_MIN_RATE,
    logLevel: env.LOG_LEVEL,
    adminUrl: env.PLATFORM_ADMIN_URL,
    auditRetentionDays: env.AUDIT_RETENTION_DAYS,
    connectShortPath: env.CONNECT_SHORT_PATH === "on",
    corsOrigins: env.CORS_ORIGINS,
    oidc:
      env.OIDC_ISSUER === undefined || env.OIDC_CLIENT_ID === undefined
        ? undefined
        : {
            issuer: env.OIDC_ISSUER,
            clientId: env.OIDC_CLIENT_ID,
            clientSecret: env.OIDC_CLIENT_SECRET,
            redirectUrl: env.OIDC_REDIRECT_URL ?? `${publicUrlOf(env)}/dashboard/sso/callback`,
            operators: new Map(env.OIDC_OPERATORS),
            scopes: env.OIDC_SCOPES,
            sessionMinutes: env.OIDC_SESSION_MINUTES,
          },
  }));

/**
 * Variables that may instead be given as a file's contents, `NAME_FILE` (the
 * convention of Docker and Kubernetes secrets): a key kept in a file is
 * generated once and survives every restart, where one generated inline on a
 * command line is lost with it.
 */
const FILE_VARIABLES = ["ADMIN_TOKEN", "SECRETS_KEY", "OIDC_CLIENT_SECRET"] as const;

/**
 * `env` with each `NAME_FILE` of `FILE_VARIABLES` read into `NAME` (one final
 * line break dropped), and the names whose value came from a file. A file that
 * cannot be read or is empty, or both forms set, is a `ConfigError` naming the
 * `_FILE` variable; the message never holds the file's contents.
 */
function readFileVariables(env: Env): { env: Env; fromFile: Map<string, string> } {
  const out: Env = { ...env };
  const fromFile = new Map<string, string>();
  for (const name of FILE_VARIABLES) {
    const fileVariable = `${name}_FILE`;
    const file = set(env[fileVariable]);
    if (file === undefined) continue;
    if (set(env[name]) !== undefined) throw new ConfigError(fileVariable, `set ${name} or ${fileVariable}, not both`);
    let contents: string;
    try {
      contents = fs.readFileSync(file, "utf8");
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      const why =
        code === "ENOENT"
          ? "does not exist"
          : code === "EACCES"
            ? "is not readable by this user"
            : `cannot be read (${code ?? "error"})`;
      throw new ConfigError(fileVariable, `${file} ${why}`);
    }
    const value = contents.replace(/\r?\n$/, "");
    if (value.trim() === "") throw new ConfigError(fileVariable, `${file} is empty`);
    out[name] = value;
    fromFile.set(name, file);
  }
  return { env: out, fromFile };
}

/** The configuration of `env`; the first variable that breaks its rule throws `ConfigError` naming it. */
export function loadConfig(env: Env = process.env): Config {
  const files = readFileVariables(env);
  const result = environmentSchema.safeParse(files.env);
  if (result.success) return result.data;
  const issue = result.error.issues[0];
  const name = String(issue.path[0]);
  // A value read from a file is named by the variable that gave the file.
  const file = files.fromFile.get(name);
  if (file !== undefined) throw new ConfigError(`${name}_FILE`, `the contents of ${file} ${issue.message}`);
  throw new ConfigError(name, issue.message);
}
