/**
 * Part 1 of `bench:analytics`: the query extensions timed on the large dataset
 * (`analytics-dataset.ts`), through the service's REST API, each beside a plain
 * SQL query of the same answer on the same database in the same run. Every
 * pair's answers are compared (a difference fails the run), so the figures are
 * of the same work. Keys: `<name>_p50_ms` (the API) and `<name>_vs_naive_p50_ms`
 * (the plain query), for unique_day_30d, filtered_count_30d, sum_groupby2_30d and
 * funnel3_30d.
 */
import type { ChildProcess } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import pg from "pg";
import {
  DATASET_PROPERTIES,
  datasetDatabase,
  fillDataset,
  readMarker,
  recreateDatabase,
  typeName,
  type DatasetShape,
} from "./analytics-dataset.ts";
import { adminCall, log, NO_RATE_LIMITS, startService } from "./support.ts";

const DAY = 86_400_000;

function p50(samples: number[]): number {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.floor((sorted.length - 1) / 2)];
}

const ms2 = (v: number) => Math.round(v * 100) / 100;

/** A comparable form of an answer: rows as sorted strings, values to 9 significant digits. */
const canonical = (rows: (string | number | null)[][]) =>
  rows
    .map((r) => JSON.stringify(r.map((v) => (typeof v === "number" ? Number(v.toPrecision(9)) : v))))
    .sort()
    .join("\n");

interface Pair {
  name: string;
  runs: number;
  /** The service's answer through its API, in canonical form. */
  api: () => Promise<string>;
  /** A plain SQL query's answer, in the same form. */
  naive: () => Promise<string>;
}

