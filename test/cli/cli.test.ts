import { execFile } from "node:child_process";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDatabase } from "../../src/core/database/index.ts";
import { cleanEnv, nodeBinary, startServiceProcess, type ServiceProcess } from "../support/service-process.ts";

const run = promisify(execFile);
type Outcome = { code: number; stdout: string; stderr: string };
const cli = (args: string[], env: NodeJS.ProcessEnv, input?: string | Buffer): Promise<Outcome> =>
  new Promise((resolve) => {
    const child = execFile(nodeBinary, ["src/cli.ts", ...args], { env }, (err, stdout, stderr) =>
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
    child.stdin!.end(input ?? "");
  });

/** The audit log of an embedded DATA_DIR no server holds. */
async function auditEntries(dir: string) {
  const database = await openDatabase({ dataDir: dir });
  try {
    const { rows } = await sql<{
      operator_id: string;
      operator_name: string;
      action: string;
      outcome: string;
      detail: Record<string, unknown>;
    }>`SELECT operator_id, operator_name, action, outcome, detail FROM audit_log ORDER BY id`.execute(database.db);
    return rows;
  } finally {
    await database.close();
  }
}

let dataDir: string;
let server: ServiceProcess;
let env: NodeJS.ProcessEnv;

beforeAll(async () => {
  dataDir = await fs.mkdtemp(path.join(os.tmpdir(), "pb-cli-"));
  env = cleanEnv({ DATA_DIR: dataDir, PORT: "0" });
  server = await startServiceProcess(env);
  env = { ...env, PLATFORM_ADMIN_URL: server.url };
});
afterAll(async () => {
  if (server.child.exitCode === null) {
    server.child.kill("SIGTERM");
    await server.exited;
  }
  await fs.rm(dataDir, { recursive: true, force: true });
});

describe("cli output (src/cli-format.ts)", () => {
  it("prints counts and versions as numbers and never the internal $typeName", async () => {
    expect((await cli(["apps", "create", "fmt-app"], env)).code).toBe(0);
    const declared = await cli(["secrets", "declare", "fmt-app", "API_KEY"], env);
    expect(JSON.parse(declared.stdout).declaredSecrets).toEqual(["API_KEY"]);

    const set = await cli(["secrets", "set", "fmt-app", "API_KEY"], env, "s3cret\n");
    expect(set.code).toBe(0);
    const setOut = JSON.parse(set.stdout);
    expect(setOut).toMatchObject({ name: "API_KEY", version: 1 });
    expect(typeof setOut.setAt).toBe("string");
    expect(set.stdout).not.toContain("s3cret");
    // A value read as Latin-1 bytes is refused, not set with U+FFFD in place of the byte.
    const latin1 = await cli(["secrets", "set", "fmt-app", "API_KEY"], env, Buffer.from([0x70, 0xe4, 0x73, 0x73]));
    expect(latin1.code).not.toBe(0);
    expect(latin1.stderr).toContain("standard input: is not UTF-8");
    const utf8 = await cli(["secrets", "set", "fmt-app", "API_KEY"], env, "päss\n");
    expect(JSON.parse(utf8.stdout)).toMatchObject({ name: "API_KEY", version: 2 });

    const usage = JSON.parse((await cli(["usage", "fmt-app"], env)).stdout);
    expect(usage.events).toEqual({ used: 0, cap: 100000 });
    expect(usage.mail).toEqual({ used: 0, cap: 100 });

    const published = await cli(["events", "publish", "fmt-app", "deploy.done", '{"sha":"abc"}'], env);
    expect(published.code).toBe(0);
    expect(published.stdout).not.toContain("$typeName");
    expect(Object.keys(JSON.parse(published.stdout))).toEqual(["id"]);

    const list = await cli(["apps", "list"], env);
    expect(list.stdout).not.toContain("$typeName");
    expect(JSON.parse(list.stdout).apps[0].limits.eventsPerDay).toBe(100000);
    // A limit past the server's range is a usage error naming that range (the server's own, LIMIT_RANGES; it was
    // "internal: internal error" past int32, then "0 to 2147483647" where the server refused beyond 1000000000).
    const tooBig = await cli(["apps", "set", "fmt-app", "--limit", "eventsPerDay=2147483648"], env);
    expect(tooBig.code).toBe(2);
    expect(tooBig.stderr).toContain(
      "--limit eventsPerDay=2147483648: eventsPerDay must be an integer from 0 to 1000000000",
    );
  });
});

describe("cli direct database commands (src/cli.ts, src/data-dir-lock.ts)", () => {
  it("migrate and secrets rotate-key refuse while the server holds the embedded DATA_DIR, and work once it stopped", async () => {
    for (const args of [["migrate"], ["secrets", "rotate-key"]]) {
      const refused = await cli(args, env);
      expect(refused.code).not.toBe(0);
      expect(refused.stderr).toContain(`DATA_DIR ${dataDir} is in use by another process (pid ${server.child.pid}`);
      expect(refused.stdout).toBe("");
    }
    // The server is untouched by the refused commands.
    expect((await fetch(`${server.url}/health`)).status).toBe(200);

    server.child.kill("SIGTERM");
    expect(await server.exited).toBe(0);
    expect((await cli(["migrate"], env)).stdout).toBe(
      `migrations applied to the embedded database (PGlite) in ${path.join(dataDir, "pg")} (DATABASE_URL is not set)\n`,
    );
    expect((await cli(["secrets", "rotate-key"], env)).stdout).toContain(
      "re-encrypted 0 secret value(s) under the current SECRETS_KEY",
    );
    // A change made beside the admin API still lands in the audit log, as the owner's from the CLI.
    expect(await auditEntries(dataDir)).toContainEqual({
      operator_id: "owner",
      operator_name: "owner (CLI, database access)",
      action: "secrets.rotate_key",
      outcome: "ok",
      detail: { keyId: expect.stringMatching(/^[0-9a-f]{16}$/), reencrypted: 0, alreadyCurrent: 1 },
    });
  });

  it("a lock left by a killed process is taken over at once", async () => {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), "pb-cli-stale-"));
    try {
      // A pid that is certainly not running: a child that has already exited.
      const gone = await run(nodeBinary, ["-e", "process.stdout.write(String(process.pid))"]);
      await fs.writeFile(path.join(dir, "pg.lock"), `${gone.stdout}\n`);
      const migrated = await cli(["migrate"], cleanEnv({ DATA_DIR: dir }));
      expect(migrated).toMatchObject({ code: 0, stdout: expect.stringContaining("migrations applied") });
      await expect(fs.stat(path.join(dir, "pg.lock"))).rejects.toThrow();
    } finally {
      await fs.rm(dir, { recursive: true, force: true });
    }
  });
});

