/**
 * `node bench/http-profile.ts`: where the service's CPU goes per request, by
 * layer, for each protocol of `bench:http` (the per-request breakdown in
 * docs/benchmarks.md comes from it).
 *
 * The service is started as `bench:http` starts it, with `--cpu-prof`, on a
 * fresh database holding the same data; each selected operation and protocol
 * is loaded in turn (the same load generator and requests as `bench:http`),
 * and the counted seconds of each are cut out of the one profile by time
 * (the profile's clock is the monotonic clock `process.hrtime` reads). Each
 * sample's self time is given to a layer by the file of its function (auth,
 * router and fastify, the short path, Connect, protobuf, metrics, logging,
 * limits, the database client, Node's HTTP layers, garbage collection), and
 * divided by the requests answered in that window: microseconds of CPU per
 * request. `(idle)` is the thread waiting, not CPU; the rest adds up to about
 * the server CPU per request `bench:http` logs.
 *
 * The bare baselines (`baseline`, `baseline_h2c`) are profiled the same way,
 * so the layers of the two can be compared. The reads only (no puts).
 * BENCH_OPS narrows it as in `bench:http`, BENCH_PROFILE_PROTOCOLS (comma-separated, the
 * baselines included) picks the protocols; BENCH_SECONDS
 * (default 4) per run after BENCH_WARMUP_SECONDS (1). The last line is one
 * JSON object: `{ "<operation>_<protocol>": { "<layer>": µs, ... }, ... }`.
 * BENCH_PROFILE_KEEP=DIR keeps the `.cpuprofile` there (to open in a profiler).
 */
import type { ChildProcess } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { OPERATIONS, startBaseline, target, type Protocol } from "./http.ts";
import { runLoad } from "./http-load.ts";
import { adminCall, createBenchDatabase, log, NO_RATE_LIMITS, startService } from "./support.ts";

const BASE_URL = process.env.BENCH_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const SECONDS = Number(process.env.BENCH_SECONDS ?? 4);
const WARMUP_SECONDS = Number(process.env.BENCH_WARMUP_SECONDS ?? 1);
const OPS = new Set((process.env.BENCH_OPS ?? "event_types_list,models_list").split(","));
const PROTOCOLS = (
  process.env.BENCH_PROFILE_PROTOCOLS ??
  "baseline,rest_h1,connect_json,connect_proto,grpc_web,baseline_h2c,rest_h2c,connect_json_h2,grpc"
).split(",") as (Protocol | "baseline" | "baseline_h2c")[];

