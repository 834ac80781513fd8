/**
 * Backups that restore (docs/operations.md, "Backups and restore"): every
 * facility filled, backed up, wiped, restored with the key, and found again
 * by a new server, row for row and secret value for secret value. On PGlite
 * through `backup` / `restore`; on PostgreSQL through the documented
 * `pg_dump -Fc` / `pg_restore`.
 */
import { execFile } from "node:child_process";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import pg from "pg";
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { AdminService } from "../../gen/platform/admin/v1/admin_pb.js";
import { openDatabase } from "../../src/core/database/index.ts";
import { backend, createTestDatabase, type TestDatabase } from "../support/harness.ts";
import { cleanEnv, nodeBinary, startServiceProcess, type ServiceProcess } from "../support/service-process.ts";

const run = promisify(execFile);
/** Each step starts processes (the CLI, the server), several seconds each on a busy machine. */
const STEP_TIMEOUT_MS = 180_000;
const root = path.resolve(import.meta.dirname, "../..");

type Outcome = { code: number; stdout: string; stderr: string };
const cli = (args: string[], env: NodeJS.ProcessEnv): Promise<Outcome> =>
  new Promise((resolve) => {
    const child = execFile(nodeBinary, ["src/cli.ts", ...args], { cwd: root, env }, (err, stdout, stderr) =>
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
    child.stdin!.end();
  });

async function stop(server: ServiceProcess): Promise<void> {
  server.child.kill("SIGTERM");
  expect(await server.exited).toBe(0);
}

function adminClient(url: string, token: string): Client<typeof AdminService> {
  return createClient(
    AdminService,
    createConnectTransport({
      baseUrl: url,
      httpVersion: "1.1",
      interceptors: [(next) => (req) => (req.header.set("authorization", `Bearer ${token}`), next(req))],
    }),
  );
}

/** A REST call as an app makes it; the parsed JSON (null for no body) and the status. */
// Answers of several shapes, read field by field as the docs describe them.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;

async function call(
  url: string,
  token: string,
  method: string,
  pathname: string,
  body?: unknown,
): Promise<{ status: number; json: Json }> {
  const res = await fetch(url + pathname, {
    method,
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : null };
}

async function ok(url: string, token: string, method: string, pathname: string, body?: unknown): Promise<Json> {
  const res = await call(url, token, method, pathname, body);
  expect(res.status, `${method} ${pathname}: ${JSON.stringify(res.json)}`).toBe(200);
  return res.json;
}

const SECRET_VALUES = {
  STRIPE_KEY: "sk_live_ünïcødé_✓_123",
  DB_PASSWORD: "line one\nline two\n  indented",
};

/** What was made before the backup, to find again after the restore. */
interface Filled {
  shopToken: string;
  blogToken: string;
  leasedReceipt: string;
  linkUrl: string;
  waiting: unknown[];
  usedDays: string[];
}

/** The shop's days with any use (counted per UTC day, so compared as days, whatever the clock says now). */
async function usedDays(admin: Client<typeof AdminService>): Promise<string[]> {
  const { days } = await admin.getUsageHistory({ appId: "shop", days: 3 });
  return days
    .filter((d) => d.events + d.mail + d.fastTokens > 0n)
    .map((d) => `${d.day}: events ${d.events}, mail ${d.mail}, fast ${d.fastTokens}`);
}

/** Something in every facility: apps and tokens, secrets and a link, analytics, mail, inference, queues (leased, waiting, delayed, a dead letter), audit. */
async function fill(url: string, adminToken: string): Promise<Filled> {
  const admin = adminClient(url, adminToken);
  await admin.createApp({ name: "shop" });
  await admin.createApp({ name: "blog" });
  const shopToken = (await admin.issueToken({ appId: "shop", label: "prod" })).token;
  const blogToken = (await admin.issueToken({ appId: "blog" })).token;
  await admin.updateApp({ appId: "shop", mailFrom: "shop@apps.example.com" });
  await admin.addSecretNames({ appId: "shop", names: ["STRIPE_KEY", "DB_PASSWORD", "LINKED"] });
  for (const [name, value] of Object.entries(SECRET_VALUES)) await admin.setSecret({ appId: "shop", name, value });
  const link = await ok(url, shopToken, "POST", "/v1/secrets/LINKED/link");

  await ok(url, shopToken, "POST", "/v1/analytics/types", { name: "signup", properties: { plan: "string" } });
  await ok(url, shopToken, "POST", "/v1/analytics/events", {
    events: [
      { type: "signup", properties: { plan: "pro" } },
      { type: "signup", properties: { plan: "pro" } },
      { type: "signup", properties: { plan: "free" } },
    ],
  });
  await ok(url, shopToken, "POST", "/v1/mail/send", { to: "ada@example.com", subject: "Hello", text: "Welcome!" });
  await ok(url, shopToken, "POST", "/v1/inference/generate", { prompt: "Say hello" });

  const waiting = [{ job: 1 }, { job: 2, note: "ü" }];
  await ok(url, shopToken, "POST", "/v1/queues/jobs", { payload: { job: 0 } });
  for (const payload of waiting) await ok(url, shopToken, "POST", "/v1/queues/jobs", { payload });
  const leased = await ok(url, shopToken, "POST", "/v1/queues/jobs/consume", { waitSeconds: 0, leaseSeconds: 3600 });
  expect(leased.message.payload).toEqual({ job: 0 });
  await ok(url, shopToken, "POST", "/v1/queues/later", { payload: "delayed", delaySeconds: 3600 });
  await ok(url, shopToken, "PUT", "/v1/queues/flaky/policy", { maxDeliveries: 1 });
  await ok(url, shopToken, "POST", "/v1/queues/flaky", { payload: "doomed" });
  const doomed = await ok(url, shopToken, "POST", "/v1/queues/flaky/consume", { waitSeconds: 0 });
  await ok(url, shopToken, "POST", "/v1/queues/_nack", { receipt: doomed.message.receipt });
  // The next claim finds it at its last delivery and moves it to the dead letters.
  expect((await ok(url, shopToken, "POST", "/v1/queues/flaky/consume", { waitSeconds: 0 })).message).toBeNull();
  expect((await admin.listDeadLetters({ appId: "shop", queue: "flaky" })).deadLetters).toHaveLength(1);
  await ok(url, blogToken, "POST", "/v1/queues/posts", { payload: { post: "draft" } });
  const days = await usedDays(admin);
  expect(days.join()).toMatch(/events 3, mail 1, fast [1-9]/);
  return {
    shopToken,
    blogToken,
    leasedReceipt: leased.message.receipt as string,
    linkUrl: link.url as string,
    waiting,
    usedDays: days,
  };
}

/** Every row of every table, in a stable order: what "every row found again" compares. */
async function snapshot(database: TestDatabase): Promise<Record<string, string[]>> {
  const opened = await openDatabase({ databaseUrl: database.url, dataDir: database.dataDir, poolSize: 1 });
  try {
    const { rows: tables } = await sql<{ table_name: string }>`
      SELECT table_name FROM information_schema.tables
      WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY table_name`.execute(opened.db);
    const out: Record<string, string[]> = {};
    for (const { table_name } of tables) {
      const { rows } = await sql<Record<string, unknown>>`SELECT * FROM ${sql.table(table_name)}`.execute(opened.db);
      out[table_name] = rows.map((r) => JSON.stringify(r)).sort();
    }
    return out;
  } finally {
    await opened.close();
  }
}

/** What a new server on the restored database must answer: every facility's rows and every secret value. */
async function findEverything(url: string, adminToken: string, filled: Filled): Promise<void> {
  const { shopToken, blogToken } = filled;
  for (const [name, value] of Object.entries(SECRET_VALUES))
    expect((await ok(url, shopToken, "GET", `/v1/secrets/${name}`)).value).toBe(value);
  // The outstanding link still sets its secret, once.
  const link = new URL(filled.linkUrl);
  const set = await fetch(url + link.pathname, {
    method: "PUT",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ value: "set through the restored link" }),
  });
  expect(set.status).toBe(200);
  expect((await ok(url, shopToken, "GET", "/v1/secrets/LINKED")).value).toBe("set through the restored link");

  const queues = (await ok(url, shopToken, "GET", "/v1/queues")).queues as {
    name: string;
    depth: number;
    inFlight: number;
    deadLetters: number;
  }[];
  const byName = Object.fromEntries(queues.map((q) => [q.name, q]));
  expect(byName.jobs).toMatchObject({ depth: 2, inFlight: 1 });
  expect(byName.flaky).toMatchObject({ depth: 0, inFlight: 0, deadLetters: 1 });
  expect(byName.later).toMatchObject({ inFlight: 0 });
  // The leased message is still leased under its receipt (the lease had an hour to run).
  expect(await ok(url, shopToken, "POST", "/v1/queues/_ack", { receipt: filled.leasedReceipt })).toEqual({
    acked: true,
  });
  const got: unknown[] = [];
  for (let i = 0; i < filled.waiting.length; i++) {
    const { message } = await ok(url, shopToken, "POST", "/v1/queues/jobs/consume", { waitSeconds: 0 });
    got.push(message.payload);
  }
  expect(got).toEqual(filled.waiting);
  // The delayed message is still delayed; the other app's message is its own.
  expect((await ok(url, shopToken, "POST", "/v1/queues/later/consume", { waitSeconds: 0 })).message).toBeNull();
  const post = await ok(url, blogToken, "POST", "/v1/queues/posts/consume", { waitSeconds: 0 });
  expect(post.message.payload).toEqual({ post: "draft" });

  const counts = await ok(url, shopToken, "POST", "/v1/analytics/query", {
    type: "signup",
    since: new Date(Date.now() - 2 * 86_400_000).toISOString(),
    groupBy: "plan",
  });
  const byPlan: Record<string, number> = {};
  for (const b of counts.buckets as { group: string; count: number }[])
    byPlan[b.group] = (byPlan[b.group] ?? 0) + b.count;
  expect(byPlan).toEqual({ pro: 2, free: 1 });

  const admin = adminClient(url, adminToken);
  const mails = (await admin.listMail({ appId: "shop" })).mails;
  expect(mails.map((m) => m.subject)).toEqual(["Hello"]);
  expect(await usedDays(admin)).toEqual(filled.usedDays);
  const tokens = (await admin.listTokens({ appId: "shop" })).tokens;
  expect(tokens.map((t) => t.label)).toEqual(["prod"]);
  const actions = (await admin.listAuditEntries({ pageSize: 100 })).entries.map((e) => e.action);
  expect(actions).toEqual(expect.arrayContaining(["app.create", "token.issue", "secret.set"]));
}

