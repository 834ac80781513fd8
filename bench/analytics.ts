/**
 * `npm run bench:analytics`: the SQL analytics store on PostgreSQL, end to end.
 *
 * 1. The query extensions on a large dataset (`analytics-dataset.ts`: 10,000,000
 *    events over 90 days, 100,000 users, 20 types of 5 properties, in a database of
 *    its own built once and reused): the service started on it, and over the last
 *    30 days, each through `POST /v1/analytics/query` or `/funnel` beside a plain
 *    SQL query of the same answer in the same run (the answers are compared, and a
 *    difference fails the run): unique users per day, a filtered count per day, a
 *    sum per day broken down by two properties, a 3-step funnel with a 7-day window.
 * 2. A fresh database on BENCH_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test)
 *    and the service started on it as a child process (its own CPU, as in production).
 * 3. Ingest: 1,000,000 events through `POST /v1/analytics/events`, batches of 1000,
 *    8 concurrent clients; the events cover the last 30 days in time order, as
 *    logged live, each with a `distinctId` (of 100,000 users), `plan` (20 values),
 *    `paid` (boolean) and `amount` (a number).
 * 4. Query: day buckets over 30 days grouped by `plan`, through `POST /v1/analytics/query`,
 *    p50 of 50 runs; against the same count by a plain
 *    `SELECT date_trunc('day', at), properties->>'plan', count(*) ... GROUP BY` over the raw
 *    events in the same database, p50 of 50 runs.
 * 5. Spread ingest: the same number of events, every batch spread over all 30 days (each
 *    batch touches every day's rollup rows, the worst case), from 8 concurrent clients and
 *    then from 1, each into an app of its own.
 *
 * The last line of output is one JSON object:
 * {"ingest_events_per_s","ingest_service_cpu_us_per_event","ingest_postgres_cpu_us_per_event","query_p50_ms","naive_sql_p50_ms","query_speedup",
 *  "spread_ingest_events_per_s","spread_ingest_1_client_events_per_s",
 *  "unique_day_30d_p50_ms","unique_day_30d_vs_naive_p50_ms", and the same pair for
 *  "filtered_count_30d", "sum_groupby2_30d" and "funnel3_30d", "dataset_events"}.
 * Knobs: BENCH_EVENTS (default 1000000), BENCH_CLIENTS (8), BENCH_RUNS (50),
 * BENCH_SPREAD=random (every batch spread over the 30 days instead of in time order),
 * BENCH_SPREAD_INGEST=0 (skip part 5),
 * BENCH_DATASET_EVENTS (10000000), BENCH_DATASET=0 (skip part 1). BENCH_SHORT=1 (the CI
 * smoke): a dataset of 100,000 events and 2,000 users, 20,000 events ingested, 5 runs.
 */
import type { ChildProcess } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import pg from "pg";
import { measureDataset } from "./analytics-dataset-queries.ts";
import { adminCall, createBenchDatabase, log, NO_RATE_LIMITS, startService } from "./support.ts";

const BASE_URL = process.env.BENCH_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const SHORT = process.env.BENCH_SHORT === "1";
const TOTAL = Number(process.env.BENCH_EVENTS ?? (SHORT ? 20_000 : 1_000_000));
const BATCH = 1000;
const CLIENTS = Number(process.env.BENCH_CLIENTS ?? 8);
const RUNS = Number(process.env.BENCH_RUNS ?? (SHORT ? 5 : 50));
/** Events carry a distinctId of this many users, as the large dataset's do. */
const USERS = Number(process.env.BENCH_USERS ?? 100_000);
const DAY = 86_400_000;
/** BENCH_SPREAD_INGEST=0 skips part 5. */
const SPREAD_INGEST = process.env.BENCH_SPREAD_INGEST !== "0";

/** CPU seconds used so far by a process (utime + stime from /proc), or NaN where /proc is missing. */
async function cpuSeconds(pid: number): Promise<number> {
  try {
    const stat = await fs.readFile(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return Number.NaN;
  }
}

/** CPU seconds of every postgres process on this machine (other users of the server included). */
async function postgresCpuSeconds(): Promise<number> {
  let total = 0;
  for (const entry of await fs.readdir("/proc").catch(() => [] as string[])) {
    if (!/^\d+$/.test(entry)) continue;
    const comm = await fs.readFile(`/proc/${entry}/comm`, "utf8").catch(() => "");
    if (comm.trim() === "postgres") total += (await cpuSeconds(Number(entry))) || 0;
  }
  return total;
}

/**
 * CPU seconds used so far by each backend of one database (the service's own connections), by pid: unlike
 * every postgres process's, it leaves out what others' work on the same server costs.
 */
async function backendCpuSeconds(databaseUrl: string, database: string): Promise<Map<number, number>> {
  const c = new pg.Client({ connectionString: databaseUrl });
  await c.connect();
  try {
    const r = await c.query<{ pid: number }>(
      "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
      [database],
    );
    return new Map(await Promise.all(r.rows.map(async (row) => [row.pid, await cpuSeconds(row.pid)] as const)));
  } finally {
    await c.end();
  }
}

function p50(samples: number[]): number {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.floor((sorted.length - 1) / 2)];
}

