/**
 * `npm run bench:embedded`: what the embedded default (no configuration at
 * all: PGlite in DATA_DIR/pg, the SQL analytics store, the mail outbox, the
 * offline inference provider) costs, measured on the service started with the
 * node flags of `npm start` in its own process.
 *
 * 1. First start: an empty DATA_DIR, no ADMIN_TOKEN (the service generates one, as a first
 *    `npm start` does); from the spawn to the first 200 of `/ready` (asked every 10 ms).
 *    Also the CPU time the process spent until then (less noisy on a busy machine).
 * 2. Light use of each facility: an app and its token, an event type, events and a query,
 *    a mail to the outbox, generate and embed, puts, consumes and acks, secrets declared,
 *    set and read, the queue and usage views of AdminService.
 * 3. Idle RSS: VmRSS of the server process after BENCH_IDLE_SECONDS (10) without requests.
 * 4. Queues on PGlite: 16 producers `POST /v1/queues/bench` (1 KiB payloads), 16 consumers
 *    `consume` -> `_ack` over REST with keep-alive, for BENCH_SECONDS (10); acks per second.
 * 5. Restart: SIGTERM, wait for the exit, start again on the same DATA_DIR; spawn -> `/ready`.
 *    A message put before the stop must still be there (the clean stop keeps what it acknowledged).
 *
 * BENCH_BASELINE_REF=<git ref> (e.g. the commit before a change) runs the same steps, in the
 * same run, on that commit's src/ and package.json (a `git archive` of it next to this
 * checkout's node_modules), and prints its figures with a `baseline_` prefix.
 * BENCH_NODE_ARGS adds node flags to the service (see support.ts).
 *
 * The last line of output is one JSON object:
 * {"idle_rss_mb","first_start_ms","restart_ms","queues_msgs_per_s", "first_start_cpu_ms", "restart_cpu_ms",
 *  "health_ms", "used_rss_mb", "peak_rss_mb", ... and baseline_* when a baseline ran}.
 */
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { adminCall, freePort, jsonClient, log, restQueueLoad, root } from "./support.ts";

const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const IDLE_SECONDS = Number(process.env.BENCH_IDLE_SECONDS ?? 10);
const PRODUCERS = 16;
const CONSUMERS = 16;
const MAX_OUTSTANDING = 512;
const PAYLOAD = { data: "x".repeat(1010) }; // 1 KiB as JSON
const POLL_MS = 10;

const round = (n: number, digits = 0) => Math.round(n * 10 ** digits) / 10 ** digits;

interface Figures {
  idle_rss_mb: number;
  first_start_ms: number;
  restart_ms: number;
  queues_msgs_per_s: number;
  queues_cpu_ms_per_msg: number;
  first_start_cpu_ms: number;
  restart_cpu_ms: number;
  health_ms: number;
  used_rss_mb: number;
  peak_rss_mb: number;
}

