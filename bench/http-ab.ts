/**
 * `node bench/http-ab.ts`: the server CPU per request of this checkout against
 * an earlier commit's, on the operations and protocols of `bench:http`,
 * alternated in one window, so that a change of a few percent can be told
 * from a busy machine's drift.
 *
 * Why: on a shared machine a single `bench:http` run moves by 20% or more from
 * one run to the next (the baseline's own CPU per request with it), far more
 * than one change to the request path is worth. Here both versions run at
 * once on one database, and each round loads them one after the other, in
 * the opposite order every other round; the figures are the medians of each
 * one's runs. The commit BENCH_AB_BASE (default `HEAD~1`) is exported with
 * `git archive` into a temporary directory that uses this checkout's
 * `node_modules`; both services start as `npm start` starts them, and both
 * bare baselines (`http-baseline.ts`) run too, for scale.
 *
 * BENCH_OPS (default `models_list,event_types_list`: the light reads, where
 * the HTTP layer's cost shows most), BENCH_PROTOCOLS (default all of
 * `bench:http`'s), BENCH_ROUNDS (3), BENCH_SECONDS (2) per run after
 * BENCH_WARMUP_SECONDS (0.5), BENCH_CONCURRENCY (64). Each run logs its
 * requests per second and the server's user and system CPU per request (from
 * /proc, warm-up included); the last line is one JSON object:
 * `{ "<operation>_<protocol>": { "base": µs, "head": µs, "baseline": µs } }`,
 * medians of the server CPU per request (`baseline`: the bare server of the
 * protocol's HTTP version).
 */
import { execFileSync, type ChildProcess } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { OPERATIONS, startBaseline, target, type Protocol } from "./http.ts";
import { runLoad } from "./http-load.ts";
import { adminCall, createBenchDatabase, log, NO_RATE_LIMITS, root, startService } from "./support.ts";

const BASE_URL = process.env.BENCH_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const BASE_REF = process.env.BENCH_AB_BASE ?? "HEAD~1";
const OPS = (process.env.BENCH_OPS ?? "models_list,event_types_list").split(",");
const PROTOCOLS = (
  process.env.BENCH_PROTOCOLS ??
  "rest_h1,connect_json,connect_proto,grpc_web,rest_h2c,connect_json_h2,connect_proto_h2,grpc"
).split(",") as Protocol[];
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 2);
const WARMUP_SECONDS = Number(process.env.BENCH_WARMUP_SECONDS ?? 0.5);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 64);

