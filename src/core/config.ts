/**
 * Configuration, parsed from the environment once at start (DESIGN.md section 3).
 * A bad value throws `ConfigError` naming the variable, so the process stops
 * with one clear line instead of failing later at first use.
 */
import path from "node:path";

export class ConfigError extends Error {
  override readonly name = "ConfigError";
  readonly variable: string;
  constructor(variable: string, rule: string) {
    super(`${variable}: ${rule}`);
    this.variable = variable;
  }
}

export type MailProviderName = "ses" | "outbox";
export type InferenceProviderName = "bedrock" | "local";

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
  logLevel: string;
  /** `PLATFORM_ADMIN_URL`: the server the CLI calls; undefined means `publicUrl`. */
  adminUrl: string | undefined;
  /** `AUDIT_RETENTION_DAYS`: days the admin API's audit log is kept (1 to 3650, default 90). */
  auditRetentionDays: number;
  /** `CONNECT_SHORT_PATH` (`on` | `off`): unary calls may take the short path in front of connect-fastify. */
  connectShortPath: boolean;
  /** `CORS_ORIGINS`: origins allowed to call Connect and gRPC-Web from a browser (comma-separated); none by default. */
  corsOrigins: string[];
}

export interface HttpTimeouts {
  /** `HTTP_HEADERS_TIMEOUT_MS`: a connection must send a whole request header (or the HTTP/2 preface) within this. */
  headersTimeoutMs: number;
  /** `HTTP_REQUEST_TIMEOUT_MS`: ... and the whole request, body included (a long-poll's wait is not part of it). */
  requestTimeoutMs: number;
  /** `HTTP_KEEPALIVE_TIMEOUT_MS`: an idle kept-alive connection (or an HTTP/2 session with no stream) is closed after this. */
  keepAliveTimeoutMs: number;
}

export interface DatabaseTimeouts {
  /** `DATABASE_STATEMENT_TIMEOUT_MS`: a statement running longer fails (503 `unavailable`); a long-poll's wait is not a statement. */
  statementMs: number;
  /** `DATABASE_POOL_WAIT_MS`: a request waiting longer for a pool connection (or a new one) fails the same way. */
  poolWaitMs: number;
}

type Env = Record<string, string | undefined>;

function optional(env: Env, name: string): string | undefined {
  const value = env[name];
  return value === undefined || value.trim() === "" ? undefined : value.trim();
}

function oneOf<T extends string>(env: Env, name: string, allowed: readonly T[], fallback: T): T {
  const value = optional(env, name) ?? fallback;
  if (!(allowed as readonly string[]).includes(value)) {
    throw new ConfigError(name, `must be one of ${allowed.join(", ")} (got "${value}")`);
  }
  return value as T;
}

function milliseconds(env: Env, name: string, fallback: number): number {
  const text = optional(env, name);
  if (text === undefined) return fallback;
  const value = Number(text);
  if (!/^\d+$/.test(text) || value < 100 || value > 3_600_000)
    throw new ConfigError(name, "must be a whole number of milliseconds from 100 to 3600000");
  return value;
}

function url(env: Env, name: string, protocols: string[]): string | undefined {
  const value = optional(env, name);
  if (value === undefined) return undefined;
  let parsed: URL;
  try {
    parsed = new URL(value);
  } catch {
    throw new ConfigError(name, "must be a URL");
  }
  if (!protocols.includes(parsed.protocol)) {
    throw new ConfigError(name, `must be a URL with scheme ${protocols.map((p) => p.replace(":", "")).join(" or ")}`);
  }
  return value;
}

const namePattern = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+$/i;

