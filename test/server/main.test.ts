import { execFile } from "node:child_process";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cleanEnv, nodeBinary, startServiceProcess } from "../support/service-process.ts";

const run = promisify(execFile);
let dataDir: string;

beforeAll(async () => {
  dataDir = await fs.mkdtemp(path.join(os.tmpdir(), "pb-main-"));
});
afterAll(() => fs.rm(dataDir, { recursive: true, force: true }));

describe("npm start (src/main.ts)", () => {
  it("a bad value stops the process with one line naming the variable", async () => {
    const result = await run(nodeBinary, ["src/main.ts"], {
      env: cleanEnv({ PORT: "eighty", DATA_DIR: dataDir }),
    }).then(
      () => ({ code: 0, stderr: "" }),
      (err: { code: number; stderr: string }) => err,
    );
    expect(result.code).toBe(2);
    expect(result.stderr.trim().split("\n")).toEqual([expect.stringMatching(/^configuration error: PORT: /)]);
  });

  it("with no configuration: embedded database, admin token generated once (in DATA_DIR, not in the log), CLI app + token work on /v1, SIGTERM exits 0", async () => {
    const env = cleanEnv({ DATA_DIR: dataDir, PORT: "0" });
    const first = await startServiceProcess(env);
    try {
      expect(first.stdout()).toContain("PGlite");
      const token = (await fs.readFile(path.join(dataDir, "admin-token"), "utf8")).trim();
      expect(token).toMatch(/^pba_/);
      // stdout is a pipe, not a terminal: every line is JSON, one says where the token is, none carries it.
      const logged = first
        .stdout()
        .trim()
        .split("\n")
        .map((line) => JSON.parse(line) as { msg: string; file?: string });
      expect(logged).toContainEqual(
        expect.objectContaining({ msg: "admin token generated", file: path.join(dataDir, "admin-token") }),
      );
      expect(first.stdout()).not.toContain(token);
      expect((await fs.stat(path.join(dataDir, "admin-token"))).mode & 0o777).toBe(0o600);
      expect((await fs.stat(path.join(dataDir, "secrets-key"))).mode & 0o777).toBe(0o600);

      const health = await fetch(`${first.url}/health`);
      expect(await health.json()).toEqual({ status: "ok" });

      const cliEnv = { ...env, PLATFORM_ADMIN_URL: first.url };
      const created = await run(nodeBinary, ["src/cli.ts", "apps", "create", "cli-app"], { env: cliEnv });
      expect(JSON.parse(created.stdout)).toMatchObject({ name: "cli-app", status: "running" });
      const issued = await run(nodeBinary, ["src/cli.ts", "tokens", "issue", "cli-app"], { env: cliEnv });
      const serviceToken = issued.stdout.trim();
      expect(serviceToken).toMatch(/^pbt_/);
      const models = await fetch(`${first.url}/v1/inference/models`, {
        headers: { authorization: `Bearer ${serviceToken}` },
      });
      expect(models.status).toBe(200);

      const stopped = await run(nodeBinary, ["src/cli.ts", "apps", "stop", "cli-app"], { env: cliEnv });
      expect(JSON.parse(stopped.stdout).status).toBe("stopped");
      const list = await run(nodeBinary, ["src/cli.ts", "apps", "list"], { env: cliEnv });
      expect(JSON.parse(list.stdout).apps.map((a: { name: string }) => a.name)).toEqual(["cli-app"]);
      const refused = await run(nodeBinary, ["src/cli.ts", "apps", "create", "Bad Name"], { env: cliEnv }).catch(
        (e: { code: number; stderr: string }) => e,
      );
      expect(refused).toMatchObject({ code: 1, stderr: expect.stringContaining("invalid_argument: name:") });
    } finally {
      first.child.kill("SIGTERM");
    }
    expect(await first.exited).toBe(0);

    const second = await startServiceProcess(env);
    try {
      expect(second.stdout()).not.toContain("admin token generated");
      const cliEnv = { ...env, PLATFORM_ADMIN_URL: second.url };
      const got = await run(nodeBinary, ["src/cli.ts", "apps", "get", "cli-app"], { env: cliEnv });
      expect(JSON.parse(got.stdout).name).toBe("cli-app");
    } finally {
      second.child.kill("SIGTERM");
    }
    expect(await second.exited).toBe(0);
  });

  it("npm run migrate applies the migrations to the configured database", async () => {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), "pb-migrate-"));
    const { stdout } = await run(nodeBinary, ["src/cli.ts", "migrate"], { env: cleanEnv({ DATA_DIR: dir }) });
    expect(stdout).toContain("migrations applied");
    await fs.rm(dir, { recursive: true, force: true });
  });
});
