/**
 * `npm run bench:fairness`: one app cannot hurt another. On PostgreSQL, end to end.
 *
 * A fresh database on BENCH_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test)
 * and the service started on it as a child process (the node flags of `npm start`), with
 * two apps on their default limits:
 * - app B runs a fixed, paced workload: every BENCH_ROUND_MS (100) one round of a put, a
 *   listing of its queues, a consume + ack of the message it put, and an analytics query
 *   (day buckets over a week), each timed;
 * - app A floods as fast as it can: BENCH_INGEST_CLIENTS (4) clients logging batches of 1000
 *   events, BENCH_PUT_CLIENTS (8) clients putting, BENCH_LONG_POLLS (300) consumes waiting
 *   on an empty queue, and BENCH_STREAMS (150) gRPC `StreamMessages` streams; a refused call
 *   is made again at once (a misbehaving app ignores `Retry-After`).
 *
 * B runs BENCH_SECONDS (20) alone (the baseline), then as long again under A's flood (A's
 * clients run in a worker thread, so that their work does not delay B's timings).
 * BENCH_SHORT=1 (CI's benchmark smoke) runs 3 s each with a smaller flood, to show that it
 * runs, not to measure.
 *
 * The last line of output is one JSON object:
 * {"put_p50_ratio","put_p99_ratio","list_p50_ratio","list_p99_ratio","consume_ack_p50_ratio",
 *  "consume_ack_p99_ratio","query_p50_ratio","query_p99_ratio","a_throttled_share","a_requests",
 *  "a_events_per_s","a_puts_per_s","rss_mb","peak_rss_mb","load_avg","idle":{op:{p50,p99}},"flood":{op:{p50,p99}}}
 * (ratios: B's latency under the flood over B's latency alone; the throttled share: the part
 * of A's calls answered 429). Goal on a quiet machine: every p99 ratio <= 2, every p50 ratio
 * <= 1.5, RSS <= 300 MB. `load_avg` is the machine's 1-minute load average at the start of each phase and at
 * the end ([idle, flood, end]): on a machine shared with other work the ratios follow it, so a figure is read
 * with it. BENCH_CHECKOUT serves another checkout's `src/` (e.g. an earlier commit exported with `git archive`,
 * its `node_modules` linked to this one's), so that runs of two versions can be alternated in one window.
 */
import type { ChildProcess } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { isMainThread, parentPort, Worker, workerData } from "node:worker_threads";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { QueueService } from "../gen/platform/queues/v1/queues_pb.js";
import { adminCall, createBenchDatabase, jsonClient, log, startService } from "./support.ts";

const SHORT = process.env.BENCH_SHORT === "1";
const BASE_URL = process.env.BENCH_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const knob = (name: string, full: number, short: number) => Number(process.env[name] ?? (SHORT ? short : full));
const SECONDS = knob("BENCH_SECONDS", 20, 3);
const ROUND_MS = knob("BENCH_ROUND_MS", 100, 100);
const INGEST_CLIENTS = knob("BENCH_INGEST_CLIENTS", 4, 2);
const PUT_CLIENTS = knob("BENCH_PUT_CLIENTS", 8, 2);
const LONG_POLLS = knob("BENCH_LONG_POLLS", 300, 20);
const STREAMS = knob("BENCH_STREAMS", 150, 10);
const OPS = ["put", "list", "consume_ack", "query"] as const;
type Op = (typeof OPS)[number];

async function procStatus(pid: number): Promise<{ rssMb: number; hwmMb: number }> {
  const status = await fs.readFile(`/proc/${pid}/status`, "utf8");
  const kb = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+)`, "m").exec(status)?.[1] ?? 0);
  return { rssMb: kb("VmRSS") / 1024, hwmMb: kb("VmHWM") / 1024 };
}

function percentile(samples: number[], p: number): number {
  if (samples.length === 0) return Number.NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((sorted.length - 1) * p))];
}

const round = (n: number, digits = 2) => Math.round(n * 10 ** digits) / 10 ** digits;

/** B's paced rounds for `seconds`: each operation's latencies (ms). Every answer must be a 200. */
async function paced(base: string, token: string, seconds: number): Promise<Record<Op, number[]>> {
  const client = jsonClient(base, token, 4);
  const samples: Record<Op, number[]> = { put: [], list: [], consume_ack: [], query: [] };
  const timed = async (op: Op, run: () => Promise<{ status: number; body: unknown }>) => {
    const started = performance.now();
    const res = await run();
    samples[op].push(performance.now() - started);
    if (res.status !== 200) throw new Error(`app B's ${op}: ${res.status} ${JSON.stringify(res.body)}`);
    return res;
  };
  const since = new Date(Date.now() - 7 * 86_400_000).toISOString();
  const end = Date.now() + seconds * 1000;
  for (let next = Date.now(); next < end; next += ROUND_MS) {
    await new Promise((r) => setTimeout(r, Math.max(0, next - Date.now())));
    await timed("put", () => client.request("POST", "/v1/queues/b-jobs", { payload: { at: Date.now() } }));
    await timed("list", () => client.request("GET", "/v1/queues"));
    const started = performance.now();
    const consumed = await client.request("POST", "/v1/queues/b-jobs/consume", { waitSeconds: 1 });
    const receipt = (consumed.body as { message?: { receipt: string } } | undefined)?.message?.receipt;
    if (consumed.status !== 200 || !receipt) throw new Error(`app B's consume: ${consumed.status}`);
    const acked = await client.request("POST", "/v1/queues/_ack", { receipt });
    if (acked.status !== 200) throw new Error(`app B's ack: ${acked.status}`);
    samples.consume_ack.push(performance.now() - started);
    await timed("query", () =>
      client.request("POST", "/v1/analytics/query", { type: "visit", since, interval: "day", groupBy: "page" }),
    );
  }
  client.agent.destroy();
  return samples;
}