export async function measureDataset(options: {
  baseUrl: string;
  shape: DatasetShape;
  runs: number;
}): Promise<Record<string, number>> {
  const { baseUrl, shape, runs } = options;
  const { name, url } = datasetDatabase(baseUrl, shape);
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), "pb-bench-dataset-"));
  // The database remembers its admin token and secrets key (every instance on it must share them), so both
  // are the same on every run, derived from the database's name: it is a benchmark's and holds no secret.
  const derived = (what: string) => crypto.createHash("sha256").update(`bench:${what}:${name}`).digest();
  const adminToken = `pba_bench_${derived("admin").toString("base64url")}`;
  let marker = await readMarker(url, shape);
  let server: ChildProcess | undefined;
  try {
    if (!marker) {
      log(`dataset: building ${shape.events} events in database ${name} (once; later runs reuse it)...`);
      await recreateDatabase(baseUrl, name);
    } else log(`dataset: reusing ${shape.events} events in database ${name}`);
    const secretsKey = derived("secrets").toString("base64");
    const service = await startService({
      databaseUrl: url,
      dataDir,
      adminToken,
      env: { MONGODB_URL: "", SECRETS_KEY: secretsKey },
    });
    server = service.child;
    const base = service.url;
    const callAdmin = (rpc: string, body: unknown) => adminCall(base, adminToken, rpc, body);
    if (!marker) {
      const { app } = await callAdmin("CreateApp", { name: "bench-dataset" });
      await callAdmin("UpdateApp", { appId: app.id, limits: { eventsPerDay: 1_000_000_000, ...NO_RATE_LIMITS } });
      const { token } = await callAdmin("IssueToken", { appId: app.id });
      for (let i = 0; i < shape.types; i++) {
        const res = await fetch(`${base}/v1/analytics/types`, {
          method: "POST",
          headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
          body: JSON.stringify({ name: typeName(i), properties: DATASET_PROPERTIES }),
        });
        if (!res.ok) throw new Error(`types: ${res.status} ${await res.text()}`);
      }
      const t0 = performance.now();
      marker = await fillDataset(url, app.id as string, shape);
      log(`dataset: built in ${((performance.now() - t0) / 1000).toFixed(0)} s`);
    }
    const { token } = await callAdmin("IssueToken", { appId: marker.appId });
    const call = async (p: string, body: unknown) => {
      const res = await fetch(base + p, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
        body: JSON.stringify(body),
      });
      const text = await res.text();
      if (!res.ok) throw new Error(`POST ${p}: ${res.status} ${text}`);
      return JSON.parse(text);
    };

    const direct = new pg.Client({ connectionString: url });
    await direct.connect();
    const until = marker.end;
    const since = Math.floor((until - 30 * DAY) / DAY) * DAY;
    const type = typeName(0);
    const args = [marker.appId, type, new Date(since), new Date(until)];
    const range = "app_id = $1 AND type = $2 AND at >= $3 AND at < $4";
    const day = "(extract(epoch FROM date_trunc('day', at, 'UTC')) * 1000)::float8";
    type Bucket = { at: number; groups?: (string | null)[]; value: number };
    const query = (extension: Record<string, unknown>) => async () => {
      const body = await call("/v1/analytics/query", { type, since, until, interval: "day", ...extension });
      return canonical((body.buckets as Bucket[]).map((b) => [b.at, ...(b.groups ?? []), b.value]));
    };
    const plain = (text: string) => async () => {
      const r = await direct.query({ text, values: args, rowMode: "array" });
      return canonical(
        (r.rows as unknown[][]).map(
          (row) =>
            row.map((v) => (typeof v === "string" && /^-?[\d.]+$/.test(v) ? Number(v) : v)) as (
              string | number | null
            )[],
        ),
      );
    };
    const windowSeconds = 7 * 86_400;
    const pairs: Pair[] = [
      {
        name: "unique_day_30d",
        runs,
        api: query({ aggregate: "unique" }),
        naive: plain(
          `SELECT ${day}, count(DISTINCT distinct_id)::float8 FROM analytics_events WHERE ${range} AND distinct_id IS NOT NULL GROUP BY 1`,
        ),
      },
      {
        name: "filtered_count_30d",
        runs,
        api: query({ aggregate: "count", where: [{ property: "plan", op: "eq", value: "plan-03" }] }),
        naive: plain(
          `SELECT ${day}, count(*)::float8 FROM analytics_events WHERE ${range} AND properties->>'plan' = 'plan-03' GROUP BY 1`,
        ),
      },
      {
        name: "sum_groupby2_30d",
        runs,
        api: query({ aggregate: "sum", of: "amount", groupBy: ["plan", "paid"] }),
        naive: plain(
          `SELECT ${day}, properties->>'plan', properties->>'paid', sum((numbers->>'amount')::float8)
           FROM analytics_events WHERE ${range} AND numbers ? 'amount' GROUP BY 1, 2, 3`,
        ),
      },
      {
        name: "funnel3_30d",
        runs: Math.max(3, Math.round(runs / 5)),
        api: async () => {
          const body = await call("/v1/analytics/funnel", {
            steps: [{ type: typeName(0) }, { type: typeName(1) }, { type: typeName(2) }],
            since,
            until,
            windowSeconds,
          });
          return canonical([(body.steps as { users: number }[]).map((s) => s.users)]);
        },
        // The obvious SQL: each starting user's first time, joined to the users' events of the next step
        // within the window, and so on (plain joins and GROUP BY; the later steps' events bounded by the range
        // and the window, which the answer implies).
        naive: async () => {
          const r = await direct.query({
            text: `
              WITH s0 AS (
                SELECT distinct_id AS d, min(at) AS t0 FROM analytics_events
                WHERE ${range} AND distinct_id IS NOT NULL GROUP BY 1
              ), s1 AS (
                SELECT s0.d, s0.t0, min(e.at) AS t1 FROM s0 JOIN analytics_events e ON e.distinct_id = s0.d
                WHERE e.app_id = $1 AND e.type = $5 AND e.at >= $3 AND e.at <= $4::timestamptz + $7 * interval '1 second'
                  AND e.at >= s0.t0 AND e.at <= s0.t0 + $7 * interval '1 second'
                GROUP BY 1, 2
              ), s2 AS (
                SELECT s1.d FROM s1 JOIN analytics_events e ON e.distinct_id = s1.d
                WHERE e.app_id = $1 AND e.type = $6 AND e.at >= $3 AND e.at <= $4::timestamptz + $7 * interval '1 second'
                  AND e.at >= s1.t1 AND e.at <= s1.t0 + $7 * interval '1 second'
                GROUP BY 1
              )
              SELECT (SELECT count(*) FROM s0)::float8, (SELECT count(*) FROM s1)::float8, (SELECT count(*) FROM s2)::float8`,
            values: [...args, typeName(1), typeName(2), windowSeconds],
            rowMode: "array",
          });
          return canonical(r.rows as number[][]);
        },
      },
    ];

    const out: Record<string, number> = { dataset_events: shape.events };
    for (const pair of pairs) {
      const api: number[] = [];
      const raw: number[] = [];
      let apiAnswer = "";
      let naiveAnswer = "";
      // The first run of each warms the caches and is not counted.
      for (let i = 0; i < pair.runs + 1; i++) {
        let t0 = performance.now();
        apiAnswer = await pair.api();
        if (i >= 1) api.push(performance.now() - t0);
        t0 = performance.now();
        naiveAnswer = await pair.naive();
        if (i >= 1) raw.push(performance.now() - t0);
      }
      if (apiAnswer !== naiveAnswer)
        throw new Error(`${pair.name}: the API and plain SQL answer differently:\n${apiAnswer}\n---\n${naiveAnswer}`);
      out[`${pair.name}_p50_ms`] = ms2(p50(api));
      out[`${pair.name}_vs_naive_p50_ms`] = ms2(p50(raw));
      log(`${pair.name}: API p50 ${p50(api).toFixed(1)} ms, plain SQL p50 ${p50(raw).toFixed(1)} ms (same answer)`);
    }
    await direct.end();
    return out;
  } finally {
    server?.kill("SIGTERM");
    if (server && server.exitCode === null) await new Promise((r) => server!.once("exit", r));
    await fs.rm(dataDir, { recursive: true, force: true });
  }
}