/** The user and system CPU time a process has used so far, in ms (clock ticks of 10 ms). */
async function cpuMs(pid: number): Promise<{ user: number; system: number }> {
  const fields = (await fs.readFile(`/proc/${pid}/stat`, "utf8")).split(") ")[1].split(" ");
  return { user: Number(fields[11]) * 10, system: Number(fields[12]) * 10 };
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const round1 = (n: number) => Math.round(n * 10) / 10;

async function main(): Promise<void> {
  const baseDir = await fs.mkdtemp(path.join(os.tmpdir(), "pb-bench-ab-base-"));
  const archive = execFileSync("git", ["archive", BASE_REF], { cwd: root, maxBuffer: 1 << 30 });
  execFileSync("tar", ["-x", "-C", baseDir], { input: archive });
  await fs.symlink(path.join(root, "node_modules"), path.join(baseDir, "node_modules"));
  const database = await createBenchDatabase(BASE_URL, "pb_bench_http_ab");
  const { name: dbName } = database;
  const dbUrl = new URL(database.url);
  const adminToken = "pba_bench_" + crypto.randomBytes(24).toString("base64url");
  // Instances on one database share its secrets key; each has its own data directory.
  const secretsKey = crypto.randomBytes(32).toString("base64");
  const dataDirs: string[] = [];
  const children: { child: ChildProcess }[] = [];
  try {
    const start = async (checkout: string) => {
      const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), "pb-bench-ab-"));
      dataDirs.push(dataDir);
      const s = await startService({
        databaseUrl: dbUrl.toString(),
        dataDir,
        adminToken,
        checkout,
        env: { SECRETS_KEY: secretsKey },
      });
      children.push(s);
      return s;
    };
    // The older first: a newer one adds its migrations to the database, an older one refuses a database
    // migrated by a newer version.
    const base = await start(baseDir);
    const head = await start(root);
    const { app } = await adminCall(head.url, adminToken, "CreateApp", { name: "bench" });
    await adminCall(head.url, adminToken, "UpdateApp", { appId: app.id, limits: NO_RATE_LIMITS });
    const { token } = await adminCall(head.url, adminToken, "IssueToken", { appId: app.id });
    for (const name of ["signup", "login", "purchase", "page_view", "logout"]) {
      const res = await fetch(`${head.url}/v1/analytics/types`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify({ name, properties: { plan: "string", seats: "number", trial: "boolean" } }),
      });
      if (!res.ok) throw new Error(`event type: ${res.status}`);
    }
    const bare = {
      h1: await startBaseline(dbUrl.toString(), app.id, app.id, false),
      h2: await startBaseline(dbUrl.toString(), app.id, app.id, true),
    };
    children.push(bare.h1, bare.h2);
    log(`${BASE_REF} (base) on ${base.url}, this checkout (head) on ${head.url}, database ${dbName}`);
    const runs: Record<string, { base: number[]; head: number[]; baseline: number[] }> = {};
    let run = 0;
    for (let r = 0; r < ROUNDS; r++) {
      for (const opKey of OPS) {
        const op = OPERATIONS.find((o) => o.key === opKey);
        if (!op) throw new Error(`BENCH_OPS: unknown ${opKey}`);
        for (const protocol of PROTOCOLS) {
          const h2 = protocol === "rest_h2c" || protocol === "grpc" || protocol.endsWith("_h2");
          type Label = "base" | "head" | "baseline";
          type Target = Protocol | "baseline" | "baseline_h2c";
          const versions: { label: Label; server: { url: string; child: ChildProcess }; p: Target }[] = [
            { label: "base", server: base, p: protocol },
            { label: "head", server: head, p: protocol },
          ];
          if (r % 2 === 1) versions.reverse();
          const servers = [
            {
              label: "baseline" as Label,
              server: h2 ? bare.h2 : bare.h1,
              p: (h2 ? "baseline_h2c" : "baseline") as Target,
            },
            ...versions,
          ];
          const key = `${op.key}_${protocol}`;
          runs[key] ??= { base: [], head: [], baseline: [] };
          for (const { label, server, p } of servers) {
            const pid = server.child.pid!;
            const cpu0 = await cpuMs(pid);
            const result = await runLoad(target(op, p, server.url, token, run++), {
              concurrency: CONCURRENCY,
              h2Sessions: 4,
              warmupSeconds: WARMUP_SECONDS,
              seconds: SECONDS,
            });
            const cpu1 = await cpuMs(pid);
            // A run with errors (a shared PostgreSQL out of connections, say) is left out, not the whole comparison.
            if (result.errors > 0) {
              log(`${key.padEnd(34)} ${label.padEnd(8)} left out: ${result.errors} errors (${result.firstError})`);
              continue;
            }
            const user = ((cpu1.user - cpu0.user) * 1000) / result.allRequests;
            const system = ((cpu1.system - cpu0.system) * 1000) / result.allRequests;
            runs[key][label].push(user + system);
            log(
              `${key.padEnd(34)} ${label.padEnd(8)} ${String(Math.round(result.reqPerS)).padStart(6)} req/s  CPU/req user ${round1(user)} + system ${round1(system)} = ${round1(user + system)} µs`,
            );
          }
        }
      }
    }
    const out: Record<string, { base: number | null; head: number | null; baseline: number | null }> = {};
    for (const [key, v] of Object.entries(runs)) {
      const m = (xs: number[]) => (xs.length > 0 ? round1(median(xs)) : null);
      out[key] = { base: m(v.base), head: m(v.head), baseline: m(v.baseline) };
      log(`${key.padEnd(34)} base ${out[key].base}  head ${out[key].head}  baseline ${out[key].baseline} µs (medians)`);
    }
    process.stdout.write(JSON.stringify(out) + "\n");
  } finally {
    for (const { child } of children) {
      if (child.exitCode !== null) continue;
      const exited = new Promise((r) => child.once("exit", r));
      child.kill("SIGTERM");
      await exited;
    }
    await database.drop();
    for (const dir of [baseDir, ...dataDirs]) await fs.rm(dir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`bench failed: ${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