/** The layer of a profile node, from its function's file (first match wins). */
const LAYERS: [string, RegExp][] = [
  ["(idle)", /^\(idle\)$/],
  ["gc", /^\(garbage collector\)$/],
  ["auth", /src\/core\/(auth|apps\/|batcher)/],
  ["short path", /src\/core\/http\/(connect-short-path|call-context|client-gone|end-response|rpc-errors)/],
  ["rest router", /src\/core\/http\/(rest-router|validation|delivery-watch)|node_modules\/zod\//],
  [
    "server hooks",
    /src\/core\/http\/(http-server|request-logger|one-port|starting-gate|security-headers|error-handler)/,
  ],
  ["metrics", /node_modules\/prom-client\/|src\/core\/metrics/],
  ["request counts", /src\/core\/request-counts\//],
  ["logging", /node_modules\/(pino|pino-std-serializers|fast-redact|sonic-boom)\//],
  ["limits", /src\/core\/(limits\/|fair-gate|quotas\/|tenant)/],
  ["connect", /node_modules\/@connectrpc\//],
  ["protobuf", /node_modules\/@bufbuild\/protobuf\//],
  [
    "fastify",
    /node_modules\/(fastify|find-my-way|@fastify\/|avvio|light-my-request|fast-json-stringify|toad-cache|fast-querystring|safe-regex2|ret|abstract-logging|process-warning|rfdc|secure-json-parse)/,
  ],
  [
    "database",
    /node_modules\/(pg|pg-protocol|pg-pool|pg-types|postgres-|kysely|packet-reader|buffer-writer)|src\/core\/database\//,
  ],
  ["facility", /src\/(analytics|inference|queues|mail|secrets|admin|meta)\//],
  ["node http/1.1", /node:_http|node:internal\/http(?!2)|^node:http$/],
  ["node http/2", /node:internal\/http2|node:http2/],
  ["node net/streams", /node:(net|internal\/streams|stream|internal\/stream_base)/],
  ["node other", /^node:/],
  ["native", /^$/],
];

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string };
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  startTime: number;
  samples: number[];
  timeDeltas: number[];
}

function layerOf(node: ProfileNode): string {
  const { url, functionName } = node.callFrame;
  const key = url === "" ? functionName : url;
  for (const [layer, re] of LAYERS) if (re.test(key) || (url === "" && re.test(functionName))) return layer;
  if (url === "") return "native";
  return /node_modules\//.test(url) ? "other packages" : "other service code";
}

/** Microseconds of CPU per request, by layer, in the window [from, to] (µs of the monotonic clock). */
function breakdown(profile: Profile, from: number, to: number, requests: number): Record<string, number> {
  const nodes = new Map(profile.nodes.map((n) => [n.id, n]));
  const layers: Record<string, number> = {};
  const functions = new Map<string, number>();
  let t = profile.startTime;
  for (let i = 0; i < profile.samples.length; i++) {
    t += profile.timeDeltas[i];
    if (t < from || t > to) continue;
    // A sample's time is the delta to the next one.
    const d = profile.timeDeltas[i + 1] ?? 0;
    const node = nodes.get(profile.samples[i])!;
    const layer = layerOf(node);
    layers[layer] = (layers[layer] ?? 0) + d;
    if (TOP > 0) {
      const name = `${node.callFrame.functionName || "(anonymous)"} ${node.callFrame.url.replace(/^.*\/(node_modules|src)\//, "$1/")}`;
      functions.set(name, (functions.get(name) ?? 0) + d);
    }
  }
  for (const [name, us] of [...functions].sort((a, b) => b[1] - a[1]).slice(0, TOP))
    log(`  ${(us / requests).toFixed(1).padStart(6)} µs  ${name}`);
  const out: Record<string, number> = {};
  let cpu = 0;
  for (const [layer, us] of Object.entries(layers).sort((a, b) => b[1] - a[1])) {
    out[layer] = Math.round((us / requests) * 10) / 10;
    if (layer !== "(idle)") cpu += us;
  }
  out.total_cpu = Math.round((cpu / requests) * 10) / 10;
  return out;
}

/** BENCH_PROFILE_TOP=n also logs each window's n functions of most self time. */
const TOP = Number(process.env.BENCH_PROFILE_TOP ?? 0);

const nowUs = () => Number(process.hrtime.bigint() / 1000n);

async function main(): Promise<void> {
  const database = await createBenchDatabase(BASE_URL, "pb_bench_http_prof");
  const dbUrl = new URL(database.url);
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), "pb-bench-http-prof-"));
  const profDir = process.env.BENCH_PROFILE_KEEP ?? (await fs.mkdtemp(path.join(os.tmpdir(), "pb-bench-http-cpu-")));
  const adminToken = "pba_bench_" + crypto.randomBytes(24).toString("base64url");
  const previous = process.env.BENCH_NODE_ARGS;
  process.env.BENCH_NODE_ARGS = `${previous ?? ""} --cpu-prof --cpu-prof-dir=${profDir}`;
  const service = await startService({
    databaseUrl: dbUrl.toString(),
    dataDir,
    adminToken,
    env: { SECRETS_KEY: crypto.randomBytes(32).toString("base64") },
  });
  const windows: { key: string; pid: number; from: number; to: number; requests: number }[] = [];
  const baselines: ChildProcess[] = [];
  try {
    const { url } = service;
    const token = await appToken(url, adminToken, "bench");
    for (const name of ["signup", "login", "purchase", "page_view", "logout"]) {
      const res = await fetch(`${url}/v1/analytics/types`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify({ name, properties: { plan: "string", seats: "number", trial: "boolean" } }),
      });
      if (!res.ok) throw new Error(`event type: ${res.status}`);
    }
    const bare = {
      baseline: await startBaseline(dbUrl.toString(), appId(token), "", false),
      baseline_h2c: await startBaseline(dbUrl.toString(), appId(token), "", true),
    };
    baselines.push(bare.baseline.child, bare.baseline_h2c.child);
    let run = 0;
    for (const op of OPERATIONS) {
      if (!OPS.has(op.key) || op.method === "POST") continue;
      for (const protocol of PROTOCOLS) {
        const server = protocol === "baseline" || protocol === "baseline_h2c" ? bare[protocol] : service;
        const t = target(op, protocol, server.url, token, run++);
        const start = nowUs();
        const r = await runLoad(t, { concurrency: 64, h2Sessions: 4, warmupSeconds: WARMUP_SECONDS, seconds: SECONDS });
        if (r.errors > 0) throw new Error(`${op.key} over ${protocol}: ${r.errors} errors (${r.firstError})`);
        const from = start + WARMUP_SECONDS * 1e6;
        windows.push({
          key: `${op.key}_${protocol}`,
          pid: server.child.pid!,
          from,
          to: from + SECONDS * 1e6,
          requests: r.requests,
        });
        log(`${op.key} ${protocol}: ${Math.round(r.reqPerS)} req/s`);
      }
    }
  } finally {
    for (const child of [service.child, ...baselines]) {
      const exited = new Promise((r) => child.once("exit", r));
      child.kill("SIGTERM");
      await exited;
    }
    await database.drop();
    await fs.rm(dataDir, { recursive: true, force: true });
  }
  // One profile per process, named `CPU.<date>.<time>.<pid>.<n>.<n>.cpuprofile`.
  const files = await fs.readdir(profDir);
  const profiles = new Map<number, Profile>();
  const profileOf = async (pid: number) => {
    if (!profiles.has(pid)) {
      const file = files.find((f) => f.endsWith(".cpuprofile") && f.split(".")[3] === String(pid));
      if (!file) throw new Error(`no profile of ${pid} in ${profDir}`);
      profiles.set(pid, JSON.parse(await fs.readFile(path.join(profDir, file), "utf8")) as Profile);
    }
    return profiles.get(pid)!;
  };
  const result: Record<string, Record<string, number>> = {};
  for (const w of windows) {
    if (TOP > 0) log(w.key);
    result[w.key] = breakdown(await profileOf(w.pid), w.from, w.to, w.requests);
    log(
      `${w.key}: ${Object.entries(result[w.key])
        .map(([k, v]) => `${k} ${v}`)
        .join(", ")}`,
    );
  }
  if (!process.env.BENCH_PROFILE_KEEP) await fs.rm(profDir, { recursive: true, force: true });
  process.stdout.write(JSON.stringify(result) + "\n");
}

const appIds = new Map<string, string>();
const appId = (token: string) => appIds.get(token)!;

async function appToken(url: string, adminToken: string, name: string): Promise<string> {
  const { app } = await adminCall(url, adminToken, "CreateApp", { name });
  await adminCall(url, adminToken, "UpdateApp", { appId: app.id, limits: NO_RATE_LIMITS });
  const { token } = await adminCall(url, adminToken, "IssueToken", { appId: app.id });
  appIds.set(token as string, app.id as string);
  return token as string;
}

main().catch((err: unknown) => {
  process.stderr.write(`bench failed: ${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
