/**
 * `npm run bench:overview`: the operator's overview (AdminService GetOverview) over
 * BENCH_APPS (1,000) apps on PostgreSQL, end to end.
 *
 * A fresh database on BENCH_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test), the
 * service started on it as a child process, then the apps and a day of their work written
 * straight into the tables the way the service keeps them: every app's request counts for the
 * day and its daily counters, 288 five-minute buckets of each facility, BENCH_MAIL (10) mails
 * per app (counted by the mail_log trigger), BENCH_QUEUE_APPS (100) apps with BENCH_MESSAGES (200)
 * messages each, half of them waiting for over an hour, and 20 dead letters on every tenth app.
 * Then BENCH_CALLS (50) GetOverview calls one after the other (after 3 not counted), each timed;
 * the answer is checked (apps, top app, totals) so that a fast wrong answer does not pass.
 *
 * The last line of output is one JSON object:
 * {"apps","messages","dead_letters","calls","p50_ms","p90_ms","p99_ms","max_ms"}.
 * Goal on a quiet machine: p50 <= 100 ms. BENCH_SHORT=1 runs 10 calls over the same data.
 */
import type { ChildProcess } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import pg from "pg";
import { adminCall, createBenchDatabase, log, startService } from "./support.ts";

const SHORT = process.env.BENCH_SHORT === "1";
const BASE_URL = process.env.BENCH_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const knob = (name: string, full: number, short: number) => Number(process.env[name] ?? (SHORT ? short : full));
const APPS = knob("BENCH_APPS", 1000, 1000);
const MAIL = knob("BENCH_MAIL", 10, 10);
const QUEUE_APPS = knob("BENCH_QUEUE_APPS", 100, 100);
const MESSAGES = knob("BENCH_MESSAGES", 200, 200);
const CALLS = knob("BENCH_CALLS", 50, 10);

function percentile(samples: number[], p: number): number {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

/** A day of the apps' work, written as the service keeps it (its rollups and counters). */
async function seed(db: pg.Client): Promise<{ leader: string; messages: number; deadLetters: number }> {
  await db.query(
    `INSERT INTO apps (name, status) SELECT 'bench-' || g, CASE WHEN g % 10 = 0 THEN 'stopped' ELSE 'running' END
     FROM generate_series(1, $1::int) g`,
    [APPS],
  );
  const day = new Date().toISOString().slice(0, 10);
  // App n made n requests today (so bench-<APPS> leads), a tenth of them refused.
  await db.query(
    `INSERT INTO app_request_days (day, app_id, requests, client_errors, server_errors)
     SELECT $1::date, id, substring(name from 7)::int, substring(name from 7)::int / 10, 0 FROM apps`,
    [day],
  );
  await db.query(
    `INSERT INTO quota_usage (app_id, day, counter, used)
     SELECT a.id, $1, c, 100 FROM apps a CROSS JOIN unnest(ARRAY['events','mail','fast_tokens','embed_tokens']) c`,
    [day],
  );
  await db.query(
    `INSERT INTO request_counts (bucket, facility, requests, client_errors, server_errors)
     SELECT date_trunc('hour', now()) - make_interval(mins => 5 * g), f, 1000, 10, 1
     FROM generate_series(0, 287) g CROSS JOIN unnest(ARRAY['analytics','inference','mail','queues','secrets']) f`,
  );
  await db.query(
    `INSERT INTO mail_log (app_id, to_address, from_address, subject, status, provider)
     SELECT a.id, 'x@example.com', a.name || '@example.com', 'bench', CASE WHEN g = 1 THEN 'failed' ELSE 'stored' END,
            'outbox'
     FROM apps a CROSS JOIN generate_series(1, $1::int) g`,
    [MAIL],
  );
  await db.query(
    `INSERT INTO queue_messages (app_id, queue, payload, enqueued_at, visible_at, expires_at)
     SELECT a.id, 'jobs', '{"n":1}', now() - make_interval(mins => CASE WHEN g % 2 = 0 THEN 90 ELSE 1 END),
            now() - make_interval(mins => CASE WHEN g % 2 = 0 THEN 90 ELSE 1 END), now() + interval '4 days'
     FROM (SELECT id FROM apps ORDER BY name LIMIT $1::int) a CROSS JOIN generate_series(1, $2::int) g`,
    [QUEUE_APPS, MESSAGES],
  );
  const dead = await db.query(
    `INSERT INTO queue_dead_letters (id, app_id, queue, payload, enqueued_at, deliveries, expires_at)
     SELECT gen_random_uuid(), a.id, 'jobs', '{"n":1}', now(), 3, now() + interval '7 days'
     FROM (SELECT id FROM apps WHERE substring(name from 7)::int % 10 = 1) a CROSS JOIN generate_series(1, 20)`,
  );
  await db.query("ANALYZE");
  const { rows } = await db.query<{ id: string }>(`SELECT id FROM apps WHERE name = $1`, [`bench-${APPS}`]);
  return { leader: rows[0].id, messages: QUEUE_APPS * MESSAGES, deadLetters: dead.rowCount ?? 0 };
}

async function main(): Promise<void> {
  const database = await createBenchDatabase(BASE_URL);
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), "pb-bench-"));
  const adminToken = `pba_bench_${crypto.randomBytes(24).toString("base64url")}`;
  let server: ChildProcess | undefined;
  const db = new pg.Client({ connectionString: database.url });
  try {
    const service = await startService({ databaseUrl: database.url, dataDir, adminToken, env: { MONGODB_URL: "" } });
    server = service.child;
    await db.connect();
    log(`seeding ${APPS} apps`);
    const seeded = await seed(db);
    const call = () => adminCall(service.url, adminToken, "GetOverview", {});
    for (let i = 0; i < 3; i++) await call();
    const samples: number[] = [];
    let last: Record<string, unknown> = {};
    for (let i = 0; i < CALLS; i++) {
      const started = performance.now();
      last = (await call()) as Record<string, unknown>;
      samples.push(performance.now() - started);
    }
    // A fast wrong answer is no answer.
    const top = (last.topApps as { appId: string }[])[0];
    if (last.appsRunning !== APPS - Math.floor(APPS / 10) || top?.appId !== seeded.leader)
      throw new Error(`unexpected overview: ${JSON.stringify({ running: last.appsRunning, top })}`);
    if (Number(last.queueBacklog) !== seeded.messages || Number(last.deadLetters) !== seeded.deadLetters)
      throw new Error(`unexpected queue totals: ${String(last.queueBacklog)}, ${String(last.deadLetters)}`);
    process.stdout.write(
      JSON.stringify({
        apps: APPS,
        messages: seeded.messages,
        dead_letters: seeded.deadLetters,
        calls: CALLS,
        p50_ms: Math.round(percentile(samples, 50) * 10) / 10,
        p90_ms: Math.round(percentile(samples, 90) * 10) / 10,
        p99_ms: Math.round(percentile(samples, 99) * 10) / 10,
        max_ms: Math.round(Math.max(...samples) * 10) / 10,
      }) + "\n",
    );
  } finally {
    await db.end().catch(() => {});
    server?.kill("SIGTERM");
    if (server && server.exitCode === null) await new Promise((r) => server!.once("exit", r));
    await database.drop();
    await fs.rm(dataDir, { recursive: true, force: true });
  }
}

await main();