/** The rows a restore itself adds or changes: its own audit entry and, with a new admin token, the token's hash. */
function withoutRestoreChanges(rows: Record<string, string[]>): Record<string, string[]> {
  return {
    ...rows,
    audit_log: rows.audit_log.filter((r) => !r.includes('"database.restore"')),
    platform_settings: rows.platform_settings.filter((r) => !r.includes('"admin_token_sha256"')),
  };
}

describe.runIf(backend === "pglite")("backup and restore of DATA_DIR (PGlite)", () => {
  // One story in steps, each with its own time: fill, back up, lose DATA_DIR, restore, find everything.
  let dir: string;
  let dataDir: string;
  let env: NodeJS.ProcessEnv;
  let server: ServiceProcess | undefined;
  let database: TestDatabase;
  let filled: Filled;
  let before: Record<string, string[]>;
  let archive: string;
  let keyFile: string;
  beforeAll(async () => {
    dir = await fs.mkdtemp(path.join(os.tmpdir(), "pb-backup-"));
    dataDir = path.join(dir, "data");
    archive = path.join(dir, "backup.tar.gz");
    keyFile = path.join(dir, "kept-secrets-key");
    // As the embedded default runs: the key and the admin token generated into DATA_DIR.
    env = cleanEnv({ DATA_DIR: dataDir, PORT: "0" });
  });
  afterAll(async () => {
    if (server && server.child.exitCode === null) await stop(server);
    await fs.rm(dir, { recursive: true, force: true });
  });

  it(
    "backup is refused in one line while the server holds DATA_DIR",
    async () => {
      server = await startServiceProcess(env);
      const adminToken = (await fs.readFile(path.join(dataDir, "admin-token"), "utf8")).trim();
      database = { url: undefined, dataDir, adminToken, secretsKey: "", drop: async () => {} };
      filled = await fill(server.url, adminToken);

      const busy = await cli(["backup", archive], env);
      expect(busy.code).toBe(1);
      expect(busy.stderr.trim().split("\n")).toHaveLength(1);
      expect(busy.stderr).toMatch(/held by a running server \(pid \d+\): stop it, run backup, then start it again/);
      await expect(fs.access(archive)).rejects.toThrow();
      await stop(server);
    },
    STEP_TIMEOUT_MS,
  );

  it(
    "backup writes the database and says the key and the admin token are not in it",
    async () => {
      before = await snapshot(database);
      const backedUp = await cli(["backup", archive], env);
      expect(backedUp.stderr).toBe("");
      expect(backedUp.code).toBe(0);
      expect(backedUp.stdout).toMatch(/NOT in the archive: the secrets key and the admin token/);
      expect((await fs.stat(archive)).mode & 0o777).toBe(0o600);
      const { stdout: listing } = await run("tar", ["-tzf", archive]);
      expect(listing.split("\n")[0]).toBe("backup.json");
      expect(listing).not.toMatch(/secrets-key|admin-token/);
      // An existing backup is never replaced.
      expect((await cli(["backup", archive], env)).stderr).toMatch(/exists: give the backup a new name/);

      // The key is kept apart from the archive, as the output says; then DATA_DIR is lost.
      await fs.copyFile(path.join(dataDir, "secrets-key"), keyFile);
      await fs.rm(dataDir, { recursive: true });
    },
    STEP_TIMEOUT_MS,
  );

  it(
    "restore without the key, or with another one, is refused in one line and writes nothing",
    async () => {
      const wrongKey = path.join(dir, "wrong-key");
      await fs.writeFile(wrongKey, Buffer.alloc(32, 7).toString("base64"));
      for (const args of [[], ["--key-file", wrongKey]]) {
        const refused = await cli(["restore", archive, ...args], env);
        expect(refused.code).toBe(1);
        expect(refused.stderr.trim().split("\n")).toHaveLength(1);
        expect(refused.stderr).toMatch(/the archive's secrets need key id [0-9a-f]{16} and .*nothing was restored/);
        await expect(fs.access(dataDir)).rejects.toThrow();
      }
    },
    STEP_TIMEOUT_MS,
  );

  it(
    "restore with the key brings back every row; over a database only with --force",
    async () => {
      const restored = await cli(["restore", archive, "--key-file", keyFile], env);
      expect(restored.stderr).toBe("");
      expect(restored.code).toBe(0);
      expect(restored.stdout).toMatch(/admin token: .* \(generated now\) is now this database's/);
      expect(await fs.readFile(path.join(dataDir, "secrets-key"), "utf8")).toBe(await fs.readFile(keyFile, "utf8"));
      expect(withoutRestoreChanges(await snapshot(database))).toEqual(withoutRestoreChanges(before));

      const again = await cli(["restore", archive, "--key-file", keyFile], env);
      expect(again.code).toBe(1);
      expect(again.stderr).toMatch(/holds a database already: restore into an empty DATA_DIR, or pass --force/);
      // With --force it replaces it, keeping DATA_DIR's key and admin token files (the same key: accepted).
      const forced = await cli(["restore", archive, "--force"], env);
      expect(forced.stderr).toBe("");
      expect(forced.stdout).toMatch(/secrets key: id [0-9a-f]{16}, already in/);
      expect((await fs.readdir(dataDir)).sort()).toEqual(["admin-token", "pg", "secrets-key"]);
    },
    STEP_TIMEOUT_MS,
  );

  it(
    "a server on the restored DATA_DIR finds every row and every secret value",
    async () => {
      server = await startServiceProcess(env);
      const newToken = (await fs.readFile(path.join(dataDir, "admin-token"), "utf8")).trim();
      expect(newToken).not.toBe(database.adminToken);
      await findEverything(server.url, newToken, filled);
      // Nor is a restore run under a running server.
      const busy = await cli(["restore", archive, "--force"], env);
      expect(busy.code).toBe(1);
      expect(busy.stderr).toMatch(/^error: restore: DATA_DIR .* is held by a running server \(pid \d+\)/);
      const restoreEntries = await adminClient(server.url, newToken).listAuditEntries({ action: "database.restore" });
      // The forced restore's entry only: the first restore's was in the database it replaced.
      expect(restoreEntries.entries.map((e) => e.detail)).toEqual([
        expect.objectContaining({ replacedDatabase: true }),
      ]);
    },
    STEP_TIMEOUT_MS,
  );
});

describe.runIf(backend === "postgres")("backup and restore of PostgreSQL (pg_dump -Fc, pg_restore)", () => {
  let database: TestDatabase;
  let dir: string;
  let server: ServiceProcess | undefined;
  beforeAll(async () => {
    database = await createTestDatabase();
    dir = await fs.mkdtemp(path.join(os.tmpdir(), "pb-pgdump-"));
  });
  afterAll(async () => {
    if (server && server.child.exitCode === null) await stop(server);
    await database?.drop();
    await fs.rm(dir, { recursive: true, force: true });
  });

  it(
    "the documented procedure brings back every row and every secret value",
    async () => {
      const env = cleanEnv({
        DATABASE_URL: database.url!,
        DATA_DIR: database.dataDir,
        ADMIN_TOKEN: database.adminToken,
        SECRETS_KEY: database.secretsKey,
        PORT: "0",
      });
      // backup and restore are for the embedded database: on PostgreSQL they say what to use instead.
      const refused = await cli(["backup", path.join(dir, "x.tar.gz")], env);
      expect(refused.code).toBe(1);
      expect(refused.stderr.trim()).toMatch(/^error: backup: DATABASE_URL is set: back up PostgreSQL with pg_dump -Fc/);

      server = await startServiceProcess(env);
      const filled = await fill(server.url, database.adminToken);
      await stop(server);
      const before = await snapshot(database);

      const dump = path.join(dir, "platform.dump");
      await run("pg_dump", ["--format=custom", "--file", dump, database.url!]);
      // Wiped: the database dropped and made anew, empty.
      const name = new URL(database.url!).pathname.slice(1);
      const admin = new pg.Client({ connectionString: process.env.DATABASE_URL });
      await admin.connect();
      await admin.query(`DROP DATABASE ${name} WITH (FORCE)`);
      await admin.query(`CREATE DATABASE ${name}`);
      await admin.end();
      await run("pg_restore", ["--no-owner", "--exit-on-error", "--dbname", database.url!, dump]);
      expect(await snapshot(database)).toEqual(before);

      server = await startServiceProcess(env);
      await findEverything(server.url, database.adminToken, filled);
    },
    STEP_TIMEOUT_MS,
  );
});

describe("restore refuses what it cannot restore, before touching DATA_DIR", () => {
  let dir: string;
  beforeAll(async () => {
    dir = await fs.mkdtemp(path.join(os.tmpdir(), "pb-restore-refusals-"));
  });
  afterAll(() => fs.rm(dir, { recursive: true, force: true }));

  it(
    "a file that is no backup, and a backup migrated by a newer version",
    async () => {
      const dataDir = path.join(dir, "data");
      const env = cleanEnv({ DATA_DIR: dataDir });
      const notBackup = path.join(dir, "notes.txt");
      await fs.writeFile(notBackup, "not an archive");
      const newer = path.join(dir, "newer.tar.gz");
      await fs.mkdir(path.join(dir, "src/pg"), { recursive: true });
      await fs.writeFile(
        path.join(dir, "src/backup.json"),
        JSON.stringify({
          format: "platform-batteries-backup",
          formatVersion: 1,
          migrations: ["0001-foundation", "9999-from-the-future"],
        }),
      );
      await run("tar", ["-czf", newer, "-C", path.join(dir, "src"), "backup.json", "pg"]);

      const refusals = [
        [notBackup, /^error: restore: .*notes\.txt is not a backup made by `backup`/],
        [newer, /^error: restore: .*newer\.tar\.gz holds a database migrated by a newer version/],
      ] as const;
      for (const [file, message] of refusals) {
        const refused = await cli(["restore", file], env);
        expect(refused.code).toBe(1);
        expect(refused.stderr.trim().split("\n")).toHaveLength(1);
        expect(refused.stderr).toMatch(message);
      }
      await expect(fs.access(dataDir)).rejects.toThrow();
    },
    STEP_TIMEOUT_MS,
  );
});
