/**
 * The service as a child process, started the way `npm start` starts it, for
 * tests of start-up, shutdown and crashes.
 */
import { execFile, spawn, type ChildProcess, type ChildProcessByStdio } from "node:child_process";
import type { Readable } from "node:stream";
import path from "node:path";
import { afterAll, beforeAll } from "vitest";
import { createTestDatabase, type TestDatabase, type TestServer } from "./harness.ts";

const root = path.resolve(import.meta.dirname, "../..");
export const nodeBinary = path.join(root, "node_modules/.bin/node");

export interface ServiceProcess {
  readonly child: ChildProcess;
  readonly url: string;
  /** Everything written to stdout so far. */
  stdout(): string;
  /** Everything written to stderr so far (Node's own warnings go there). */
  stderr(): string;
  /** Resolves with the exit code (or the signal) when the process ends. */
  readonly exited: Promise<number | NodeJS.Signals>;
}

/** Environment for a child with nothing inherited that would configure the service. */
export function cleanEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { PATH: process.env.PATH, HOME: process.env.HOME, LOG_LEVEL: "info" };
  return { ...env, ...extra };
}

/** Starts `src/main.ts`; resolves once it logs that it is listening. */
export function startServiceProcess(env: NodeJS.ProcessEnv, script = "src/main.ts"): Promise<ServiceProcess> {
  return awaitListening(spawn(nodeBinary, [script], { cwd: root, env, stdio: ["ignore", "pipe", "pipe"] }));
}

/** Runs the documented start command, `npm start`, as a process manager would; `child` is npm itself. */
export function startWithNpm(env: NodeJS.ProcessEnv): Promise<ServiceProcess> {
  return awaitListening(spawn("npm", ["start", "--silent"], { cwd: root, env, stdio: ["ignore", "pipe", "pipe"] }));
}

function awaitListening(child: ChildProcessByStdio<null, Readable, Readable>): Promise<ServiceProcess> {
  let out = "";
  let err = "";
  const exited = new Promise<number | NodeJS.Signals>((resolve) =>
    child.once("exit", (code, signal) => resolve(code ?? signal!)),
  );
  return new Promise((resolve, reject) => {
    const onExit = (code: number | NodeJS.Signals) =>
      reject(new Error(`service exited (${code}) before listening: ${err}${out}`));
    void exited.then(onExit);
    child.stderr.on("data", (d: Buffer) => (err += d.toString()));
    child.stdout.on("data", (d: Buffer) => {
      out += d.toString();
      for (const line of out.split("\n")) {
        if (!line.includes('"platform batteries listening"')) continue;
        const { url } = JSON.parse(line) as { url: string };
        exited.then(
          () => {},
          () => {},
        );
        resolve({ child, url, stdout: () => out, stderr: () => err, exited });
        return;
      }
    });
  });
}

/** One service process after another on one database, for tests that kill it (see `useCrashableService`). */
export interface CrashableService {
  /** The database every process runs on (PGlite: their DATA_DIR, free once a process is gone), and its admin token. */
  readonly database: TestDatabase;
  /** Starts a process on the database (again, after a kill); it becomes the running one. */
  start(): Promise<ServiceProcess>;
  /** `kill -9` of the running process; its exit (the signal) once it is gone. */
  kill(): Promise<number | NodeJS.Signals>;
}

/**
 * The test file's service process on a fresh database of the run's backend,
 * with the same environment (the database's admin token and secrets key) at
 * every start; the
 * database made before the file's first test, and the running process stopped
 * and the database dropped after its last.
 */
export function useCrashableService(): CrashableService {
  let database: TestDatabase | undefined;
  let running: ServiceProcess | undefined;
  beforeAll(async () => {
    database = await createTestDatabase();
  });
  afterAll(async () => {
    running?.child.kill("SIGTERM");
    await running?.exited;
    await database?.drop();
  });
  const db = () => {
    if (!database) throw new Error("useCrashableService: used before beforeAll ran");
    return database;
  };
  return {
    get database() {
      return db();
    },
    async start() {
      const { url, dataDir, adminToken, secretsKey } = db();
      running = await startServiceProcess(
        cleanEnv({
          PORT: "0",
          DATA_DIR: dataDir,
          ADMIN_TOKEN: adminToken,
          SECRETS_KEY: secretsKey,
          ...(url ? { DATABASE_URL: url } : {}),
        }),
      );
      return running;
    },
    async kill() {
      const process = running;
      if (!process) throw new Error("useCrashableService: no process is running");
      running = undefined;
      process.child.kill("SIGKILL");
      return process.exited;
    },
  };
}

/** What a CLI run printed, and its exit code. */
export interface CliOutcome {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * The CLI (`src/cli.ts`) in its own process, as an operator runs it against `server()` (the admin URL,
 * the admin token and DATA_DIR of that server): `run(args)` answers once it exited.
 */
export function cliAgainst(server: () => TestServer): (args: string[]) => Promise<CliOutcome> {
  return (args) =>
    new Promise((resolve) => {
      const t = server();
      execFile(
        nodeBinary,
        ["src/cli.ts", ...args],
        { env: cleanEnv({ PLATFORM_ADMIN_URL: t.url, ADMIN_TOKEN: t.adminToken, DATA_DIR: t.database.dataDir }) },
        (err, stdout, stderr) =>
          resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
      );
    });
}