async function main(): Promise<void> {
  // Part 1: the query extensions on the large dataset, with a service of its own.
  const insights =
    process.env.BENCH_DATASET === "0"
      ? {}
      : await measureDataset({
          baseUrl: BASE_URL,
          shape: {
            events: Number(process.env.BENCH_DATASET_EVENTS ?? (SHORT ? 100_000 : 10_000_000)),
            days: 90,
            users: SHORT ? 2_000 : 100_000,
            types: 20,
          },
          runs: RUNS,
        });
  const database = await createBenchDatabase(BASE_URL);
  const databaseUrl = database.url;
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
    const service = await startService({ databaseUrl, dataDir, adminToken, env: { MONGODB_URL: "" } });
    server = service.child;
    const base = service.url;
    const callAdmin = (rpc: string, body: unknown) => adminCall(base, adminToken, rpc, body);
    /** A new app with a token and the `pageview` type; a caller for its token. */
    const newApp = async (name: string) => {
      const { app } = await callAdmin("CreateApp", { name });
      await callAdmin("UpdateApp", { appId: app.id, limits: { eventsPerDay: 1_000_000_000, ...NO_RATE_LIMITS } });
      const { token } = await callAdmin("IssueToken", { appId: app.id });
      const call = async (method: string, p: string, body?: string) => {
        const res = await fetch(base + p, {
          method,
          headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
          body,
        });
        const text = await res.text();
        if (!res.ok) throw new Error(`${method} ${p}: ${res.status} ${text}`);
        return JSON.parse(text);
      };
      await call(
        "POST",
        "/v1/analytics/types",
        JSON.stringify({
          name: "pageview",
          properties: { plan: "string", paid: "boolean", amount: "number" },
        }),
      );
      return { id: app.id as string, call };
    };

    // Every batch generated before the clock starts. As logged live, batches
    // arrive in time order: batch i holds the events of the i-th slice of the
    // 30 days (about 43 minutes each at 1,000,000 events). BENCH_SPREAD=random
    // instead spreads every batch over all 30 days (the rollups' worst case).
    const now = Date.now();
    const oldest = now - 30 * DAY;
    const batches = Math.ceil(TOTAL / BATCH);
    const slice = (now - oldest) / batches;
    const random = process.env.BENCH_SPREAD === "random";
    const plans = Array.from({ length: 20 }, (_, i) => `plan-${String(i).padStart(2, "0")}`);
    const makeBodies = (spread: boolean) =>
      Array.from({ length: batches }, (_, b) =>
        JSON.stringify({
          events: Array.from({ length: BATCH }, () => ({
            type: "pageview",
            at: spread
              ? oldest + Math.floor(Math.random() * (now - oldest))
              : Math.floor(oldest + (b + Math.random()) * slice),
            properties: {
              plan: plans[Math.floor(Math.random() * plans.length)],
              paid: Math.random() < 0.3,
              amount: Math.floor(Math.random() * 10_000) / 100,
            },
            distinctId: `user-${Math.floor(Math.random() * USERS)}`,
          })),
        }),
      );

    /** Posts every body over `clients` concurrent clients; events per second, with the CPU each side used. */
    const ingest = async (
      label: string,
      // eslint-disable-next-line @typescript-eslint/no-explicit-any
      call: (method: string, p: string, body?: string) => Promise<any>,
      bodies: string[],
      clients: number,
    ) => {
      let next = 0;
      let recorded = 0;
      log(`${label}: ingesting ${bodies.length * BATCH} events in batches of ${BATCH} over ${clients} clients...`);
      const cpuBefore = {
        server: await cpuSeconds(server!.pid!),
        postgres: await postgresCpuSeconds(),
        backends: await backendCpuSeconds(databaseUrl, database.name),
        client: process.cpuUsage(),
      };
      const started = performance.now();
      await Promise.all(
        Array.from({ length: clients }, async () => {
          while (next < bodies.length) {
            const i = next++;
            const res = (await call("POST", "/v1/analytics/events", bodies[i])) as { recorded: number };
            recorded += res.recorded;
          }
        }),
      );
      const seconds = (performance.now() - started) / 1000;
      const rate = recorded / seconds;
      log(`${label}: ingested ${recorded} events in ${seconds.toFixed(1)} s: ${Math.round(rate)} events/s`);
      const clientCpu = process.cpuUsage(cpuBefore.client);
      const serverCpu = (await cpuSeconds(server!.pid!)) - cpuBefore.server;
      let backendCpu = 0;
      for (const [pid, now] of await backendCpuSeconds(databaseUrl, database.name))
        backendCpu += now - (cpuBefore.backends.get(pid) ?? 0);
      const perEvent = (seconds: number) => Math.round((seconds / recorded) * 1e7) / 10;
      log(
        `${label}: CPU per event: service ${perEvent(serverCpu)} µs, the service's PostgreSQL backends ${perEvent(backendCpu)} µs`,
      );
      log(
        `${label}: CPU during ingest: service ${((await cpuSeconds(server!.pid!)) - cpuBefore.server).toFixed(1)} s, ` +
          `postgres ${((await postgresCpuSeconds()) - cpuBefore.postgres).toFixed(1)} s, ` +
          `bench clients ${((clientCpu.user + clientCpu.system) / 1e6).toFixed(1)} s, on ${os.cpus().length} cores (load ${os.loadavg()[0].toFixed(1)})`,
      );
      return { rate, serviceCpuUs: perEvent(serverCpu), postgresCpuUs: perEvent(backendCpu) };
    };

    const app = await newApp("bench");
    const call = app.call;
    const timeOrdered = await ingest(random ? "spread" : "time-ordered", call, makeBodies(random), CLIENTS);

    const direct = new pg.Client({ connectionString: databaseUrl });
    await direct.connect();
    await direct.query("VACUUM ANALYZE analytics_events");
    await direct.query("VACUUM ANALYZE analytics_daily");

    const since = Math.floor(oldest / DAY) * DAY;
    const queryBody = JSON.stringify({ type: "pageview", since, until: now, interval: "day", groupBy: "plan" });
    const apiTimes: number[] = [];
    let apiTotal = 0;
    for (let i = 0; i < RUNS + 3; i++) {
      const t0 = performance.now();
      const res = await call("POST", "/v1/analytics/query", queryBody);
      const ms = performance.now() - t0;
      if (i >= 3) apiTimes.push(ms); // the first runs warm caches
      apiTotal = res.total;
    }
    log(`API query: p50 ${p50(apiTimes).toFixed(1)} ms, total ${apiTotal}, ${RUNS} runs`);

    const naive = `
      SELECT date_trunc('day', at) AS day, properties->>'plan' AS plan, count(*) AS n
      FROM analytics_events
      WHERE app_id = $1 AND type = $2 AND at >= $3 AND at < $4
      GROUP BY 1, 2 ORDER BY 1, 2`;
    const naiveTimes: number[] = [];
    let naiveTotal = 0;
    for (let i = 0; i < RUNS + 1; i++) {
      const t0 = performance.now();
      const res = await direct.query<{ n: string }>(naive, [app.id, "pageview", new Date(since), new Date(now)]);
      const ms = performance.now() - t0;
      if (i >= 1) naiveTimes.push(ms);
      naiveTotal = res.rows.reduce((n, r) => n + Number(r.n), 0);
    }
    await direct.end();
    log(`naive SQL: p50 ${p50(naiveTimes).toFixed(1)} ms, total ${naiveTotal}, ${RUNS} runs`);
    if (naiveTotal !== apiTotal) throw new Error(`the API counted ${apiTotal} events, plain SQL ${naiveTotal}`);

    // Ingest spread over the 30 days (every batch touches every day: the rollups'
    // worst case), once over 8 clients and once over 1, each into an app of its own.
    const spreadBodies = SPREAD_INGEST ? makeBodies(true) : [];
    const spreadRate = SPREAD_INGEST
      ? (await ingest("spread, 8 clients", (await newApp("bench-spread-8")).call, spreadBodies, 8)).rate
      : Number.NaN;
    const spread1Rate = SPREAD_INGEST
      ? (await ingest("spread, 1 client", (await newApp("bench-spread-1")).call, spreadBodies, 1)).rate
      : Number.NaN;

    const queryP50 = p50(apiTimes);
    const naiveP50 = p50(naiveTimes);
    const result = {
      ingest_events_per_s: Math.round(timeOrdered.rate),
      ingest_service_cpu_us_per_event: timeOrdered.serviceCpuUs,
      ingest_postgres_cpu_us_per_event: timeOrdered.postgresCpuUs,
      query_p50_ms: Math.round(queryP50 * 100) / 100,
      naive_sql_p50_ms: Math.round(naiveP50 * 100) / 100,
      query_speedup: Math.round((naiveP50 / queryP50) * 10) / 10,
      ...(SPREAD_INGEST && {
        spread_ingest_events_per_s: Math.round(spreadRate),
        spread_ingest_1_client_events_per_s: Math.round(spread1Rate),
      }),
      ...insights,
    };
    await cleanup();
    process.stdout.write(`${JSON.stringify(result)}\n`);
  } catch (err) {
    await cleanup().catch(() => {});
    throw err;
  }
}

await main();