describe("start-up failures (src/main.ts)", () => {
  it("an instance whose SECRETS_KEY differs from the one the database was sealed with stops with one line; admin-token adopt changes the admin token", async () => {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), "pb-cli-keys-"));
    try {
      const base = cleanEnv({ DATA_DIR: dir, PORT: "0" });
      const first = await startServiceProcess(base);
      first.child.kill("SIGTERM");
      expect(await first.exited).toBe(0);

      const otherKey = Buffer.alloc(32, 7).toString("base64");
      const refused = await run(nodeBinary, ["src/main.ts"], { env: { ...base, SECRETS_KEY: otherKey } }).catch(
        (e: Outcome) => e,
      );
      expect(refused).toMatchObject({ code: 2 });
      expect((refused as Outcome).stderr.trim().split("\n")).toEqual([
        expect.stringMatching(
          /^configuration error: SECRETS_KEY: this database's secrets are sealed under key id [0-9a-f]{16}, and this instance has key id [0-9a-f]{16}: /,
        ),
      ]);

      // A rotation run with a key the instances do not have (and without theirs among the old keys) is refused
      // before it changes anything: moving the record to that key would stop every instance from starting.
      const wrongRotation = await cli(["secrets", "rotate-key"], { ...base, SECRETS_KEY: otherKey });
      expect([wrongRotation.code, wrongRotation.stdout]).toEqual([2, ""]);
      expect(wrongRotation.stderr).toMatch(
        /^SECRETS_KEY: this database's instances use key id [0-9a-f]{16}, and this command has key id [0-9a-f]{16} without /,
      );
      const stillStarts = await startServiceProcess(base);
      stillStarts.child.kill("SIGTERM");
      expect(await stillStarts.exited).toBe(0);

      const newToken = "pba_" + "n".repeat(40);
      const wrongToken = await run(nodeBinary, ["src/main.ts"], { env: { ...base, ADMIN_TOKEN: newToken } }).catch(
        (e: Outcome) => e,
      );
      expect((wrongToken as Outcome).stderr).toMatch(
        /^configuration error: ADMIN_TOKEN: another instance on this database uses a different admin token/,
      );
      expect((await cli(["admin-token", "adopt"], { ...base, ADMIN_TOKEN: newToken })).stdout).toContain("adopted");
      const adopted = (await auditEntries(dir)).filter((e) => e.action === "admin_token.adopt");
      expect(adopted).toEqual([
        {
          operator_id: "owner",
          operator_name: "owner (CLI, database access)",
          action: "admin_token.adopt",
          outcome: "ok",
          detail: {},
        },
      ]);
      expect(JSON.stringify(adopted)).not.toContain(newToken);
      const renewed = await startServiceProcess({ ...base, ADMIN_TOKEN: newToken });
      renewed.child.kill("SIGTERM");
      expect(await renewed.exited).toBe(0);
    } finally {
      await fs.rm(dir, { recursive: true, force: true });
    }
  });

  it("an unreachable PostgreSQL is named with its cause, not as an unknown migration", async () => {
    // Not waited for (DATABASE_WAIT_SECONDS=0: one attempt); the wait itself is test/server/start-before-database.test.ts.
    const failed = await run(nodeBinary, ["src/main.ts"], {
      env: cleanEnv({
        DATA_DIR: dataDir,
        PORT: "0",
        DATABASE_URL: "postgres://postgres@127.0.0.1:1/nowhere",
        DATABASE_WAIT_SECONDS: "0",
      }),
    }).catch((e: { code: number; stderr: string }) => e);
    expect(failed).toMatchObject({ code: 1 });
    expect((failed as { stderr: string }).stderr.trim()).toBe(
      "failed to start: database: 127.0.0.1:1/nowhere not reachable within 0 s (DATABASE_WAIT_SECONDS): ECONNREFUSED",
    );
  });
});

