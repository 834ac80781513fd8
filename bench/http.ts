/**
 * `npm run bench:http`: the HTTP layer, every protocol, against a bare
 * baseline over the same HTTP version, in one run on the machine's PostgreSQL.
 *
 * A fresh database on BENCH_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test),
 * the service started on it as `npm start` starts it (its own process, same
 * node flags), and the baseline (`http-baseline.ts`: bare fastify, the same
 * SQL through `pg`, no auth) in two more processes with the same flags, one
 * serving HTTP/1.1 and one h2c. The app read from has BENCH_QUEUES (50) queues
 * of BENCH_QUEUE_MESSAGES (20) waiting messages each and 5 event types; puts go
 * to a second app, each run on its own 50 fresh queues, in turn, so that every
 * run starts at the same depths.
 *
 * Operations: `GET /v1/analytics/types`, `GET /v1/queues`,
 * `GET /v1/inference/models` and `POST /v1/queues/{q}`, each over every
 * protocol the service serves, calling the RPC the REST route calls:
 * - HTTP/1.1: REST (`rest_h1`), Connect JSON (`connect_json`), Connect binary
 *   (`connect_proto`) and gRPC-Web (`grpc_web`), against the baseline over
 *   HTTP/1.1 (`baseline`);
 * - HTTP/2: REST over h2c (`rest_h2c`), Connect JSON and binary over h2c
 *   (`connect_json_h2`, `connect_proto_h2`) and gRPC (`grpc`), against the
 *   baseline over h2c (`baseline_h2c`).
 * Each protocol is measured against the bare server of its own HTTP version:
 * Node's HTTP/2 layer costs more per request than its HTTP/1.1 one before any
 * route runs, so an HTTP/2 protocol over the HTTP/1.1 baseline measured Node,
 * not the service.
 *
 * One load generator for all (`http-load.ts`): BENCH_CONCURRENCY (64) requests
 * in flight (HTTP/1.1: as many connections; HTTP/2: over BENCH_H2_SESSIONS (4)
 * sessions), BENCH_WARMUP_SECONDS (1) uncounted, then BENCH_SECONDS (4) counted,
 * one run after the other: for each operation and HTTP version the baseline,
 * the protocols, and the baseline again (its figure is the mean of the two, so
 * that a machine getting busier or quieter during the protocols' runs moves
 * both sides of the ratio alike). Each run's log line also gives the server's
 * CPU time per request (user + system, from /proc, warm-up included): on a busy
 * machine a steadier comparison than requests per second; the load generator's
 * own CPU time per request; and how much of one core the server kept busy, and
 * the share of the machine's CPU left idle.
 *
 * The unary short path in front of connect-fastify (`connect-short-path.ts`)
 * stays only while it is worth it: a second service on the same database runs
 * with `CONNECT_SHORT_PATH=off`, and each RPC protocol is measured on it too
 * (`<operation>_<protocol>_plugin_req_s`); `short_path_max_gain` is the largest
 * server CPU per request of the plugin alone over the short path's, minus 1,
 * over operations and protocols (CPU per request, since on a busy machine it
 * moves far less than requests per second; the short path stays while it is
 * 0.15 or more).
 * BENCH_PLUGIN_COMPARE=0 leaves this out.
 *
 * The last line of output is one JSON object: `<operation>_<protocol>_req_s`
 * for the operations `event_types_list`, `queues_list`, `models_list`,
 * `queue_put` and every protocol and baseline above;
 * `min_ratio_vs_baseline_h1` and `min_ratio_vs_baseline_h2c` (the lowest figure
 * of an HTTP/1.1, resp. HTTP/2, protocol over its operation's baseline of the
 * same version; goal >= 0.75 each on a quiet machine);
 * `max_protocol_spread_h1` and `max_protocol_spread_h2` (over the operations,
 * the largest (fastest - slowest) / fastest among the protocols of one HTTP
 * version; goal <= 0.2 each); `min_ratio_vs_baseline` and
 * `max_protocol_spread` (the lower, resp. higher, of the two);
 * `h2c_floor_ratio` (the lowest of the h2c baseline's figure over the HTTP/1.1
 * baseline's); `queues_list_req_s` (`GET /v1/queues` over REST on HTTP/1.1);
 * `short_path_max_gain` (null when not measured).
 *
 * BENCH_SHORT=1 (a smoke run: it runs and prints its line, the figures mean
 * little) runs 1 s each after 0.5 s of warm-up, on 10 queues of 5 messages,
 * measures each baseline once and leaves the plugin-only service out. BENCH_OPS
 * and BENCH_PROTOCOLS (comma-separated) narrow a run, e.g. while tuning.
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
import {
  adminCall,
  createBenchDatabase,
  freePort,
  log,
  NO_RATE_LIMITS,
  root,
  startCommandArgs,
  startService,
} from "./support.ts";

const BASE_URL = process.env.BENCH_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const SHORT = process.env.BENCH_SHORT === "1";
const SECONDS = Number(process.env.BENCH_SECONDS ?? (SHORT ? 1 : 4));
const WARMUP_SECONDS = Number(process.env.BENCH_WARMUP_SECONDS ?? (SHORT ? 0.5 : 1));
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 64);
const H2_SESSIONS = Number(process.env.BENCH_H2_SESSIONS ?? 4);
const QUEUES = Number(process.env.BENCH_QUEUES ?? (SHORT ? 10 : 50));
const QUEUE_MESSAGES = Number(process.env.BENCH_QUEUE_MESSAGES ?? (SHORT ? 5 : 20));
/** Whether each baseline runs before and after its protocols (the mean of the two), or once. */
const BRACKET = !SHORT;
/** Whether the RPC protocols are also measured on a service without the short path. */
const PLUGIN_COMPARE = (process.env.BENCH_PLUGIN_COMPARE ?? (SHORT ? "0" : "1")) === "1";
/** Operations to run, e.g. BENCH_OPS=queues_list while tuning; all by default. */
const OPS = new Set((process.env.BENCH_OPS ?? "event_types_list,queues_list,models_list,queue_put").split(","));

