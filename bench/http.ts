/**
 * `npm run bench:http`: the HTTP layer, every protocol, against a bare
 * baseline, in one run on the machine's PostgreSQL.
 *
 * A fresh database on BENCH_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test),
 * the service started on it as `npm start` starts it (its own process, same
 * node flags), and the baseline (`http-baseline.ts`: bare fastify, the same
 * SQL through `pg`, no auth) in another process with the same flags. The app
 * read from has BENCH_QUEUES (50) queues of BENCH_QUEUE_MESSAGES (20) waiting
 * messages each and 5 event types; puts go to a second app, each run on its
 * own 50 fresh queues, in turn, so that every run starts at the same depths.
 *
 * Operations: `GET /v1/analytics/types`, `GET /v1/queues`,
 * `GET /v1/inference/models` and `POST /v1/queues/{q}`, each over REST on
 * HTTP/1.1, REST on h2c, Connect JSON, Connect binary (proto) and gRPC (h2c),
 * calling the RPC the REST route calls, and the baseline's route over HTTP/1.1.
 * Connect goes over HTTP/1.1 unless BENCH_CONNECT_HTTP=2. The service inherits the environment:
 * `CONNECT_SHORT_PATH=off npm run bench:http` measures connect-fastify's plugin alone, without the
 * unary short path in front of it (the comparison that decides whether the short path stays).
 * One load generator for all (`http-load.ts`): BENCH_CONCURRENCY (64) requests
 * in flight (HTTP/1.1: as many connections; HTTP/2: over BENCH_H2_SESSIONS (4)
 * sessions), BENCH_WARMUP_SECONDS (1) uncounted, then BENCH_SECONDS (4) counted,
 * one run after the other (the baseline first for each operation). Each run's
 * log line also gives the server's CPU time per request (user + system, from
 * /proc, warm-up included): on a busy machine a steadier comparison than
 * requests per second; the load generator's own CPU time per request; and how
 * much of one core the server kept busy, and the share of the machine's CPU
 * left idle. Both servers run JavaScript on one
 * thread: on the light reads (types, models) that thread is the bottleneck
 * (busy ~100% of a core while part of the machine stays idle), so a ratio of
 * requests per second is, closely, the inverse ratio of the servers' CPU time
 * per request; on the queue listing and puts PostgreSQL is (the machine is
 * nearly all busy, the servers are not).
 *
 * The last line of output is one JSON object: `<operation>_<protocol>_req_s`
 * for operations `event_types_list`, `queues_list`, `models_list`, `queue_put`
 * and protocols `rest_h1`, `rest_h2c`, `connect_json`, `connect_proto`, `grpc`
 * and `baseline`; `min_ratio_vs_baseline` (the lowest protocol figure over its
 * operation's baseline); `max_protocol_spread` (over the operations, the
 * largest (fastest - slowest) / fastest among the five protocols); and
 * `queues_list_req_s` (`GET /v1/queues` over REST on HTTP/1.1).
 *
 * The same bare baseline also runs over h2c (`<operation>_baseline_h2c_req_s`;
 * `h2c_floor_ratio`, the lowest of its figure over the HTTP/1.1 baseline's).
 * It is not counted in the two ratios: it shows the most that REST over h2c and
 * gRPC can reach, since connect-fastify serves them through fastify on Node's
 * HTTP/2 layer, before any of the service's own work.
 */
import { spawn, type ChildProcess } from "node:child_process";
import crypto from "node:crypto";
import { connect as http2Connect } from "node:http2";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import {
  create,
  toBinary,
  toJson,
  type DescMessage,
  type DescMethodUnary,
  type MessageInitShape,
} from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { fromJson } from "@bufbuild/protobuf";
import pg from "pg";
import { AnalyticsService } from "../gen/platform/analytics/v1/analytics_pb.js";
import { InferenceService } from "../gen/platform/inference/v1/inference_pb.js";
import { QueueService } from "../gen/platform/queues/v1/queues_pb.js";
import { runLoad, type LoadRequest, type LoadTarget } from "./http-load.ts";
import { adminCall, freePort, log, NO_RATE_LIMITS, root, startCommandArgs, startService } from "./support.ts";

const BASE_URL = process.env.BENCH_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const SECONDS = Number(process.env.BENCH_SECONDS ?? 4);
const WARMUP_SECONDS = Number(process.env.BENCH_WARMUP_SECONDS ?? 1);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 64);
const H2_SESSIONS = Number(process.env.BENCH_H2_SESSIONS ?? 4);
const QUEUES = Number(process.env.BENCH_QUEUES ?? 50);
const QUEUE_MESSAGES = Number(process.env.BENCH_QUEUE_MESSAGES ?? 20);
const CONNECT_HTTP = process.env.BENCH_CONNECT_HTTP === "2" ? "2" : "1.1";
/** Operations to run, e.g. BENCH_OPS=queues_list while tuning; all by default. */
const OPS = new Set((process.env.BENCH_OPS ?? "event_types_list,queues_list,models_list,queue_put").split(","));
/** Protocols to run (the baseline always runs). */
const PROTOCOLS = (process.env.BENCH_PROTOCOLS ?? "rest_h1,rest_h2c,connect_json,connect_proto,grpc").split(
  ",",
) as Protocol[];

