/**
 * What both benchmarks need: the service started as `npm start` starts it
 * (same node flags) in its own process, and admin calls to it.
 */
import { spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs/promises";
import http from "node:http";
import net from "node:net";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { createScratchDatabase, type ScratchDatabase } from "../test/support/scratch-database.ts";

export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

/** Progress goes to stderr, so the last line of stdout is the figures. */
export const log = (msg: string): void => void process.stderr.write(`${msg}\n`);

/** A database of one benchmark run. */
export type BenchDatabase = ScratchDatabase;

/** A fresh database for one run, named `prefix` and random hex, on the server of `baseUrl`. */
export const createBenchDatabase = (baseUrl: string, prefix = "pb_bench"): Promise<BenchDatabase> =>
  createScratchDatabase(baseUrl, prefix);

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

export interface ServiceOptions {
  databaseUrl: string;
  dataDir: string;
  adminToken: string;
  env?: Record<string, string>;
  /** The checkout whose `src/` is served (default this one; `http-ab.ts` serves an older commit's too). */
  checkout?: string;
}

/**
 * Starts the service with the node flags of `npm start` (e.g. the young
 * generation's size); BENCH_NODE_ARGS adds flags, e.g. "--cpu-prof --cpu-prof-dir=DIR";
 * BENCH_SERVER_STDOUT=1 shows the service's log lines (stdout) too.
 * Resolves once `/health` answers.
 */
/** The node flags and entry point of `npm start` (`[exec] node <flags> <entry>`: what follows `node`). */
export async function startCommandArgs(): Promise<{ flags: string[]; entry: string }> {
  const startScript = (
    JSON.parse(await fs.readFile(path.join(root, "package.json"), "utf8")) as { scripts: { start: string } }
  ).scripts.start;
  const words = startScript.split(" ").filter(Boolean);
  const args = words.slice(words.indexOf("node") + 1);
  return { flags: args.slice(0, -1), entry: args[args.length - 1] };
}

export async function startService(options: ServiceOptions): Promise<{ url: string; child: ChildProcess }> {
  const port = await freePort();
  const { flags, entry } = await startCommandArgs();
  const startArgs = [...flags, entry];
  const nodeArgs = (process.env.BENCH_NODE_ARGS ?? "").split(" ").filter(Boolean);
  const child = spawn(path.join(root, "node_modules/.bin/node"), [...nodeArgs, ...startArgs], {
    cwd: options.checkout ?? root,
    env: {
      ...process.env,
      DATABASE_URL: options.databaseUrl,
      DATA_DIR: options.dataDir,
      ADMIN_TOKEN: options.adminToken,
      PORT: String(port),
      HOST: "127.0.0.1",
      LOG_LEVEL: "warn",
      ...options.env,
    },
    stdio: ["ignore", process.env.BENCH_SERVER_STDOUT ? "inherit" : "ignore", "inherit"],
  });
  // A service that dies under a benchmark says how (the benchmark then fails on refused connections).
  child.once("exit", (code, signal) => {
    if (code !== 0 && signal !== "SIGTERM") log(`the service exited: code ${code}, signal ${signal}`);
  });
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    if (child.exitCode !== null) throw new Error("the service exited at start");
    try {
      // Ready, not only listening: the port answers (503) while the database is still being opened.
      if ((await fetch(`${url}/ready`)).ok) return { url, child };
    } catch {
      // not listening yet
    }
    if (i > 600) throw new Error("the service did not start");
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * The app limits that turn off every rate and concurrency limit (docs/api.md#rate-limits): the
 * throughput benchmarks measure the service, not one app's limits (`bench:fairness` keeps the defaults).
 */
export const NO_RATE_LIMITS = Object.freeze({
  eventsPerSecond: 0,
  queuePutsPerSecond: 0,
  requestsPerSecond: 0,
  maxWaitingConsumes: 0,
  maxOpenStreams: 0,
  maxInFlightRequests: 0,
});

/** One AdminService call over Connect JSON. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function adminCall(url: string, adminToken: string, rpc: string, body: unknown): Promise<any> {
  const res = await fetch(`${url}/platform.admin.v1.AdminService/${rpc}`, {
    method: "POST",
    headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  if (!res.ok) throw new Error(`${rpc}: ${res.status} ${await res.text()}`);
  return res.json();
}

/**
 * A small JSON-over-HTTP/1.1 client on a keep-alive agent: cheaper per call than fetch. With `retry429`, a
 * 429 is sent again after its Retry-After while `retry429()` says so; without it, a 429 is an answer like
 * any other, as bench:fairness needs (it counts the flooding app's refusals, which a retry would hide and
 * turn into pauses of the flood).
 */
export function jsonClient(base: string, token: string, maxSockets: number, options?: { retry429?: () => boolean }) {
  const agent = new http.Agent({ keepAlive: true, maxSockets });
  const url = new URL(base);
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  type Answer = { status: number; retryAfter: string | undefined; body: any };
  const once = (method: string, pathname: string, data: string | undefined): Promise<Answer> =>
    new Promise((resolve, reject) => {
      const req = http.request(
        {
          agent,
          host: url.hostname,
          port: url.port,
          method,
          path: pathname,
          headers: {
            authorization: `Bearer ${token}`,
            ...(data === undefined
              ? {}
              : { "content-type": "application/json", "content-length": Buffer.byteLength(data) }),
          },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.push(c));
          res.on("end", () => {
            const text = Buffer.concat(chunks).toString("utf8");
            const retryAfter = res.headers["retry-after"];
            try {
              resolve({ status: res.statusCode ?? 0, retryAfter, body: text ? JSON.parse(text) : undefined });
            } catch (err) {
              reject(err instanceof Error ? err : new Error(String(err)));
            }
          });
          res.on("error", reject);
        },
      );
      req.on("error", reject);
      req.end(data);
    });
  return {
    agent,
    /**
     * One call, JSON in and out. With `retry429`, a 429 (a limit or a saturated instance's fair share: nothing
     * was done) is sent again after its Retry-After, as a well-behaved client does (the client package's
     * `on429`); one asking to wait longer than a minute (a daily cap) is answered as it is.
     */
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    async request(method: string, pathname: string, body?: unknown): Promise<{ status: number; body: any }> {
      const data = body === undefined ? undefined : JSON.stringify(body);
      for (;;) {
        const { status, retryAfter, body: answer } = await once(method, pathname, data);
        const waitS = /^\d+$/.test(retryAfter ?? "") ? Number(retryAfter) : 1;
        if (status !== 429 || waitS > 60 || !options?.retry429?.()) return { status, body: answer };
        await new Promise((r) => setTimeout(r, waitS * 1000));
      }
    },
  };
}

export interface RestQueueLoadOptions {
  producers: number;
  consumers: number;
  /** Producers pause while more than this many puts are not yet acked, so the line stays short. */
  maxOutstanding: number;
  payload: unknown;
  seconds: number;
  /** The body of the i-th put (default `{ payload }`): e.g. with a `groupKey` or a `priority`. */
  putBody?: (i: number) => Record<string, unknown>;
  /** The queue put on and consumed (default `bench`). */
  queue?: string;
  /** Awaited when the measured window opens and right before it closes (e.g. to read the server's CPU time). */
  atStart?: () => Promise<void>;
  atEnd?: () => Promise<void>;
}

/**
 * The REST load both queue benchmarks measure: producers `POST /v1/queues/bench`,
 * consumers `consume` (1 s long-poll) then `_ack`, over keep-alive, for
 * `seconds` after a warm-up of 200 puts on another queue. Counts acks inside
 * the window; errors are non-200 puts and acks answered `acked: false`.
 */
export async function restQueueLoad(
  url: string | string[],
  token: string,
  options: RestQueueLoadOptions,
): Promise<{ acked: number; elapsedS: number; errors: number }> {
  const { producers, consumers, maxOutstanding, payload, seconds } = options;
  const queue = options.queue ?? "bench";
  let puts = 0;
  // Several urls (instances of one database): producer and consumer i use the (i mod n)-th, as a balancer would.
  const urls = Array.isArray(url) ? url : [url];
  const clients = urls.map((u) => jsonClient(u, token, producers + consumers + 4));
  const client = clients[0];
  const clientOf = (i: number) => clients[i % clients.length];
  for (let i = 0; i < 200; i++) await client.request("POST", "/v1/queues/warmup", { payload });
  let acked = 0;
  let putDone = 0;
  let stopped = false;
  let errors = 0;
  const putting = Array.from({ length: producers }, async (_, i) => {
    const client = clientOf(i);
    while (!stopped) {
      if (putDone - acked > maxOutstanding) {
        await new Promise((r) => setTimeout(r, 1));
        continue;
      }
      const res = await client.request("POST", `/v1/queues/${queue}`, options.putBody?.(puts++) ?? { payload });
      if (res.status !== 200) errors++;
      else putDone++;
    }
  });
  const consuming = Array.from({ length: consumers }, async (_, i) => {
    const client = clientOf(i + 1);
    while (!stopped) {
      const res = await client.request("POST", `/v1/queues/${queue}/consume`, { waitSeconds: 1 });
      const m = res.body?.message;
      if (!m) continue;
      const a = await client.request("POST", "/v1/queues/_ack", { receipt: m.receipt });
      if (a.body?.acked) acked++;
      else errors++;
    }
  });
  const started = performance.now();
  await options.atStart?.();
  await new Promise((r) => setTimeout(r, seconds * 1000));
  await options.atEnd?.();
  stopped = true;
  const ackedInWindow = acked;
  const elapsedS = (performance.now() - started) / 1000;
  await Promise.all([...putting, ...consuming]);
  for (const c of clients) c.agent.destroy();
  return { acked: ackedInWindow, elapsedS, errors };
}