const H1_PROTOCOLS = ["rest_h1", "connect_json", "connect_proto", "grpc_web"] as const;
const H2_PROTOCOLS = ["rest_h2c", "connect_json_h2", "connect_proto_h2", "grpc"] as const;
export type Protocol = (typeof H1_PROTOCOLS)[number] | (typeof H2_PROTOCOLS)[number];
/** The bare baseline over HTTP/1.1 and over h2c. */
type Baseline = "baseline" | "baseline_h2c";
/** The protocols served by connect-fastify (and its short path), measured again without the short path. */
const RPC_PROTOCOLS: readonly Protocol[] = [
  "connect_json",
  "connect_proto",
  "connect_json_h2",
  "connect_proto_h2",
  "grpc",
  "grpc_web",
];

/** Protocols to run (the baselines always run), e.g. BENCH_PROTOCOLS=grpc,rest_h2c. */
const SELECTED = new Set<string>(process.env.BENCH_PROTOCOLS?.split(",") ?? [...H1_PROTOCOLS, ...H2_PROTOCOLS]);
for (const p of SELECTED)
  if (![...H1_PROTOCOLS, ...H2_PROTOCOLS].includes(p as Protocol)) throw new Error(`BENCH_PROTOCOLS: unknown ${p}`);
/** Each HTTP version's protocols to run, against its baseline. */
const GROUPS: { version: "h1" | "h2"; baseline: Baseline; protocols: Protocol[] }[] = [
  { version: "h1" as const, baseline: "baseline" as const, protocols: H1_PROTOCOLS.filter((p) => SELECTED.has(p)) },
  { version: "h2" as const, baseline: "baseline_h2c" as const, protocols: H2_PROTOCOLS.filter((p) => SELECTED.has(p)) },
].filter((g) => g.protocols.length > 0);

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

