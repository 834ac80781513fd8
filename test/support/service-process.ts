/**
 * The service as a child process, started the way `npm start` starts it, for
 * tests of start-up, shutdown and crashes.
 */
import { spawn, type ChildProcess, type ChildProcessByStdio } from "node:child_process";
import type { Readable } from "node:stream";
import path from "node:path";

const root = path.resolve(import.meta.dirname, "../..");
export const nodeBinary = path.join(root, "node_modules/.bin/node");

export interface ServiceProcess {
  readonly child: ChildProcess;
  readonly url: string;
  /** Everything written to stdout so far. */
  stdout(): string;
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
        resolve({ child, url, stdout: () => out, exited });
        return;
      }
    });
  });
}