type FloodKind = "ingest" | "put" | "long_poll" | "stream";

interface FloodCounts {
  requests: number;
  refused: number;
  events: number;
  puts: number;
  other: number;
  /** Calls and refusals of each kind of A's calls. */
  byKind: Record<FloodKind, { calls: number; refused: number }>;
}

/** A's flood until `stop` aborts. */
function flood(base: string, token: string, stop: AbortSignal): Promise<FloodCounts> {
  const counts: FloodCounts = {
    requests: 0,
    refused: 0,
    events: 0,
    puts: 0,
    other: 0,
    byKind: {
      ingest: { calls: 0, refused: 0 },
      put: { calls: 0, refused: 0 },
      long_poll: { calls: 0, refused: 0 },
      stream: { calls: 0, refused: 0 },
    },
  };
  const client = jsonClient(base, token, INGEST_CLIENTS + PUT_CLIENTS + LONG_POLLS + 8);
  const count = (status: number, kind: FloodKind) => {
    counts.requests++;
    counts.byKind[kind].calls++;
    if (status === 429) {
      counts.refused++;
      counts.byKind[kind].refused++;
    }
    if (status !== 200 && status !== 429) counts.other++;
    return status === 200;
  };
  const batch = {
    events: Array.from({ length: 1000 }, (_, i) => ({ type: "click", properties: { n: i % 10 } })),
  };
  const loops: Promise<void>[] = [];
  for (let i = 0; i < INGEST_CLIENTS; i++)
    loops.push(
      (async () => {
        while (!stop.aborted)
          if (count((await client.request("POST", "/v1/analytics/events", batch)).status, "ingest"))
            counts.events += 1000;
      })(),
    );
  for (let i = 0; i < PUT_CLIENTS; i++)
    loops.push(
      (async () => {
        while (!stop.aborted)
          if (count((await client.request("POST", "/v1/queues/a-jobs", { payload: { i } })).status, "put"))
            counts.puts++;
      })(),
    );
  for (let i = 0; i < LONG_POLLS; i++)
    loops.push(
      (async () => {
        while (!stop.aborted)
          count((await client.request("POST", "/v1/queues/a-idle/consume", { waitSeconds: 2 })).status, "long_poll");
      })(),
    );
  const queues = createClient(
    QueueService,
    createGrpcTransport({
      baseUrl: base,
      interceptors: [
        (next) => (req) => {
          req.header.set("authorization", `Bearer ${token}`);
          return next(req);
        },
      ],
    }),
  );
  for (let i = 0; i < STREAMS; i++)
    loops.push(
      (async () => {
        while (!stop.aborted) {
          try {
            counts.requests++;
            counts.byKind.stream.calls++;
            for await (const res of queues.streamMessages({ queue: "a-stream", window: 10 }, { signal: stop }))
              void res;
          } catch (err) {
            if (err instanceof ConnectError && err.code === Code.ResourceExhausted) {
              counts.refused++;
              counts.byKind.stream.refused++;
            } else if (!stop.aborted) counts.other++;
          }
        }
      })(),
    );
  return Promise.all(loops).then(() => {
    client.agent.destroy();
    return counts;
  });
}