export const OPERATIONS: Operation[] = [
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

/** The load target of one operation over one protocol (or a baseline). */
export function target(
  op: Operation,
  protocol: Protocol | Baseline,
  url: string,
  token: string,
  run: number,
): LoadTarget {
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
  if (protocol === "grpc" || protocol === "grpc_web") {
    const requests = messages.map((m) => {
      const bytes = toBinary(op.rpc.input, m);
      const frame = Buffer.alloc(5 + bytes.length);
      frame.writeUInt32BE(bytes.length, 1);
      frame.set(bytes, 5);
      return { path: rpcPath, body: frame };
    });
    return {
      transport: protocol === "grpc" ? "grpc" : "grpc-web",
      url,
      method: "POST",
      headers:
        protocol === "grpc"
          ? { ...auth, "content-type": "application/grpc", te: "trailers" }
          : { ...auth, "content-type": "application/grpc-web+proto", "x-grpc-web": "1" },
      requests,
    };
  }
  const json = protocol === "connect_json" || protocol === "connect_json_h2";
  const requests = messages.map((m) => ({
    path: rpcPath,
    body: json ? Buffer.from(JSON.stringify(toJson(op.rpc.input, m))) : Buffer.from(toBinary(op.rpc.input, m)),
  }));
  return {
    transport: protocol.endsWith("_h2") ? "h2" : "h1",
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

/** Starts the bare baseline (`http-baseline.ts`) with the flags of `npm start` and BENCH_NODE_ARGS, as the service. */
export async function startBaseline(
  databaseUrl: string,
  appId: string,
  writeAppId: string,
  http2: boolean,
): Promise<{ url: string; child: ChildProcess }> {
  const port = await freePort();
  const { flags } = await startCommandArgs();
  const nodeArgs = (process.env.BENCH_NODE_ARGS ?? "").split(" ").filter(Boolean);
  const child = spawn(
    path.join(root, "node_modules/.bin/node"),
    [...nodeArgs, ...flags, path.join(root, "bench/http-baseline.ts")],
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
  const database = await createBenchDatabase(BASE_URL, "pb_bench_http");
  const { name: dbName } = database;
  const dbUrl = new URL(database.url);
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), "pb-bench-http-"));
  const adminToken = "pba_bench_" + crypto.randomBytes(24).toString("base64url");
  const pluginDirs: string[] = [];
  const secretsKey = crypto.randomBytes(32).toString("base64");
  let service: { url: string; child: ChildProcess } | undefined;
  let pluginOnly: { url: string; child: ChildProcess } | undefined;
  let baseline: { url: string; child: ChildProcess } | undefined;
  let baselineH2c: { url: string; child: ChildProcess } | undefined;
  try {
    service = await startService({
      databaseUrl: dbUrl.toString(),
      dataDir,
      adminToken,
      env: { SECRETS_KEY: secretsKey },
    });
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
    // The seeded tables' statistics before anything is measured, in the benchmark's database (this ran on the
    // server's own database before, which left the seeded tables to autovacuum's timing).
    const seeded = new pg.Client({ connectionString: database.url });
    await seeded.connect();
    await seeded.query(`VACUUM ANALYZE`).catch(() => undefined);
    await seeded.end();
    baseline = await startBaseline(dbUrl.toString(), app.id, writer.id, false);
    baselineH2c = await startBaseline(dbUrl.toString(), app.id, writer.id, true);
    const measuresPlugin = PLUGIN_COMPARE && GROUPS.some((g) => g.protocols.some((p) => RPC_PROTOCOLS.includes(p)));
    if (measuresPlugin) {
      // A second instance on the same database, its own data directory (DATA_DIR is one instance's).
      const pluginDir = await fs.mkdtemp(path.join(os.tmpdir(), "pb-bench-http-plugin-"));
      pluginDirs.push(pluginDir);
      pluginOnly = await startService({
        databaseUrl: dbUrl.toString(),
        dataDir: pluginDir,
        adminToken,
        // Instances on one database share its secrets key.
        env: { CONNECT_SHORT_PATH: "off", SECRETS_KEY: secretsKey },
      });
    }
    log(
      `service on ${url}, baseline on ${baseline.url} (HTTP/1.1) and ${baselineH2c.url} (h2c)${pluginOnly ? `, the service without the short path on ${pluginOnly.url}` : ""}, database ${dbName}; ${QUEUES} queues x ${QUEUE_MESSAGES} messages`,
    );
    log(
      `load: ${CONCURRENCY} in flight (HTTP/2: ${H2_SESSIONS} sessions), ${WARMUP_SECONDS} s warm-up + ${SECONDS} s per run`,
    );

    const figures: Record<string, number> = {};
    const minRatio = { h1: Infinity, h2: Infinity };
    const maxSpread = { h1: 0, h2: 0 };
    let h2FloorRatio = Infinity;
    let shortPathGain = -Infinity;
    let run = 0;
    for (const op of OPERATIONS) {
      if (!OPS.has(op.key)) continue;
      const opToken = op.method === "POST" ? writerToken : token;
      /** One counted run of `op` over `protocol` against `server`: its requests per second and server CPU per request. */
      const measure = async (
        protocol: Protocol | Baseline,
        server: { url: string; child: ChildProcess },
        label: string = protocol,
      ): Promise<{ reqPerS: number; cpuUs: number }> => {
        const t = target(op, protocol, server.url, opToken, run++);
        const cpu0 = await cpuMs(server.child.pid!);
        const load0 = process.cpuUsage();
        const wall0 = performance.now();
        const machine0 = await machineTicks();
        const r = await runLoad(t, {
          concurrency: CONCURRENCY,
          h2Sessions: H2_SESSIONS,
          warmupSeconds: WARMUP_SECONDS,
          seconds: SECONDS,
        });
        const serverMs = (await cpuMs(server.child.pid!)) - cpu0;
        const cpuUs = (serverMs * 1000) / r.allRequests;
        const busy = serverMs / (performance.now() - wall0);
        const machine1 = await machineTicks();
        const idle = (machine1.idle - machine0.idle) / (machine1.total - machine0.total);
        const load = process.cpuUsage(load0);
        const loadUs = (load.user + load.system) / r.allRequests;
        log(
          `${op.key.padEnd(17)} ${label.padEnd(23)} ${String(round(r.reqPerS, 0)).padStart(7)} req/s  ${String(round(cpuUs, 0)).padStart(5)} µs CPU/req  (load generator ${String(round(loadUs, 0)).padStart(3)} µs; server busy ${String(round(busy * 100, 0)).padStart(3)}% of a core, machine ${String(round(idle * 100, 0)).padStart(2)}% idle)${r.errors ? `  ${r.errors} errors, first: ${r.firstError}` : ""}`,
        );
        if (r.errors > 0) throw new Error(`${op.key} over ${label}: ${r.errors} errors (${r.firstError})`);
        return { reqPerS: r.reqPerS, cpuUs };
      };
      const cpuPerRequest: Partial<Record<Protocol, number>> = {};
      const results: Partial<Record<Protocol | Baseline, number>> = {};
      for (const group of GROUPS) {
        const bare = group.baseline === "baseline" ? baseline : baselineH2c;
        const before = (await measure(group.baseline, bare)).reqPerS;
        for (const protocol of group.protocols) {
          const m = await measure(protocol, service);
          results[protocol] = m.reqPerS;
          cpuPerRequest[protocol] = m.cpuUs;
        }
        // The mean of a run before and one after the protocols' (see the top of this file).
        const base = BRACKET
          ? (before + (await measure(group.baseline, bare, `${group.baseline} (again)`)).reqPerS) / 2
          : before;
        results[group.baseline] = base;
        const perProtocol = group.protocols.map((p) => results[p]!);
        const ratios = perProtocol.map((v) => v / base);
        const spread = (Math.max(...perProtocol) - Math.min(...perProtocol)) / Math.max(...perProtocol);
        minRatio[group.version] = Math.min(minRatio[group.version], ...ratios);
        maxSpread[group.version] = Math.max(maxSpread[group.version], spread);
        log(
          `${op.key} over ${group.version === "h1" ? "HTTP/1.1" : "HTTP/2"}: ratios vs ${group.baseline} ${group.protocols.map((p, i) => `${p} ${round(ratios[i])}`).join(", ")}; protocol spread ${round(spread)}`,
        );
      }
      for (const [key, value] of Object.entries(results)) figures[`${op.key}_${key}_req_s`] = round(value, 0);
      if (results.baseline !== undefined && results.baseline_h2c !== undefined) {
        const h2Floor = results.baseline_h2c / results.baseline;
        h2FloorRatio = Math.min(h2FloorRatio, h2Floor);
        log(`${op.key}: the bare baseline over h2c at ${round(h2Floor)} of the one over HTTP/1.1`);
      }
      if (pluginOnly) {
        const gains: string[] = [];
        for (const protocol of RPC_PROTOCOLS) {
          if (results[protocol] === undefined) continue;
          const plugin = await measure(protocol, pluginOnly, `${protocol} (plugin only)`);
          figures[`${op.key}_${protocol}_plugin_req_s`] = round(plugin.reqPerS, 0);
          // From the server's CPU per request, which a busy machine moves far less than requests per second.
          const gain = plugin.cpuUs / cpuPerRequest[protocol]! - 1;
          shortPathGain = Math.max(shortPathGain, gain);
          gains.push(`${protocol} ${round(gain)}`);
        }
        log(`${op.key}: the short path's gain over the plugin alone: ${gains.join(", ")}`);
      }
    }
    const finite = (n: number) => (Number.isFinite(n) ? round(n) : null);
    process.stdout.write(
      JSON.stringify({
        min_ratio_vs_baseline_h1: finite(minRatio.h1),
        min_ratio_vs_baseline_h2c: finite(minRatio.h2),
        max_protocol_spread_h1: GROUPS.some((g) => g.version === "h1") ? round(maxSpread.h1) : null,
        max_protocol_spread_h2: GROUPS.some((g) => g.version === "h2") ? round(maxSpread.h2) : null,
        min_ratio_vs_baseline: finite(Math.min(minRatio.h1, minRatio.h2)),
        max_protocol_spread: round(Math.max(maxSpread.h1, maxSpread.h2)),
        h2c_floor_ratio: finite(h2FloorRatio),
        short_path_max_gain: finite(shortPathGain),
        queues_list_req_s: figures.queues_list_rest_h1_req_s ?? null,
        ...figures,
      }) + "\n",
    );
  } finally {
    await stop(baseline?.child);
    await stop(baselineH2c?.child);
    await stop(pluginOnly?.child);
    await stop(service?.child);
    await database.drop();
    for (const dir of [dataDir, ...pluginDirs]) await fs.rm(dir, { recursive: true, force: true });
  }
}

// Run as `npm run bench:http`; `http-profile.ts` imports the operations and targets only.
if (import.meta.main)
  main().catch((err: unknown) => {
    process.stderr.write(`bench failed: ${err instanceof Error ? err.stack : String(err)}\n`);
    process.exit(1);
  });