export function loadConfig(env: Env = process.env): Config {
  const portText = optional(env, "PORT") ?? "8080";
  const port = Number(portText);
  if (!/^\d+$/.test(portText) || port > 65535) throw new ConfigError("PORT", "must be an integer from 0 to 65535");
  const host = optional(env, "HOST") ?? "127.0.0.1";

  const databaseUrl = url(env, "DATABASE_URL", ["postgres:", "postgresql:"]);
  const dataDir = path.resolve(optional(env, "DATA_DIR") ?? "./data");
  const mongodbUrl = url(env, "MONGODB_URL", ["mongodb:", "mongodb+srv:"]);
  const mongodbDb = optional(env, "MONGODB_DB") ?? "platform_batteries";
  if (!/^[A-Za-z0-9_-]{1,63}$/.test(mongodbDb))
    throw new ConfigError("MONGODB_DB", "must be 1 to 63 letters, digits, _ or -");

  const adminToken = optional(env, "ADMIN_TOKEN");
  if (adminToken !== undefined && adminToken.length < 32) {
    throw new ConfigError("ADMIN_TOKEN", "must be at least 32 characters");
  }

  const secretsKeyText = optional(env, "SECRETS_KEY");
  let secretsKey: Buffer | undefined;
  if (secretsKeyText !== undefined) {
    secretsKey = Buffer.from(secretsKeyText, "base64");
    if (secretsKey.length !== 32 || !/^[A-Za-z0-9+/]+={0,2}$/.test(secretsKeyText)) {
      throw new ConfigError("SECRETS_KEY", "must be the base64 of exactly 32 bytes (openssl rand -base64 32)");
    }
  }

  const secretsOldKeys = (optional(env, "SECRETS_OLD_KEYS") ?? "")
    .split(",")
    .map((text) => text.trim())
    .filter((text) => text !== "")
    .map((text) => {
      const key = Buffer.from(text, "base64");
      if (key.length !== 32 || !/^[A-Za-z0-9+/]+={0,2}$/.test(text)) {
        throw new ConfigError(
          "SECRETS_OLD_KEYS",
          "must be a comma-separated list of base64 keys of exactly 32 bytes each",
        );
      }
      return key;
    });

  const publicUrl = (
    url(env, "PUBLIC_URL", ["http:", "https:"]) ?? `http://${host.includes(":") ? `[${host}]` : host}:${port}`
  ).replace(/\/+$/, "");

  const mailProvider = oneOf(env, "MAIL_PROVIDER", ["ses", "outbox"] as const, "outbox");
  const mailDomain = optional(env, "MAIL_DOMAIN");
  if (mailDomain !== undefined && !namePattern.test(mailDomain))
    throw new ConfigError("MAIL_DOMAIN", "must be a domain name such as mail.example.com");

  const inferenceProvider = oneOf(env, "INFERENCE_PROVIDER", ["bedrock", "local"] as const, "local");
  const bedrockFastModel = optional(env, "BEDROCK_FAST_MODEL") ?? "amazon.nova-micro-v1:0";
  const bedrockEmbedModel = optional(env, "BEDROCK_EMBED_MODEL") ?? "amazon.titan-embed-text-v2:0";
  const awsRegion = optional(env, "AWS_REGION") ?? optional(env, "AWS_DEFAULT_REGION");
  if (awsRegion === undefined && (mailProvider === "ses" || inferenceProvider === "bedrock")) {
    throw new ConfigError(
      "AWS_REGION",
      `must be set when ${mailProvider === "ses" ? "MAIL_PROVIDER=ses" : "INFERENCE_PROVIDER=bedrock"}`,
    );
  }
  const sesEndpoint = url(env, "AWS_ENDPOINT_URL_SES", ["http:", "https:"]);
  const bedrockEndpoint = url(env, "AWS_ENDPOINT_URL_BEDROCK_RUNTIME", ["http:", "https:"]);

  const keyFile = optional(env, "TLS_KEY_FILE");
  const certFile = optional(env, "TLS_CERT_FILE");
  if ((keyFile === undefined) !== (certFile === undefined)) {
    throw new ConfigError(
      keyFile === undefined ? "TLS_KEY_FILE" : "TLS_CERT_FILE",
      "TLS_KEY_FILE and TLS_CERT_FILE must be set together",
    );
  }
  const http: HttpTimeouts = {
    headersTimeoutMs: milliseconds(env, "HTTP_HEADERS_TIMEOUT_MS", 10_000),
    requestTimeoutMs: milliseconds(env, "HTTP_REQUEST_TIMEOUT_MS", 30_000),
    keepAliveTimeoutMs: milliseconds(env, "HTTP_KEEPALIVE_TIMEOUT_MS", 5_000),
  };
  if (http.requestTimeoutMs < http.headersTimeoutMs) {
    throw new ConfigError(
      "HTTP_REQUEST_TIMEOUT_MS",
      "must not be shorter than HTTP_HEADERS_TIMEOUT_MS (the header is part of the request)",
    );
  }
  const databaseTimeouts: DatabaseTimeouts = {
    statementMs: milliseconds(env, "DATABASE_STATEMENT_TIMEOUT_MS", 10_000),
    poolWaitMs: milliseconds(env, "DATABASE_POOL_WAIT_MS", 5_000),
  };
  const logLevel = oneOf(
    env,
    "LOG_LEVEL",
    ["fatal", "error", "warn", "info", "debug", "trace", "silent"] as const,
    "info",
  );

  const auditText = optional(env, "AUDIT_RETENTION_DAYS") ?? "90";
  const auditRetentionDays = Number(auditText);
  if (!/^\d+$/.test(auditText) || auditRetentionDays < 1 || auditRetentionDays > 3650)
    throw new ConfigError("AUDIT_RETENTION_DAYS", "must be a whole number of days from 1 to 3650");

  const adminUrl = url(env, "PLATFORM_ADMIN_URL", ["http:", "https:"]);
  const connectShortPath = oneOf(env, "CONNECT_SHORT_PATH", ["on", "off"] as const, "on") === "on";
  const corsOrigins = (optional(env, "CORS_ORIGINS") ?? "")
    .split(",")
    .map((o) => o.trim())
    .filter((o) => o !== "");
  for (const origin of corsOrigins) {
    if (origin !== "*" && !/^https?:\/\/[^/\s]+$/.test(origin))
      throw new ConfigError(
        "CORS_ORIGINS",
        `must be a comma-separated list of origins such as https://app.example.com (was ${origin})`,
      );
  }

  return {
    adminUrl,
    auditRetentionDays,
    port,
    host,
    databaseUrl,
    dataDir,
    mongodbUrl,
    mongodbDb,
    adminToken,
    secretsKey,
    secretsOldKeys,
    publicUrl,
    mailProvider,
    mailDomain,
    inferenceProvider,
    bedrockFastModel,
    bedrockEmbedModel,
    awsRegion,
    sesEndpoint,
    bedrockEndpoint,
    tls: keyFile && certFile ? { keyFile, certFile } : undefined,
    http,
    databaseTimeouts,
    logLevel,
    connectShortPath,
    corsOrigins,
  };
}
