/**
 * The real server as a child process (`node src/main.ts`), for tests that
 * kill it (`kill -9`) or run several instances. Resolves once `/health`
 * answers.
 */
import { spawn, type ChildProcess } from "node:child_process";
import net from "node:net";
import path from "node:path";

export interface ChildServer {
  url: string;
  process: ChildProcess;
  /** SIGKILL, then wait for the process to be gone. */
  kill9(): Promise<void>;
  /** SIGTERM, then wait for the process to exit. */
  stop(): Promise<void>;
}

const root = path.resolve(import.meta.dirname, "../../..");

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
    s.on("error", reject);
  });
}

export async function startChildServer(env: Record<string, string>, port?: number): Promise<ChildServer> {
  const p = port ?? (await freePort());
  const child = spawn(path.join(root, "node_modules/.bin/node"), ["src/main.ts"], {
    cwd: root,
    env: { ...process.env, LOG_LEVEL: "warn", HOST: "127.0.0.1", PORT: String(p), ...env },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  child.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const url = `http://127.0.0.1:${p}`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`server exited at start: ${stderr}`);
    try {
      if ((await fetch(`${url}/health`)).ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`server did not start: ${stderr}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    url,
    process: child,
    async kill9() {
      child.kill("SIGKILL");
      await exited;
    },
    async stop() {
      if (child.exitCode === null) child.kill("SIGTERM");
      await exited;
    },
  };
}
