/**
 * The CLI as a person meets it, as a real child process against the real
 * server: a mistyped command or flag gets "did you mean", a limit is checked
 * against the server's own range (LIMIT_RANGES, one source: the server's
 * answers to the same values are checked here too), enum values read as
 * people read them (`string`, not `PROPERTY_KIND_STRING`, also inside maps),
 * a terminal gets tables (`--output table|json`; a pipe gets JSON), and
 * `migrate` names the database it migrated, never a password.
 */
import { execFile } from "node:child_process";
import path from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { LIMIT_NAMES, LIMIT_RANGES } from "../../src/core/apps/apps.ts";
import { databaseName } from "../../src/cli.ts";
import { cleanEnv, nodeBinary } from "../support/service-process.ts";
import { startServer, type TestServer } from "../support/harness.ts";

// Every test spawns the CLI several times; on a busy machine a spawn takes seconds.
vi.setConfig({ testTimeout: 180_000 });

type Outcome = { code: number; stdout: string; stderr: string };
let t: TestServer;
const cliEnv = (env: Record<string, string> = {}) =>
  cleanEnv({ PLATFORM_ADMIN_URL: t.url, ADMIN_TOKEN: t.adminToken, DATA_DIR: t.database.dataDir, ...env });
const run = (args: string[], env: Record<string, string> = {}): Promise<Outcome> =>
  new Promise((resolve) => {
    const child = execFile(nodeBinary, ["src/cli.ts", ...args], { env: cliEnv(env) }, (err, stdout, stderr) =>
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
    child.stdin!.end("");
  });
const ok = async (...args: string[]) => {
  const out = await run(args);
  expect(out.code, out.stderr).toBe(0);
  return out.stdout;
};
/** The CLI with its standard output on a real terminal (util-linux `script` gives it a pseudo-terminal). */
const onTerminal = (args: string[]): Promise<Outcome> =>
  new Promise((resolve) => {
    const command = [nodeBinary, "src/cli.ts", ...args].map((a) => `'${a.replaceAll("'", "'\\''")}'`).join(" ");
    const child = execFile(
      "script",
      ["-qec", command, "/dev/null"],
      { env: { ...cliEnv(), COLUMNS: "200" } },
      (err, stdout, stderr) =>
        resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
    child.stdin!.end("");
  });

beforeAll(async () => {
  t = await startServer();
});
afterAll(async () => {
  await t?.close();
});

describe("did you mean", () => {
  it("names the command or the flag meant, with exit 2 and without the whole usage", async () => {
    const command = await run(["apps", "lsit"]);
    expect(command.code).toBe(2);
    expect(command.stderr).toContain("unknown command: apps lsit");
    expect(command.stderr).toContain("did you mean: npm run cli -- apps list?");
    expect(command.stderr).not.toContain("tokens issue"); // not the whole list of commands
    expect(command.stderr).toContain("apps commands: apps create, apps list, apps get");
    const group = await run(["apps"]);
    expect(group.code).toBe(2);
    expect(group.stderr).toContain("apps commands: apps create, apps list");
    expect((await run(["operators", "tokens", "isue", "x"])).stderr).toContain("operators tokens issue?");
    const nothingClose = await run(["frobnicate"]);
    expect(nothingClose.code).toBe(2);
    expect(nothingClose.stderr).not.toContain("did you mean");

    const option = await run(["apps", "list", "--filtr", "x"]);
    expect(option.code).toBe(2);
    expect(option.stderr).toContain("unknown option --filtr (did you mean --filter?)");
    const limit = await run(["apps", "set", "x", "--limit", "evntsPerDay=5"]);
    expect(limit.code).toBe(2);
    expect(limit.stderr).toContain("(did you mean eventsPerDay?)");
  });
});

describe("limits: the server's ranges, checked by the CLI", () => {
  it("the server takes each limit's maximum and refuses one more, as LIMIT_RANGES says", async () => {
    const { app } = await t.admin.createApp({ name: "ranges" });
    for (const name of LIMIT_NAMES) {
      const { min, max } = LIMIT_RANGES[name];
      const set = await t.admin.updateApp({ appId: app!.id, limits: { [name]: max } });
      expect(set.app?.limits?.[name], name).toBe(max);
      for (const refused of [max + 1, ...(min > 0 ? [min - 1] : [])]) {
        const err = await t.admin.updateApp({ appId: app!.id, limits: { [name]: refused } }).then(
          () => undefined,
          (e: unknown) => ConnectError.from(e),
        );
        expect(err?.code, `${name}=${refused}`).toBe(Code.InvalidArgument);
      }
    }
  });

  it("the CLI refuses beyond the server's range before calling, and passes the maximum on", async () => {
    await ok("apps", "create", "cli-ranges");
    const over = await run(["apps", "set", "cli-ranges", "--limit", "eventsPerDay=1000000001"]);
    expect(over.code).toBe(2);
    expect(over.stderr).toContain(
      "--limit eventsPerDay=1000000001: eventsPerDay must be an integer from 0 to 1000000000",
    );
    const zeroLease = await run(["apps", "set", "cli-ranges", "--limit", "leaseSeconds=0"]);
    expect(zeroLease.code).toBe(2);
    expect(zeroLease.stderr).toContain("leaseSeconds must be an integer from 1 to 43200");
    const max = JSON.parse(await ok("apps", "set", "cli-ranges", "--limit", "eventsPerDay=1000000000"));
    expect(max.limits.eventsPerDay).toBe(1_000_000_000);
  });
});

describe("readable values and tables", () => {
  it("analytics types prints the property kinds as people read them; --json keeps the canonical names", async () => {
    await ok("apps", "create", "cli-kinds");
    const { token } = await t.admin.issueToken({ appId: "cli-kinds" });
    const res = await t.request("POST", "/v1/analytics/types", {
      token,
      body: { name: "signup", properties: { plan: "string", seats: "number", trial: "boolean" } },
    });
    expect(res.status).toBe(200);
    const readable = JSON.parse(await ok("analytics", "types", "cli-kinds"));
    expect(readable.types[0].properties).toEqual({ plan: "string", seats: "number", trial: "boolean" });
    const canonical = JSON.parse(await ok("analytics", "types", "cli-kinds", "--json"));
    expect(canonical.types[0].properties.plan).toBe("PROPERTY_KIND_STRING");
    const table = await ok("analytics", "types", "cli-kinds", "--output", "table");
    expect(table).toMatch(/^NAME\s+PROPERTIES/m);
    expect(table).toContain("plan=string, seats=number, trial=boolean");
    expect(table).not.toContain("PROPERTY_KIND");
  });

  it("a terminal gets a table, a pipe JSON; --output chooses either", async () => {
    await ok("apps", "create", "cli-table-a");
    await ok("apps", "create", "cli-table-b");
    // Standard output is a pipe here: JSON, as before.
    expect(JSON.parse(await ok("apps", "list")).apps.length).toBeGreaterThanOrEqual(2);
    const table = await ok("apps", "list", "--output", "table");
    const lines = table.trimEnd().split("\n");
    expect(lines[0]).toMatch(/^ID\s+NAME\s+STATUS\s+MAIL FROM/);
    const row = lines.find((l) => l.includes("cli-table-a"))!;
    expect(row).toMatch(/\bcli-table-a\s+running\b/);
    // Columns line up: every row's name starts where the heading NAME does.
    expect(row.indexOf("cli-table-a")).toBe(lines[0].indexOf("NAME"));
    expect(table).toContain("limits: see --output json");
    expect(JSON.parse(await ok("apps", "list", "--output", "json")).apps.length).toBeGreaterThanOrEqual(2);
    const bad = await run(["apps", "list", "--output", "tabel"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("--output: must be table or json (did you mean table?)");

    // One app: a line per field, nested limits by their path.
    const single = await ok("apps", "get", "cli-table-a", "--output", "table");
    expect(single).toMatch(/^NAME\s+cli-table-a$/m);
    expect(single).toMatch(/^LIMITS\.EVENTS PER DAY\s+100000$/m);

    // On a real terminal the table is the default.
    const terminal = await onTerminal(["apps", "list"]);
    expect(terminal.code, terminal.stderr).toBe(0);
    expect(terminal.stdout).toMatch(/^ID\s+NAME\s+STATUS/m);
    expect(terminal.stdout).toContain("cli-table-b");
    expect(terminal.stdout).not.toContain('"apps"');
  });

  it("control characters in a value are shown escaped in a table, never sent to the terminal", async () => {
    await ok("apps", "create", "cli-escapes");
    await t.admin.issueToken({ appId: "cli-escapes", label: "line\nbreak \u001b[31mred" });
    const table = await ok("tokens", "list", "cli-escapes", "--output", "table");
    expect(table).toContain("line\\nbreak \\u001b[31mred");
    expect(table).not.toContain("\u001b");
  });
});

describe("migrate names the database", () => {
  it("the embedded one by its directory, saying DATABASE_URL is not set; PostgreSQL by host and database only", async () => {
    expect(databaseName({ dataDir: "data" })).toBe(
      `the embedded database (PGlite) in ${path.resolve("data", "pg")} (DATABASE_URL is not set)`,
    );
    const named = databaseName({ dataDir: "data", databaseUrl: "postgres://app:s3cret-pw@db.internal:6432/platform" });
    expect(named).toBe("PostgreSQL database platform on db.internal:6432");
    expect(databaseName({ dataDir: "d", databaseUrl: "postgresql://u:pw@localhost/x%20y" })).toBe(
      "PostgreSQL database x y on localhost:5432",
    );
    expect(databaseName({ dataDir: "d", databaseUrl: "not a url, with pw" })).toBe(
      "the PostgreSQL database of DATABASE_URL",
    );
  });

  it.skipIf(!process.env.DATABASE_URL)(
    "on PostgreSQL: the CLI prints the host and database, not the password",
    async () => {
      const url = new URL(t.database.url!);
      url.password = "never-printed";
      const out = await run(["migrate"], { DATABASE_URL: url.toString() });
      expect(out.code, out.stderr).toBe(0);
      expect(out.stdout).toBe(
        `migrations applied to PostgreSQL database ${url.pathname.slice(1)} on ${url.hostname}:${url.port || "5432"}\n`,
      );
      expect(out.stdout + out.stderr).not.toContain("never-printed");
    },
  );
});