async function procStatus(pid: number): Promise<{ rssMb: number; hwmMb: number }> {
  const status = await fs.readFile(`/proc/${pid}/status`, "utf8");
  const kb = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+)`, "m").exec(status)?.[1] ?? 0);
  return { rssMb: kb("VmRSS") / 1024, hwmMb: kb("VmHWM") / 1024 };
}

/** User + system CPU time of a process so far, from /proc/PID/stat. */
async function cpuMs(pid: number): Promise<number> {
  const stat = await fs.readFile(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  const ticks = Number(fields[11]) + Number(fields[12]); // utime, stime (fields 14 and 15)
  return (ticks * 1000) / 100; // USER_HZ is 100 on Linux
}

interface Started {
  child: ChildProcess;
  url: string;
  /** Spawn -> first 200 of /health. */
  healthMs: number;
  /** Spawn -> first 200 of /ready. */
  readyMs: number;
  cpuMs: number;
}

/**
 * Spawns the service as `npm start` does (`exec node <flags> src/main.ts`,
 * flags from `dir`'s package.json) with no configuration but DATA_DIR and the
 * port, and times it until `/health` and `/ready` answer.
 */
async function start(dir: string, dataDir: string): Promise<Started> {
  const port = await freePort();
  const startScript = (
    JSON.parse(await fs.readFile(path.join(dir, "package.json"), "utf8")) as { scripts: { start: string } }
  ).scripts.start;
  const words = startScript.split(" ").filter(Boolean);
  const startArgs = words.slice(words.indexOf("node") + 1);
  const nodeArgs = (process.env.BENCH_NODE_ARGS ?? "").split(" ").filter(Boolean);
  // Nothing inherited that would configure the service: the embedded default.
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    DATA_DIR: dataDir,
    PORT: String(port),
    HOST: "127.0.0.1",
    LOG_LEVEL: "warn",
  };
  const t0 = performance.now();
  const child = spawn(path.join(root, "node_modules/.bin/node"), [...nodeArgs, ...startArgs], {
    cwd: dir,
    env,
    stdio: ["ignore", "ignore", "inherit"],
  });
  const url = `http://127.0.0.1:${port}`;
  let healthMs = NaN;
  for (;;) {
    if (child.exitCode !== null) throw new Error("the service exited at start");
    if (performance.now() - t0 > 120_000) throw new Error("the service did not start");
    try {
      if (Number.isNaN(healthMs)) {
        if ((await fetch(`${url}/health`)).ok) healthMs = performance.now() - t0;
      }
      if (!Number.isNaN(healthMs) && (await fetch(`${url}/ready`)).ok) {
        const readyMs = performance.now() - t0;
        return { child, url, healthMs, readyMs, cpuMs: await cpuMs(child.pid!) };
      }
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return;
  const exited = new Promise((r) => child.once("exit", r));
  child.kill("SIGTERM");
  await exited;
}

type Client = ReturnType<typeof jsonClient>;

// eslint-disable-next-line @typescript-eslint/no-explicit-any
async function expectOk(client: Client, method: string, pathname: string, body?: unknown): Promise<any> {
  const res = await client.request(method, pathname, body);
  if (res.status !== 200) throw new Error(`${method} ${pathname}: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body;
}

/** A little of everything each facility does, as a first session with the service would. */
async function lightUse(url: string, adminToken: string): Promise<{ token: string }> {
  const { app } = await adminCall(url, adminToken, "CreateApp", { name: "bench" });
  await adminCall(url, adminToken, "UpdateApp", { appId: app.id, mailFrom: "bench@apps.example.com" });
  const { token } = await adminCall(url, adminToken, "IssueToken", { appId: app.id });
  await adminCall(url, adminToken, "DeclareSecrets", { appId: app.id, names: ["API_KEY"] });
  await adminCall(url, adminToken, "SetSecret", { appId: app.id, name: "API_KEY", value: "s3cret" });
  const client = jsonClient(url, token as string, 4);
  // analytics
  await expectOk(client, "POST", "/v1/analytics/types", { name: "signup", properties: { plan: "string" } });
  const now = Date.now();
  const events = Array.from({ length: 200 }, (_, i) => ({
    type: "signup",
    at: new Date(now - i * 60_000).toISOString(),
    properties: { plan: i % 2 ? "pro" : "free" },
  }));
  await expectOk(client, "POST", "/v1/analytics/events", { events });
  await expectOk(client, "GET", "/v1/analytics/types");
  await expectOk(client, "POST", "/v1/analytics/query", {
    type: "signup",
    since: new Date(now - 86_400_000).toISOString(),
    interval: "hour",
    groupBy: "plan",
  });
  // mail
  for (let i = 0; i < 3; i++)
    await expectOk(client, "POST", "/v1/mail/send", { to: "someone@example.com", subject: `hello ${i}`, text: "hi" });
  // inference
  await expectOk(client, "GET", "/v1/inference/models");
  await expectOk(client, "POST", "/v1/inference/generate", { prompt: "Say hello", maxTokens: 32 });
  await expectOk(client, "POST", "/v1/inference/embed", { input: ["one", "two", "three"] });
  // queues
  for (let i = 0; i < 20; i++) await expectOk(client, "POST", "/v1/queues/jobs", { payload: { i } });
  for (let i = 0; i < 20; i++) {
    const { message } = await expectOk(client, "POST", "/v1/queues/jobs/consume", { waitSeconds: 0 });
    if (message) await expectOk(client, "POST", "/v1/queues/_ack", { receipt: message.receipt });
  }
  await expectOk(client, "GET", "/v1/queues");
  // secrets
  await expectOk(client, "GET", "/v1/secrets");
  await expectOk(client, "GET", "/v1/secrets/API_KEY");
  // the operator's views
  await adminCall(url, adminToken, "ListQueues", { appId: app.id });
  await adminCall(url, adminToken, "GetUsage", { appId: app.id });
  await adminCall(url, adminToken, "ListMail", { appId: app.id });
  client.agent.destroy();
  return { token: token as string };
}

/**
 * Part 4: put -> consume -> ack over REST, as part 1 of bench:queues; acks per
 * second, and the server's CPU time per acked message (steadier than the rate
 * on a machine shared with other work).
 */
async function queueThroughput(
  url: string,
  token: string,
  pid: number,
): Promise<{ perS: number; cpuMsPerMsg: number }> {
  let cpu0 = 0;
  let cpu1 = 0;
  const { acked, elapsedS, errors } = await restQueueLoad(url, token, {
    producers: PRODUCERS,
    consumers: CONSUMERS,
    maxOutstanding: MAX_OUTSTANDING,
    payload: PAYLOAD,
    seconds: SECONDS,
    atStart: async () => void (cpu0 = await cpuMs(pid)),
    atEnd: async () => void (cpu1 = await cpuMs(pid)),
  });
  if (errors > 0) log(`   (${errors} errors)`);
  return { perS: acked / elapsedS, cpuMsPerMsg: (cpu1 - cpu0) / Math.max(acked, 1) };
}

/** Every step on the checkout in `dir`. */
async function measure(label: string, dir: string): Promise<Figures> {
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), "pb-bench-embedded-"));
  let child: ChildProcess | undefined;
  try {
    const first = await start(dir, dataDir);
    child = first.child;
    log(
      `${label} 1. first start: /health ${round(first.healthMs)} ms, /ready ${round(first.readyMs)} ms, ${round(first.cpuMs)} ms CPU`,
    );
    const adminToken = (await fs.readFile(path.join(dataDir, "admin-token"), "utf8")).trim();
    const { token } = await lightUse(first.url, adminToken);
    const used = await procStatus(child.pid!);
    log(`${label} 2. after light use of every facility: RSS ${round(used.rssMb)} MB`);
    await new Promise((r) => setTimeout(r, IDLE_SECONDS * 1000));
    const idle = await procStatus(child.pid!);
    log(`${label} 3. idle ${IDLE_SECONDS} s: RSS ${round(idle.rssMb)} MB (peak so far ${round(idle.hwmMb)} MB)`);
    const queues = await queueThroughput(first.url, token, child.pid!);
    const afterLoad = await procStatus(child.pid!);
    log(
      `${label} 4. queues on PGlite, REST put->consume->ack: ${round(queues.perS)} msgs/s, ${round(queues.cpuMsPerMsg, 2)} ms server CPU per message; ` +
        `RSS after ${round(afterLoad.rssMb)} MB (peak ${round(afterLoad.hwmMb)} MB)`,
    );
    // A message acknowledged before a clean stop is there after the restart.
    const client = jsonClient(first.url, token, 1);
    const kept = await expectOk(client, "POST", "/v1/queues/kept", { payload: { kept: true } });
    client.agent.destroy();
    await stop(child);
    const again = await start(dir, dataDir);
    child = again.child;
    log(
      `${label} 5. restart: /health ${round(again.healthMs)} ms, /ready ${round(again.readyMs)} ms, ${round(again.cpuMs)} ms CPU`,
    );
    const client2 = jsonClient(again.url, token, 1);
    const { message } = await expectOk(client2, "POST", "/v1/queues/kept/consume", { waitSeconds: 0 });
    client2.agent.destroy();
    if (message?.id !== kept.id)
      throw new Error(`the message put before the stop is gone after the restart: ${JSON.stringify(message)}`);
    return {
      idle_rss_mb: round(idle.rssMb),
      first_start_ms: round(first.readyMs),
      restart_ms: round(again.readyMs),
      queues_msgs_per_s: round(queues.perS),
      queues_cpu_ms_per_msg: round(queues.cpuMsPerMsg, 2),
      first_start_cpu_ms: round(first.cpuMs),
      restart_cpu_ms: round(again.cpuMs),
      health_ms: round(first.healthMs),
      used_rss_mb: round(used.rssMb),
      peak_rss_mb: round(afterLoad.hwmMb),
    };
  } finally {
    if (child) await stop(child);
    await fs.rm(dataDir, { recursive: true, force: true });
  }
}

/** The service's files at `ref`, beside this checkout's node_modules (the dependencies must be the same). */
async function checkoutOf(ref: string): Promise<{ dir: string; remove: () => Promise<void> }> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), "pb-bench-baseline-"));
  const tar = execFileSync("git", ["archive", "--format=tar", ref], { cwd: root, maxBuffer: 1 << 30 });
  execFileSync("tar", ["-x", "-C", dir], { input: tar });
  await fs.symlink(path.join(root, "node_modules"), path.join(dir, "node_modules"));
  return { dir, remove: () => fs.rm(dir, { recursive: true, force: true }) };
}

async function main(): Promise<void> {
  const baselineRef = process.env.BENCH_BASELINE_REF;
  const out: Record<string, number | string> = {};
  let baseline: Figures | undefined;
  if (baselineRef) {
    const checkout = await checkoutOf(baselineRef);
    try {
      baseline = await measure(`[baseline ${baselineRef}]`, checkout.dir);
    } finally {
      await checkout.remove();
    }
  }
  const current = await measure("[this checkout]", root);
  Object.assign(out, current);
  if (baseline) {
    out.baseline_ref = baselineRef!;
    for (const [key, value] of Object.entries(baseline)) out[`baseline_${key}`] = value;
  }
  process.stdout.write(JSON.stringify(out) + "\n");
}

main().catch((err: unknown) => {
  process.stderr.write(`bench failed: ${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