type Protocol = "rest_h1" | "rest_h2c" | "connect_json" | "connect_proto" | "grpc";
/** The bare baseline over HTTP/1.1 (what the ratios are taken against), and the same over h2c (the HTTP/2 floor). */
type Baseline = "baseline" | "baseline_h2c";

const PUT_PAYLOAD = { order: 1234, items: ["a", "b", "c"], note: "x".repeat(64) };

interface Operation {
  key: string;
  method: "GET" | "POST";
  rpc: DescMethodUnary;
  /** REST path and JSON body (when it has one), and the RPC request, of the i-th request of run `run`. */
  rest(run: number, i: number): { path: string; body?: unknown };
  request(run: number, i: number): MessageInitShape<DescMessage>;
  /** How many different requests a run cycles through. */
  variants: number;
}

const putQueue = (run: number, i: number) => `w${run}-${i}`;

const OPERATIONS: Operation[] = [
  {
    key: "event_types_list",
    method: "GET",
    rpc: AnalyticsService.method.listEventTypes,
    rest: () => ({ path: "/v1/analytics/types" }),
    request: () => ({}),
    variants: 1,
  },
  {
    key: "queues_list",
    method: "GET",
    rpc: QueueService.method.listQueues,
    rest: () => ({ path: "/v1/queues" }),
    request: () => ({}),
    variants: 1,
  },
  {
    key: "models_list",
    method: "GET",
    rpc: InferenceService.method.listModels,
    rest: () => ({ path: "/v1/inference/models" }),
    request: () => ({}),
    variants: 1,
  },
  {
    key: "queue_put",
    method: "POST",
    rpc: QueueService.method.putMessage,
    rest: (run, i) => ({ path: `/v1/queues/${putQueue(run, i)}`, body: { payload: PUT_PAYLOAD } }),
    request: (run, i) => ({ queue: putQueue(run, i), payload: fromJson(ValueSchema, PUT_PAYLOAD) }),
    variants: 50,
  },
];

/** The load target of one operation over one protocol (or the baseline). */
function target(op: Operation, protocol: Protocol | Baseline, url: string, token: string, run: number): LoadTarget {
  const auth = { authorization: `Bearer ${token}` };
  const indices = Array.from({ length: op.variants }, (_, i) => i);
  if (protocol === "rest_h1" || protocol === "rest_h2c" || protocol === "baseline" || protocol === "baseline_h2c") {
    const requests: LoadRequest[] = indices.map((i) => {
      const { path: p, body } = op.rest(run, i);
      return body === undefined ? { path: p } : { path: p, body: Buffer.from(JSON.stringify(body)) };
    });
    const headers: Record<string, string> = protocol.startsWith("baseline") ? {} : { ...auth };
    if (op.method === "POST") headers["content-type"] = "application/json";
    const h2 = protocol === "rest_h2c" || protocol === "baseline_h2c";
    return { transport: h2 ? "h2" : "h1", url, method: op.method, headers, requests };
  }
  const rpcPath = `/${op.rpc.parent.typeName}/${op.rpc.name}`;
  const messages = indices.map((i) => create(op.rpc.input, op.request(run, i)));
  if (protocol === "grpc") {
    const requests = messages.map((m) => {
      const bytes = toBinary(op.rpc.input, m);
      const frame = Buffer.alloc(5 + bytes.length);
      frame.writeUInt32BE(bytes.length, 1);
      frame.set(bytes, 5);
      return { path: rpcPath, body: frame };
    });
    return {
      transport: "grpc",
      url,
      method: "POST",
      headers: { ...auth, "content-type": "application/grpc", te: "trailers" },
      requests,
    };
  }
  const json = protocol === "connect_json";
  const requests = messages.map((m) => ({
    path: rpcPath,
    body: json ? Buffer.from(JSON.stringify(toJson(op.rpc.input, m))) : Buffer.from(toBinary(op.rpc.input, m)),
  }));
  return {
    transport: CONNECT_HTTP === "2" ? "h2" : "h1",
    url,
    method: "POST",
    headers: {
      ...auth,
      "content-type": json ? "application/json" : "application/proto",
      "connect-protocol-version": "1",
    },
    requests,
  };
}