async function main(): Promise<void> {
  const database = await createBenchDatabase(BASE_URL);
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), "pb-bench-"));
  const adminToken = `pba_bench_${crypto.randomBytes(24).toString("base64url")}`;

  let server: ChildProcess | undefined;
  const cleanup = async () => {
    server?.kill("SIGTERM");
    if (server && server.exitCode === null) await new Promise((r) => server!.once("exit", r));
    await database.drop();
    await fs.rm(dataDir, { recursive: true, force: true });
  };

  try {
    const service = await startService({
      databaseUrl: database.url,
      dataDir,
      adminToken,
      env: { MONGODB_URL: "" },
      checkout: process.env.BENCH_CHECKOUT,
    });
    server = service.child;
    const base = service.url;
    const callAdmin = (rpc: string, body: unknown) => adminCall(base, adminToken, rpc, body);
    /** An app on the default limits (a daily event cap that a long flood does not spend first), and its token. */
    const newApp = async (name: string, type: string, properties: Record<string, string>) => {
      const { app } = await callAdmin("CreateApp", { name });
      await callAdmin("UpdateApp", { appId: app.id, limits: { eventsPerDay: 1_000_000_000 } });
      const { token } = (await callAdmin("IssueToken", { appId: app.id })) as { token: string };
      const res = await jsonClient(base, token, 1).request("POST", "/v1/analytics/types", { name: type, properties });
      if (res.status !== 200) throw new Error(`register ${type}: ${res.status}`);
      return token;
    };
    const tokenA = await newApp("flooder", "click", { n: "number" });
    const tokenB = await newApp("steady", "visit", { page: "string" });
    // B's query has something to count: a week of visits.
    const b = jsonClient(base, tokenB, 1);
    const week = Date.now() - 7 * 86_400_000;
    const visits = Array.from({ length: 1000 }, (_, i) => ({
      type: "visit",
      at: week + i * 600_000,
      properties: { page: `/p${i % 20}` },
    }));
    if ((await b.request("POST", "/v1/analytics/events", { events: visits })).status !== 200)
      throw new Error("B's visits were not logged");
    b.agent.destroy();

    const loads = [os.loadavg()[0]];
    log(`1. app B alone for ${SECONDS} s (a round every ${ROUND_MS} ms)`);
    const idle = await paced(base, tokenB, SECONDS);

    log(
      `2. app B under app A's flood for ${SECONDS} s (${INGEST_CLIENTS} ingest, ${PUT_CLIENTS} put, ` +
        `${LONG_POLLS} long-poll and ${STREAMS} stream clients)`,
    );
    // The flood runs in a thread of its own: its client work (a batch of 1000 events serialised per call)
    // must not delay B's timings in this thread.
    const worker = new Worker(new URL(import.meta.url), { workerData: { base, token: tokenA } });
    const flooding = new Promise<FloodCounts>((resolve, reject) => {
      worker.once("message", resolve);
      worker.once("error", reject);
    });
    // A failure of B's rounds must be the one reported, not the flood's refused connections once the service stops.
    flooding.catch(() => undefined);
    // The flood first fills what it can (waiting consumes, streams) before B is measured.
    await new Promise((r) => setTimeout(r, SHORT ? 500 : 2000));
    loads.push(os.loadavg()[0]);
    const floodStarted = performance.now();
    const underFlood = await paced(base, tokenB, SECONDS);
    const floodSeconds = (performance.now() - floodStarted) / 1000;
    const memory = await procStatus(server.pid!);
    loads.push(os.loadavg()[0]);
    worker.postMessage("stop");
    const counts = await flooding;
    await worker.terminate();

    const summary = (s: Record<Op, number[]>) =>
      Object.fromEntries(
        OPS.map((op) => [op, { p50: round(percentile(s[op], 0.5)), p99: round(percentile(s[op], 0.99)) }]),
      ) as Record<Op, { p50: number; p99: number }>;
    const before = summary(idle);
    const after = summary(underFlood);
    const ratios: Record<string, number> = {};
    for (const op of OPS) {
      ratios[`${op}_p50_ratio`] = round(after[op].p50 / before[op].p50);
      ratios[`${op}_p99_ratio`] = round(after[op].p99 / before[op].p99);
      log(`   ${op}: p50 ${before[op].p50} -> ${after[op].p50} ms, p99 ${before[op].p99} -> ${after[op].p99} ms`);
    }
    log(
      `   app A: ${counts.requests} calls, ${counts.refused} answered 429, ${counts.other} other failures; ` +
        `RSS ${round(memory.rssMb, 1)} MB (peak ${round(memory.hwmMb, 1)} MB); load average ${loads.map((l) => round(l)).join(", ")}`,
    );
    log(
      `   app A by kind (calls/429): ${Object.entries(counts.byKind)
        .map(([kind, c]) => `${kind} ${c.calls}/${c.refused}`)
        .join(", ")}`,
    );
    const result = {
      ...ratios,
      a_throttled_share: round(counts.refused / Math.max(1, counts.requests), 3),
      a_requests: counts.requests,
      a_events_per_s: Math.round(counts.events / floodSeconds),
      a_puts_per_s: Math.round(counts.puts / floodSeconds),
      rss_mb: round(memory.rssMb, 1),
      peak_rss_mb: round(memory.hwmMb, 1),
      load_avg: loads.map((l) => round(l)),
      idle: before,
      flood: after,
    };
    process.stdout.write(`${JSON.stringify(result)}\n`);
  } finally {
    await cleanup();
  }
}

if (isMainThread) {
  await main();
} else {
  // The flood's thread: floods until told to stop, then answers its counts.
  const { base, token } = workerData as { base: string; token: string };
  const stop = new AbortController();
  parentPort!.once("message", () => stop.abort());
  parentPort!.postMessage(await flood(base, token, stop.signal));
}
