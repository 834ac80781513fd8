/**
 * A start while PostgreSQL cannot be reached yet (a compose file or a
 * Kubernetes rollout starts the service and its database together): the
 * process listens at once, answers `/health` 200 and `/ready` 503 (and a
 * request 503 `unavailable` with Retry-After) while it waits with backoff,
 * logging each attempt with the host and database only; once the database
 * answers (here: 5 s later, through a proxy that starts listening on the
 * port then) it is ready and serves a put. A database that stays away past
 * DATABASE_WAIT_SECONDS ends the process with exit code 1 and one line.
 *
 * PostgreSQL only (skipped on PGlite, saying so): the embedded database is
 * in the process and is never unreachable.
 */
import { spawn } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs/promises";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import { createTestDatabase, type TestDatabase, describeOnPostgres } from "../support/harness.ts";
import { cleanEnv, nodeBinary } from "../support/service-process.ts";
import { startTcpProxy, type TcpProxy } from "../support/tcp-proxy.ts";

const root = path.resolve(import.meta.dirname, "../..");

/** A local port with nothing listening on it (yet). */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** The service as a child process, with its log lines as they come and a wait for one of them. */
function startProcess(env: NodeJS.ProcessEnv) {
  const child = spawn(nodeBinary, ["src/main.ts"], { cwd: root, env, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  const waiters: (() => void)[] = [];
  const changed = () => {
    for (const w of waiters.splice(0)) w();
  };
  child.stdout.on("data", (d: Buffer) => {
    stdout += d.toString();
    changed();
  });
  child.stderr.on("data", (d: Buffer) => {
    stderr += d.toString();
    changed();
  });
  const exited = new Promise<number | NodeJS.Signals>((resolve) =>
    child.once("exit", (code, signal) => {
      resolve(code ?? signal!);
      changed();
    }),
  );
  let exitCode: number | NodeJS.Signals | undefined;
  void exited.then((code) => (exitCode = code));
  const lines = () =>
    stdout
      .split("\n")
      .filter((l) => l.startsWith("{"))
      .map((l) => JSON.parse(l) as Record<string, unknown> & { msg: string });
  return {
    child,
    exited,
    lines,
    stdout: () => stdout,
    stderr: () => stderr,
    /** The first log line with message `msg`, once it is written. */
    async line(msg: string) {
      for (;;) {
        const found = lines().find((l) => l.msg === msg);
        if (found) return found;
        if (exitCode !== undefined) throw new Error(`exited (${exitCode}) before "${msg}": ${stderr}${stdout}`);
        await new Promise<void>((resolve) => waiters.push(resolve));
      }
    },
  };
}

describeOnPostgres("a start before the database", "the embedded database is never unreachable", () => {
  let database: TestDatabase;
  let proxy: TcpProxy | undefined;
  beforeAll(async () => {
    database = await createTestDatabase();
  });
  afterAll(async () => {
    await proxy?.close();
    await database?.drop();
  });

  it("listens at once (/health 200, /ready 503, requests 503 with Retry-After), waits, and is ready once the database answers", async () => {
    const port = await closedPort();
    const unreachable = new URL(database.url!);
    unreachable.hostname = "127.0.0.1";
    unreachable.port = String(port);
    // A password in the URL (trust authentication ignores it) that the log must never show.
    unreachable.password = "never-logged-" + crypto.randomBytes(4).toString("hex");
    const service = startProcess(
      cleanEnv({
        PORT: "0",
        DATA_DIR: database.dataDir,
        DATABASE_URL: unreachable.toString(),
        ADMIN_TOKEN: database.adminToken,
        SECRETS_KEY: database.secretsKey,
      }),
    );
    try {
      const startedAt = Date.now();
      const { url } = (await service.line("listening; ready once the database is open")) as unknown as {
        url: string;
      };
      await service.line("waiting for the database");

      expect((await fetch(`${url}/health`)).status).toBe(200);
      const ready = await fetch(`${url}/ready`);
      expect(ready.status).toBe(503);
      expect(await ready.json()).toMatchObject({ error: { code: "unavailable" }, checks: { database: "starting" } });
      const put = await fetch(`${url}/v1/queues/jobs`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: "Bearer pbt_whatever" },
        body: JSON.stringify({ payload: 1 }),
      });
      expect(put.status).toBe(503);
      expect(put.headers.get("retry-after")).toMatch(/^\d+$/);
      expect(await put.json()).toMatchObject({ error: { code: "unavailable" } });
      // Over gRPC (a Trailers-Only answer, status 14) and Connect alike: UNAVAILABLE, which clients retry.
      for (const transport of [
        createGrpcTransport({ baseUrl: url }),
        createConnectTransport({ baseUrl: url, httpVersion: "1.1" }),
      ]) {
        const refused = await createClient(QueueService, transport)
          .listQueues({}, { headers: { authorization: "Bearer pbt_whatever" } })
          .then(
            () => undefined,
            (err: unknown) => ConnectError.from(err),
          );
        expect(refused?.code).toBe(Code.Unavailable);
      }

      // The database becomes reachable 5 s after the start.
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, startedAt + 5000 - Date.now())));
      proxy = await startTcpProxy(database.url!, port);
      await service.line("platform batteries listening");
      expect((await fetch(`${url}/ready`)).status).toBe(200);

      const admin = async (rpc: string, body: object) => {
        const res = await fetch(`${url}/platform.admin.v1.AdminService/${rpc}`, {
          method: "POST",
          headers: { "content-type": "application/json", authorization: `Bearer ${database.adminToken}` },
          body: JSON.stringify(body),
        });
        expect(res.status).toBe(200);
        return (await res.json()) as Record<string, unknown>;
      };
      const { app } = (await admin("CreateApp", { name: "early" })) as { app: { id: string } };
      const { token } = (await admin("IssueToken", { appId: app.id })) as { token: string };
      const stored = await fetch(`${url}/v1/queues/jobs`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
        body: JSON.stringify({ payload: 1 }),
      });
      expect(stored.status).toBe(200);

      // Each wait logged once, with backoff, naming the host and database, never the credentials.
      const waits = service.lines().filter((l) => l.msg === "waiting for the database");
      expect(waits.length).toBeGreaterThanOrEqual(3);
      expect(waits.map((w) => w.attempt)).toEqual(waits.map((_, i) => i + 1));
      expect(waits[0]).toMatchObject({
        host: `127.0.0.1:${port}`,
        database: unreachable.pathname.slice(1),
        reason: "ECONNREFUSED",
      });
      expect(Number(waits.at(-1)!.retryInMs)).toBeGreaterThan(Number(waits[0].retryInMs));
      expect(service.stdout() + service.stderr()).not.toContain(unreachable.password);
    } finally {
      service.child.kill("SIGTERM");
      await service.exited;
    }
  }, 60_000);

  it("exits 1 with one line when the database stays away past DATABASE_WAIT_SECONDS", async () => {
    const port = await closedPort();
    const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), "pb-wait-"));
    try {
      const service = startProcess(
        cleanEnv({
          PORT: "0",
          DATA_DIR: dataDir,
          DATABASE_URL: `postgres://postgres:pw@127.0.0.1:${port}/nowhere`,
          DATABASE_WAIT_SECONDS: "2",
          ADMIN_TOKEN: database.adminToken,
          SECRETS_KEY: database.secretsKey,
        }),
      );
      const startedAt = Date.now();
      expect(await service.exited).toBe(1);
      expect(Date.now() - startedAt).toBeGreaterThanOrEqual(2000);
      expect(service.stderr()).toBe(
        `failed to start: database: 127.0.0.1:${port}/nowhere not reachable within 2 s (DATABASE_WAIT_SECONDS): ECONNREFUSED\n`,
      );
    } finally {
      await fs.rm(dataDir, { recursive: true, force: true });
    }
  }, 30_000);
});
