/**
 * The CLI's admin commands as a real child process against the real server:
 * `secrets declare` is additive and `secrets undeclare` explicit (no value
 * dropped by a declaration), a server that does not answer is named with how
 * to start it or point at it, operators, tokens, audit and whoami, and
 * usage errors (exit 2) for unknown flags and an unconfirmed `apps delete`.
 */
import { execFile } from "node:child_process";
import net from "node:net";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { cleanEnv, nodeBinary } from "../support/service-process.ts";
import { startServer, type TestServer } from "../support/harness.ts";

// Every test spawns the CLI several times; on a busy machine a spawn takes seconds.
vi.setConfig({ testTimeout: 180_000 });

type Outcome = { code: number; stdout: string; stderr: string };
let t: TestServer;
const run = (args: string[], env: Record<string, string> = {}, input = ""): Promise<Outcome> =>
  new Promise((resolve) => {
    const child = execFile(
      nodeBinary,
      ["src/cli.ts", ...args],
      {
        env: cleanEnv({ PLATFORM_ADMIN_URL: t.url, ADMIN_TOKEN: t.adminToken, DATA_DIR: t.database.dataDir, ...env }),
      },
      (err, stdout, stderr) =>
        resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
    child.stdin!.end(input);
  });
const ok = async (...args: string[]) => {
  const out = await run(args);
  expect(out.code, out.stderr).toBe(0);
  return out.stdout;
};

beforeAll(async () => {
  t = await startServer();
});
afterAll(() => t?.close());

describe("secrets declare / undeclare", () => {
  it("declare adds names and never unsets another secret's value", async () => {
    await ok("apps", "create", "cli-names");
    await ok("secrets", "declare", "cli-names", "DB_URL");
    expect((await run(["secrets", "set", "cli-names", "DB_URL"], {}, "postgres://db\n")).code).toBe(0);
    // The quick start's next step: declaring one more name.
    const declared = JSON.parse(await ok("secrets", "declare", "cli-names", "API_KEY"));
    expect(declared.declaredSecrets).toEqual(["API_KEY", "DB_URL"]);
    const secrets = JSON.parse(await ok("secrets", "list", "cli-names")).secrets;
    expect(secrets.find((s: { name: string }) => s.name === "DB_URL")).toMatchObject({ version: 1 });
  });

  it("undeclare of a set secret is refused naming it, and destroys it only with --yes", async () => {
    const refused = await run(["secrets", "undeclare", "cli-names", "DB_URL", "API_KEY"]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain("failed_precondition");
    expect(refused.stderr).toContain("DB_URL");
    expect(JSON.parse(await ok("apps", "get", "cli-names")).declaredSecrets).toEqual(["API_KEY", "DB_URL"]);
    const done = await run(["secrets", "undeclare", "cli-names", "DB_URL", "API_KEY", "--yes"]);
    expect(done.code).toBe(0);
    expect(done.stderr).toContain("destroyed the value(s) of DB_URL");
    expect(JSON.parse(done.stdout)).toMatchObject({ app: { declaredSecrets: [] }, destroyedValues: ["DB_URL"] });
  });

  it("undeclare --expect-version destroys only the version the operator saw", async () => {
    await ok("apps", "create", "cli-seen");
    await ok("secrets", "declare", "cli-seen", "TOKEN");
    expect((await run(["secrets", "set", "cli-seen", "TOKEN"], {}, "one\n")).code).toBe(0);
    // Seen at version 1; set again by someone else before the undeclare.
    expect((await run(["secrets", "set", "cli-seen", "TOKEN"], {}, "two\n")).code).toBe(0);
    const refused = await run(["secrets", "undeclare", "cli-seen", "TOKEN", "--yes", "--expect-version", "TOKEN=1"]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain("conflict");
    expect(refused.stderr).toContain("TOKEN");
    const kept = JSON.parse(await ok("secrets", "list", "cli-seen")).secrets;
    expect(kept).toEqual([expect.objectContaining({ name: "TOKEN", version: 2 })]);
    const bad = await run(["secrets", "undeclare", "cli-seen", "TOKEN", "--expect-version", "OTHER=1"]);
    expect([bad.code, bad.stderr]).toEqual([
      2,
      expect.stringContaining("--expect-version OTHER=1: must be SECRET=VERSION"),
    ]);
    const done = await run(["secrets", "undeclare", "cli-seen", "TOKEN", "--yes", "--expect-version", "TOKEN=2"]);
    expect(done.code).toBe(0);
    expect(JSON.parse(done.stdout)).toMatchObject({ destroyedValues: ["TOKEN"] });
  });
});

describe("a server that does not answer", () => {
  it("is named, with how to start it or point the CLI at it, and the database is not blamed", async () => {
    const port = await new Promise<number>((resolve) => {
      const probe = net.createServer().listen(0, "127.0.0.1", () => {
        const { port } = probe.address() as net.AddressInfo;
        probe.close(() => resolve(port));
      });
    });
    const out = await run(["apps", "list"], { PLATFORM_ADMIN_URL: `http://127.0.0.1:${port}` });
    expect(out.code).toBe(1);
    expect(out.stderr).toContain(`no server answers at http://127.0.0.1:${port} (ECONNREFUSED)`);
    expect(out.stderr).toContain("npm start");
    expect(out.stderr).toContain("PLATFORM_ADMIN_URL");
    expect(out.stderr).not.toContain("database");
  });
});

describe("operators, audit and whoami", () => {
  it("creates a viewer whose token reads but cannot write, and the audit log shows who did what", async () => {
    expect(JSON.parse(await ok("whoami")).operator).toMatchObject({ id: "owner", role: "admin" });
    const created = await run(["operators", "create", "cli-viewer", "--role", "viewer"]);
    expect(created.code, created.stderr).toBe(0);
    const token = created.stdout.trim();
    expect(token).toMatch(/^pbo_/);
    const asViewer = (...args: string[]) => run(args, { ADMIN_TOKEN: token });
    const me = JSON.parse((await asViewer("whoami")).stdout).operator;
    expect(me).toMatchObject({ name: "cli-viewer", role: "viewer" });
    expect((await asViewer("apps", "list")).code).toBe(0);
    const write = await asViewer("apps", "create", "by-viewer");
    expect(write.code).toBe(1);
    expect(write.stderr).toContain("permission_denied");
  });

  it("lists operators, issues and revokes their tokens, changes a role, and filters the audit log", async () => {
    const created = await run(["operators", "create", "cli-second", "--role", "viewer"]);
    expect(created.code, created.stderr).toBe(0);
    const token = created.stdout.trim();
    const asViewer = (...args: string[]) => run(args, { ADMIN_TOKEN: token });
    const me = JSON.parse((await asViewer("whoami")).stdout).operator;
    expect((await asViewer("apps", "create", "by-second")).code).toBe(1);
    const list = JSON.parse(await ok("operators", "list")).operators;
    expect(list.map((o: { name: string }) => o.name)).toEqual(expect.arrayContaining(["cli-viewer", "cli-second"]));
    expect((await run(["operators", "tokens", "issue", me.id, "--label", "laptop"])).stdout).toMatch(/^pbo_/);
    const tokens = JSON.parse(await ok("operators", "tokens", "list", me.id)).tokens;
    expect(tokens.map((x: { label: string }) => x.label).sort()).toEqual(["", "laptop"]);
    await ok("operators", "tokens", "revoke", tokens.find((x: { label: string }) => x.label === "laptop").id);
    await ok("operators", "update", me.id, "--role", "admin");
    expect((await asViewer("apps", "create", "by-promoted")).code).toBe(0);

    const audit = JSON.parse(await ok("audit", "list", "--operator", me.id)).entries;
    expect(audit.map((e: { action: string; outcome: string }) => `${e.action}:${e.outcome}`)).toEqual([
      "app.create:ok",
      "app.create:denied",
    ]);
    const byAction = JSON.parse(await ok("audit", "list", "--action", "operator.create", "--since", "2020-01-01"));
    expect(byAction.entries[0]).toMatchObject({ operatorName: "owner", outcome: "ok" });
    const unconfirmed = await run(["operators", "delete", me.id]);
    expect([unconfirmed.code, unconfirmed.stderr]).toEqual([
      2,
      expect.stringContaining("operators delete: not confirmed (type the operator's id, or pass --yes)"),
    ]);
    expect((await asViewer("whoami")).code).toBe(0);
    await ok("operators", "delete", me.id, "--yes");
    expect((await asViewer("whoami")).stderr).toContain("unauthenticated");
  });
});

describe("output", () => {
  it("reads as people read it (short enum names, numbers), and --json is the canonical form for scripts", async () => {
    await ok("apps", "create", "cli-output");
    const readable = JSON.parse(await ok("apps", "get", "cli-output"));
    expect(readable).toMatchObject({ status: "running", revision: 1 });
    const canonical = JSON.parse(await ok("apps", "get", "cli-output", "--json"));
    expect(canonical).toMatchObject({ status: "APP_STATUS_RUNNING", revision: "1" });
    // Common options may come first.
    expect(JSON.parse(await ok("--url", t.url, "apps", "get", "cli-output")).name).toBe("cli-output");
  });
});

describe("queues message", () => {
  it("says where a message put on a queue is, and names an unknown id not found", async () => {
    await ok("apps", "create", "cli-message");
    const put = JSON.parse(await ok("queues", "put", "cli-message", "jobs", '{"n":1}')) as { id: string };
    const state = JSON.parse(await ok("queues", "message", "cli-message", "jobs", put.id));
    expect(state.message).toMatchObject({ id: put.id, queue: "jobs", status: "waiting", deliveries: 0 });
    const missing = await run(["queues", "message", "cli-message", "jobs", "00000000-0000-4000-8000-000000000000"]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain("not_found");
  });
});

describe("usage errors", () => {
  it("an unknown flag is a usage error (exit 2), and the usage names --url", async () => {
    const out = await run(["apps", "list", "--frobnicate"]);
    expect(out.code).toBe(2);
    expect(out.stderr).toContain("--frobnicate");
    expect(out.stderr).toContain("usage: npm run cli -- apps list");
    expect(out.stderr).not.toContain("TypeError");
    // An option of another command is unknown here: --limit is a page size in mail list, not NAME=VALUE.
    expect((await run(["apps", "get", "x", "--limit", "3"])).code).toBe(2);
    expect(await ok("--help")).toContain("--url");
  });

  it("apps delete asks first: without a terminal and without --yes nothing is deleted", async () => {
    await ok("apps", "create", "cli-doomed");
    const refused = await run(["apps", "delete", "cli-doomed"]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain("--yes");
    expect((await run(["apps", "get", "cli-doomed"])).code).toBe(0);
    expect(await ok("apps", "delete", "cli-doomed", "--yes")).toContain("deleted cli-doomed");
    expect((await run(["apps", "get", "cli-doomed"])).code).toBe(1);
  });
});