describe("cli analytics query with the extensions", () => {
  // A server of its own: the file's server is stopped by the direct database commands above.
  let ownDir: string;
  let own: ServiceProcess;
  let ownEnv: NodeJS.ProcessEnv;
  beforeAll(async () => {
    ownDir = await fs.mkdtemp(path.join(os.tmpdir(), "pb-cli-insights-"));
    ownEnv = cleanEnv({ DATA_DIR: ownDir, PORT: "0" });
    own = await startServiceProcess(ownEnv);
    ownEnv = { ...ownEnv, PLATFORM_ADMIN_URL: own.url };
  });
  afterAll(async () => {
    if (own.child.exitCode === null) {
      own.child.kill("SIGTERM");
      await own.exited;
    }
    await fs.rm(ownDir, { recursive: true, force: true });
  });

  it("passes aggregate, of, where and two breakdowns through to the app's query", async () => {
    const created = await cli(["apps", "create", "cli-insights"], ownEnv);
    expect(created.code, created.stderr).toBe(0);
    const issued = {
      token: /pbt_[A-Za-z0-9_-]+/.exec((await cli(["tokens", "issue", "cli-insights"], ownEnv)).stdout)![0],
    };
    const call = (path: string, body: unknown) =>
      fetch(`${own.url}${path}`, {
        method: "POST",
        headers: { authorization: `Bearer ${issued.token}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      });
    expect(
      (await call("/v1/analytics/types", { name: "order", properties: { plan: "string", amount: "number" } })).status,
    ).toBe(200);
    const at = Date.now() - 60_000;
    const logged = await call("/v1/analytics/events", {
      events: [
        { type: "order", at, distinctId: "u1", properties: { plan: "pro", amount: 10 } },
        { type: "order", at, distinctId: "u1", properties: { plan: "pro", amount: 5 } },
        { type: "order", at, distinctId: "u2", properties: { plan: "free", amount: 1 } },
      ],
    });
    expect(logged.status).toBe(200);
    const since = new Date(at - 86_400_000).toISOString();
    const args = ["analytics", "query", "cli-insights", "order", "--since", since, "--interval", "month"];
    const sum = await cli([...args, "--aggregate", "sum", "--of", "amount", "--where", 'plan:eq:"pro"'], ownEnv);
    expect(sum.code, sum.stderr).toBe(0);
    expect(JSON.parse(sum.stdout)).toMatchObject({ aggregate: "sum", of: "amount", totalValue: 15 });
    const unique = await cli([...args, "--aggregate", "unique", "--group-by", "plan,amount", "--limit", "1"], ownEnv);
    expect(unique.code, unique.stderr).toBe(0);
    const out = JSON.parse(unique.stdout) as { groupByProperties: string[]; otherGroups: number; totalValue: number };
    expect(out).toMatchObject({ groupByProperties: ["plan", "amount"], otherGroups: 2, totalValue: 2 });
    const bad = await cli([...args, "--where", "plan:like:1"], ownEnv);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("--where plan:like:1: must be PROP:OP:JSON");
    const refused = await cli([...args, "--aggregate", "sum", "--of", "plan"], ownEnv);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain("of: sum needs a number property (plan is declared string)");
  });
});
