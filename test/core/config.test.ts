import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../../src/core/config.ts";

function errorOf(env: Record<string, string>): ConfigError {
  try {
    loadConfig(env);
  } catch (err) {
    if (err instanceof ConfigError) return err;
    throw err;
  }
  throw new Error("expected a ConfigError");
}

describe("loadConfig", () => {
  it("has the defaults of docs/configuration.md with no configuration at all", () => {
    const c = loadConfig({});
    expect(c).toMatchObject({
      port: 8080,
      host: "127.0.0.1",
      databaseUrl: undefined,
      mongodbUrl: undefined,
      adminToken: undefined,
      secretsKey: undefined,
      publicUrl: "http://127.0.0.1:8080",
      mailProvider: "outbox",
      mailDomain: undefined,
      inferenceProvider: "local",
      bedrockEmbedModel: "amazon.titan-embed-text-v2:0",
    });
    expect(c.dataDir).toMatch(/\/data$/);
  });

  it("reads every variable", () => {
    const key = Buffer.alloc(32, 7).toString("base64");
    const c = loadConfig({
      PORT: "9000",
      HOST: "0.0.0.0",
      DATABASE_URL: "postgres://u@db:5432/x",
      DATA_DIR: "/tmp/pb",
      MONGODB_URL: "mongodb://m:27017",
      MONGODB_DB: "analytics",
      ADMIN_TOKEN: "a".repeat(40),
      SECRETS_KEY: key,
      PUBLIC_URL: "https://batteries.example.com/",
      MAIL_PROVIDER: "ses",
      MAIL_DOMAIN: "mail.example.com",
      INFERENCE_PROVIDER: "bedrock",
      BEDROCK_FAST_MODEL: "m1",
      BEDROCK_EMBED_MODEL: "m2",
      AWS_REGION: "eu-west-1",
    });
    expect(c).toMatchObject({
      port: 9000,
      host: "0.0.0.0",
      databaseUrl: "postgres://u@db:5432/x",
      dataDir: "/tmp/pb",
      mongodbUrl: "mongodb://m:27017",
      mongodbDb: "analytics",
      publicUrl: "https://batteries.example.com",
      mailProvider: "ses",
      mailDomain: "mail.example.com",
      inferenceProvider: "bedrock",
      bedrockFastModel: "m1",
      bedrockEmbedModel: "m2",
      awsRegion: "eu-west-1",
    });
    expect(c.secretsKey?.equals(Buffer.alloc(32, 7))).toBe(true);
  });

  const bad: [Record<string, string>, string][] = [
    [{ PORT: "eighty" }, "PORT"],
    [{ PORT: "70000" }, "PORT"],
    [{ DATABASE_WAIT_SECONDS: "-1" }, "DATABASE_WAIT_SECONDS"],
    [{ DATABASE_WAIT_SECONDS: "3601" }, "DATABASE_WAIT_SECONDS"],
    [{ DATABASE_WAIT_SECONDS: "1.5" }, "DATABASE_WAIT_SECONDS"],
    [{ METRICS_TOKEN: "short" }, "METRICS_TOKEN"],
    [{ METRICS_TOKEN: "has a space in it, too long" }, "METRICS_TOKEN"],
    [{ METRICS_PORT: "70000" }, "METRICS_PORT"],
    [{ PORT: "9000", METRICS_PORT: "9000" }, "METRICS_PORT"],
    [{ METRICS_APPS_TOP: "1001" }, "METRICS_APPS_TOP"],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: "collector:4318" }, "OTEL_EXPORTER_OTLP_ENDPOINT"],
    [{ DATABASE_URL: "mysql://x" }, "DATABASE_URL"],
    [{ DATABASE_URL: "not a url" }, "DATABASE_URL"],
    [{ MONGODB_URL: "http://x" }, "MONGODB_URL"],
    [{ MONGODB_DB: "a b" }, "MONGODB_DB"],
    [{ ADMIN_TOKEN: "short" }, "ADMIN_TOKEN"],
    [{ SECRETS_KEY: Buffer.alloc(16).toString("base64") }, "SECRETS_KEY"],
    [{ SECRETS_KEY: "!!!" }, "SECRETS_KEY"],
    [{ PUBLIC_URL: "ftp://x" }, "PUBLIC_URL"],
    [{ MAIL_PROVIDER: "smtp" }, "MAIL_PROVIDER"],
    [{ MAIL_DOMAIN: "not a domain" }, "MAIL_DOMAIN"],
    [{ INFERENCE_PROVIDER: "openai" }, "INFERENCE_PROVIDER"],
    [{ MAIL_PROVIDER: "ses" }, "AWS_REGION"],
    [{ INFERENCE_PROVIDER: "bedrock" }, "AWS_REGION"],
    [{ TLS_KEY_FILE: "/k.pem" }, "TLS_CERT_FILE"],
    [{ LOG_LEVEL: "loud" }, "LOG_LEVEL"],
    [{ AUDIT_RETENTION_DAYS: "0" }, "AUDIT_RETENTION_DAYS"],
    [{ PLATFORM_ADMIN_URL: "127.0.0.1:8080" }, "PLATFORM_ADMIN_URL"],
    [{ AUDIT_RETENTION_DAYS: "ninety" }, "AUDIT_RETENTION_DAYS"],
    [{ AUDIT_RETENTION_DAYS: "3651" }, "AUDIT_RETENTION_DAYS"],
    [{ SECRETS_OLD_KEYS: `${Buffer.alloc(32).toString("base64")},short` }, "SECRETS_OLD_KEYS"],
    [{ AWS_ENDPOINT_URL_SES: "ses.local" }, "AWS_ENDPOINT_URL_SES"],
    [{ AWS_ENDPOINT_URL_BEDROCK_RUNTIME: "ws://x" }, "AWS_ENDPOINT_URL_BEDROCK_RUNTIME"],
    [{ TLS_CERT_FILE: "/c.pem" }, "TLS_KEY_FILE"],
    [{ HTTP_HEADERS_TIMEOUT_MS: "99" }, "HTTP_HEADERS_TIMEOUT_MS"],
    [{ HTTP_KEEPALIVE_TIMEOUT_MS: "1.5" }, "HTTP_KEEPALIVE_TIMEOUT_MS"],
    [{ HTTP_HEADERS_TIMEOUT_MS: "20000", HTTP_REQUEST_TIMEOUT_MS: "10000" }, "HTTP_REQUEST_TIMEOUT_MS"],
    [{ DATABASE_STATEMENT_TIMEOUT_MS: "3600001" }, "DATABASE_STATEMENT_TIMEOUT_MS"],
    [{ DATABASE_POOL_WAIT_MS: "soon" }, "DATABASE_POOL_WAIT_MS"],
    [{ CONNECT_SHORT_PATH: "yes" }, "CONNECT_SHORT_PATH"],
    [{ CORS_ORIGINS: "https://a.example.com, app.example.com" }, "CORS_ORIGINS"],
    // The first variable that breaks its rule is named, in the order of the schema.
    [{ LOG_LEVEL: "loud", PORT: "-1" }, "PORT"],
  ];

  it("says the rule, and the value when it helps", () => {
    expect(errorOf({ PORT: "eighty" }).message).toBe("PORT: must be an integer from 0 to 65535");
    expect(errorOf({ MAIL_PROVIDER: "smtp" }).message).toBe('MAIL_PROVIDER: must be one of ses, outbox (got "smtp")');
    expect(errorOf({ DATABASE_URL: "not a url" }).message).toBe("DATABASE_URL: must be a URL");
    expect(errorOf({ DATABASE_URL: "mysql://x" }).message).toBe(
      "DATABASE_URL: must be a URL with scheme postgres or postgresql",
    );
    expect(errorOf({ INFERENCE_PROVIDER: "bedrock" }).message).toBe(
      "AWS_REGION: must be set when INFERENCE_PROVIDER=bedrock",
    );
    expect(errorOf({ CORS_ORIGINS: "https://a.example.com,app.example.com" }).message).toBe(
      "CORS_ORIGINS: must be a comma-separated list of origins such as https://app.example.com (was app.example.com)",
    );
  });

  it("reads an empty or blank value as unset, and trims the others", () => {
    const c = loadConfig({ PORT: "", HOST: "  ", ADMIN_TOKEN: " ", MAIL_DOMAIN: " mail.example.com " });
    expect(c).toMatchObject({ port: 8080, host: "127.0.0.1", adminToken: undefined, mailDomain: "mail.example.com" });
  });

  it("reads the timeouts, the pool's app share, the limit exchange period, old keys, CORS origins, the short path switch and AWS_DEFAULT_REGION", () => {
    const old = [Buffer.alloc(32, 1), Buffer.alloc(32, 2)];
    const c = loadConfig({
      HTTP_HEADERS_TIMEOUT_MS: "2000",
      HTTP_REQUEST_TIMEOUT_MS: "4000",
      HTTP_KEEPALIVE_TIMEOUT_MS: "1000",
      DATABASE_STATEMENT_TIMEOUT_MS: "500",
      DATABASE_POOL_WAIT_MS: "700",
      DATABASE_POOL_APP_SHARE: "25",
      LIMIT_EXCHANGE_MS: "250",
      SECRETS_OLD_KEYS: old.map((k) => k.toString("base64")).join(" , "),
      CORS_ORIGINS: "https://a.example.com, http://b.example.com:8080",
      CONNECT_SHORT_PATH: "off",
      AWS_DEFAULT_REGION: "us-east-2",
      TLS_KEY_FILE: "/k.pem",
      TLS_CERT_FILE: "/c.pem",
      HOST: "::1",
      PORT: "0",
    });
    expect(c.http).toEqual({ headersTimeoutMs: 2000, requestTimeoutMs: 4000, keepAliveTimeoutMs: 1000 });
    expect(c.databaseTimeouts).toEqual({ statementMs: 500, poolWaitMs: 700 });
    expect(c.databasePoolAppShare).toBe(0.25);
    expect(c.limitExchangeMs).toBe(250);
    expect(c.secretsOldKeys.map((k) => k.toString("hex"))).toEqual(old.map((k) => k.toString("hex")));
    expect(c.corsOrigins).toEqual(["https://a.example.com", "http://b.example.com:8080"]);
    expect(c.connectShortPath).toBe(false);
    expect(c.awsRegion).toBe("us-east-2");
    expect(c.tls).toEqual({ keyFile: "/k.pem", certFile: "/c.pem" });
    expect(c.publicUrl).toBe("http://[::1]:0");
    expect(loadConfig({}).connectShortPath).toBe(true);
    expect(loadConfig({}).http).toEqual({
      headersTimeoutMs: 10_000,
      requestTimeoutMs: 30_000,
      keepAliveTimeoutMs: 5_000,
    });
  });

  it("waits DATABASE_WAIT_SECONDS for the database at start, 60 by default; 0 is one attempt", () => {
    expect(loadConfig({}).databaseWaitSeconds).toBe(60);
    expect(loadConfig({ DATABASE_WAIT_SECONDS: "0" }).databaseWaitSeconds).toBe(0);
    expect(loadConfig({ DATABASE_WAIT_SECONDS: "300" }).databaseWaitSeconds).toBe(300);
  });

  it("serves /metrics openly on the public port by default; METRICS_TOKEN and METRICS_PORT change that", () => {
    expect(loadConfig({}).metrics).toEqual({ token: undefined, port: undefined, appsTop: 20 });
    expect(loadConfig({ METRICS_TOKEN: "m".repeat(16), METRICS_PORT: "9464" }).metrics).toEqual({
      token: "m".repeat(16),
      port: 9464,
      appsTop: 20,
    });
  });

  it("names METRICS_APPS_TOP apps per per-app metric, 20 by default", () => {
    expect(loadConfig({ METRICS_APPS_TOP: "5" }).metrics.appsTop).toBe(5);
    expect(loadConfig({ METRICS_APPS_TOP: "0" }).metrics.appsTop).toBe(0);
  });

  it("traces only when OTEL_EXPORTER_OTLP_ENDPOINT is set", () => {
    expect(loadConfig({}).tracing).toBeUndefined();
    expect(loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318/" }).tracing).toEqual({
      endpoint: "http://collector:4318",
      serviceName: "platform-batteries",
    });
    expect(
      loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: "https://collector:4318", OTEL_SERVICE_NAME: "batteries-eu" }).tracing
        ?.serviceName,
    ).toBe("batteries-eu");
  });

  it("keeps the audit log AUDIT_RETENTION_DAYS days, 90 by default", () => {
    expect(loadConfig({}).auditRetentionDays).toBe(90);
    expect(loadConfig({ AUDIT_RETENTION_DAYS: "30" }).auditRetentionDays).toBe(30);
  });
  for (const [env, variable] of bad) {
    it(`refuses ${JSON.stringify(env)} naming ${variable}`, () => {
      const err = errorOf(env);
      expect(err.variable).toBe(variable);
      expect(err.message.startsWith(`${variable}: `)).toBe(true);
      expect(err.message).not.toContain("\n");
    });
  }
});
