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
  it("has the defaults of DESIGN.md section 3 with no configuration at all", () => {
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
  ];

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