const round = (n: number, digits = 2) => Math.round(n * 10 ** digits) / 10 ** digits;

async function rest(url: string, token: string, method: string, p: string, body?: unknown): Promise<unknown> {
  const res = await fetch(url + p, {
    method,
    headers: {
      authorization: `Bearer ${token}`,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  if (!res.ok) throw new Error(`${method} ${p}: ${res.status} ${await res.text()}`);
  return res.json();
}

/** CPU time (user + system) a process has used so far, in ms: what a request costs, whatever else the machine runs. */
async function cpuMs(pid: number): Promise<number> {
  const fields = (await fs.readFile(`/proc/${pid}/stat`, "utf8")).split(") ")[1].split(" ");
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLOCK_TICKS;
}
const CLOCK_TICKS = 100;

/** The machine's idle and total CPU time so far, in clock ticks (all cores): how much the run left unused. */
async function machineTicks(): Promise<{ idle: number; total: number }> {
  const fields = (await fs.readFile("/proc/stat", "utf8")).split("\n")[0].trim().split(/\s+/).slice(1).map(Number);
  return { idle: fields[3] + fields[4], total: fields.reduce((a, b) => a + b, 0) };
}

/** Whether a GET answers at all over HTTP/1.1, or over h2c with `http2` (the baseline's readiness). */
async function answers(url: string, http2: boolean): Promise<boolean> {
  if (!http2)
    return fetch(`${url}/v1/analytics/types`).then(
      () => true,
      () => false,
    );
  return new Promise((resolve) => {
    const session = http2Connect(url);
    session.on("error", () => resolve(false));
    const req = session.request({ ":path": "/v1/analytics/types" });
    req.on("response", () => {
      session.close();
      resolve(true);
    });
    req.on("error", () => resolve(false));
    req.end();
  });
}

async function startBaseline(
  databaseUrl: string,
  appId: string,
  writeAppId: string,
  http2: boolean,
): Promise<{ url: string; child: ChildProcess }> {
  const port = await freePort();
  const { flags } = await startCommandArgs();
  const child = spawn(
    path.join(root, "node_modules/.bin/node"),
    [...flags, path.join(root, "bench/http-baseline.ts")],
    {
      cwd: root,
      env: {
        ...process.env,
        DATABASE_URL: databaseUrl,
        PORT: String(port),
        BASELINE_APP_ID: appId,
        BASELINE_WRITE_APP_ID: writeAppId,
        BASELINE_HTTP2: http2 ? "1" : "0",
      },
      stdio: ["ignore", "ignore", "inherit"],
    },
  );
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    if (child.exitCode !== null) throw new Error("the baseline exited at start");
    if (await answers(url, http2)) return { url, child };
    if (i > 600) throw new Error("the baseline did not start");
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function stop(child: ChildProcess | undefined): Promise<void> {
  if (!child || child.exitCode !== null) return;
  const exited = new Promise((r) => child.once("exit", r));
  child.kill("SIGTERM");
  await exited;
}

async function main(): Promise<void> {
  const dbName = `pb_bench_http_${crypto.randomBytes(4).toString("hex")}`;
  const admin = new pg.Client({ connectionString: BASE_URL });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${dbName}`);
  const dbUrl = new URL(BASE_URL);
  dbUrl.pathname = `/${dbName}`;
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), "pb-bench-http-"));
  const adminToken = "pba_bench_" + crypto.randomBytes(24).toString("base64url");
  let service: { url: string; child: ChildProcess } | undefined;
  let baseline: { url: string; child: ChildProcess } | undefined;
  let baselineH2c: { url: string; child: ChildProcess } | undefined;
  try {
    service = await startService({ databaseUrl: dbUrl.toString(), dataDir, adminToken });
    const url = service.url;
    const { app } = await adminCall(url, adminToken, "CreateApp", { name: "bench" });
    await adminCall(url, adminToken, "UpdateApp", { appId: app.id, limits: NO_RATE_LIMITS });
    const { token } = await adminCall(url, adminToken, "IssueToken", { appId: app.id });
    const { app: writer } = await adminCall(url, adminToken, "CreateApp", { name: "bench-writer" });
    await adminCall(url, adminToken, "UpdateApp", { appId: writer.id, limits: NO_RATE_LIMITS });
    const { token: writerToken } = await adminCall(url, adminToken, "IssueToken", { appId: writer.id });
    for (const name of ["signup", "login", "purchase", "page_view", "logout"]) {
      await rest(url, token, "POST", "/v1/analytics/types", {
        name,
        properties: { plan: "string", seats: "number", trial: "boolean" },
      });
    }
    await Promise.all(
      Array.from({ length: QUEUES }, async (_, q) => {
        for (let m = 0; m < QUEUE_MESSAGES; m++)
          await rest(url, token, "POST", `/v1/queues/jobs-${q}`, { payload: { q, m } });
      }),
    );
    const listed = (await rest(url, token, "GET", "/v1/queues")) as { queues: unknown[] };
    if (listed.queues.length !== QUEUES) throw new Error(`expected ${QUEUES} queues, listed ${listed.queues.length}`);
    await admin.query(`VACUUM ANALYZE`).catch(() => undefined);
    baseline = await startBaseline(dbUrl.toString(), app.id, writer.id, false);
    baselineH2c = await startBaseline(dbUrl.toString(), app.id, writer.id, true);
    log(
      `service on ${url}, baseline on ${baseline.url} (HTTP/1.1) and ${baselineH2c.url} (h2c), database ${dbName}; ${QUEUES} queues x ${QUEUE_MESSAGES} messages; Connect over HTTP/${CONNECT_HTTP}`,
    );
    log(
      `load: ${CONCURRENCY} in flight (HTTP/2: ${H2_SESSIONS} sessions), ${WARMUP_SECONDS} s warm-up + ${SECONDS} s per run`,
    );

    const figures: Record<string, number> = {};
    let minRatio = Infinity;
    let maxSpread = 0;
    let h2FloorRatio = Infinity;
    let run = 0;
    for (const op of OPERATIONS) {
      if (!OPS.has(op.key)) continue;
      const opToken = op.method === "POST" ? writerToken : token;
      const results: Partial<Record<Protocol | Baseline, number>> = {};
      for (const protocol of ["baseline", "baseline_h2c", ...PROTOCOLS] as const) {
        const { url: targetUrl, child: server } =
          protocol === "baseline" ? baseline : protocol === "baseline_h2c" ? baselineH2c : service;
        const t = target(op, protocol, targetUrl, opToken, run++);
        const cpu0 = await cpuMs(server.pid!);
        const load0 = process.cpuUsage();
        const wall0 = performance.now();
        const machine0 = await machineTicks();
        const r = await runLoad(t, {
          concurrency: CONCURRENCY,
          h2Sessions: H2_SESSIONS,
          warmupSeconds: WARMUP_SECONDS,
          seconds: SECONDS,
        });
        results[protocol] = r.reqPerS;
        figures[`${op.key}_${protocol}_req_s`] = round(r.reqPerS, 0);
        const serverMs = (await cpuMs(server.pid!)) - cpu0;
        const cpuUs = (serverMs * 1000) / r.allRequests;
        const busy = serverMs / (performance.now() - wall0);
        const machine1 = await machineTicks();
        const idle = (machine1.idle - machine0.idle) / (machine1.total - machine0.total);
        const load = process.cpuUsage(load0);
        const loadUs = (load.user + load.system) / r.allRequests;
        log(
          `${op.key.padEnd(17)} ${protocol.padEnd(14)} ${String(round(r.reqPerS, 0)).padStart(7)} req/s  ${String(round(cpuUs, 0)).padStart(5)} µs CPU/req  (load generator ${String(round(loadUs, 0)).padStart(3)} µs; server busy ${String(round(busy * 100, 0)).padStart(3)}% of a core, machine ${String(round(idle * 100, 0)).padStart(2)}% idle)${r.errors ? `  ${r.errors} errors, first: ${r.firstError}` : ""}`,
        );
        if (r.errors > 0) throw new Error(`${op.key} over ${protocol}: ${r.errors} errors (${r.firstError})`);
      }
      const base = results.baseline!;
      const perProtocol = PROTOCOLS.map((p) => results[p]!);
      const ratios = perProtocol.map((v) => v / base);
      const spread = (Math.max(...perProtocol) - Math.min(...perProtocol)) / Math.max(...perProtocol);
      const h2Floor = results.baseline_h2c! / base;
      minRatio = Math.min(minRatio, ...ratios);
      maxSpread = Math.max(maxSpread, spread);
      h2FloorRatio = Math.min(h2FloorRatio, h2Floor);
      log(
        `${op.key}: ratios vs baseline ${PROTOCOLS.map((p, i) => `${p} ${round(ratios[i])}`).join(", ")}; protocol spread ${round(spread)}; the baseline over h2c ${round(h2Floor)}`,
      );
    }
    process.stdout.write(
      JSON.stringify({
        min_ratio_vs_baseline: round(minRatio),
        max_protocol_spread: round(maxSpread),
        h2c_floor_ratio: round(h2FloorRatio),
        queues_list_req_s: figures.queues_list_rest_h1_req_s ?? null,
        ...figures,
      }) + "\n",
    );
  } finally {
    await stop(baseline?.child);
    await stop(baselineH2c?.child);
    await stop(service?.child);
    await admin.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`);
    await admin.end();
    await fs.rm(dataDir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`bench failed: ${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
