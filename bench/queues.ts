/**
 * `npm run bench:queues`: the queue facility on PostgreSQL, end to end, and
 * pg-boss doing the same work on the same PostgreSQL in the same run.
 *
 * A fresh database on BENCH_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test),
 * the service started on it as a child process (its own process, with the node flags of
 * `npm start`, as in production), then:
 * 1. Throughput: 16 producers `POST /v1/queues/bench` (1 KiB payloads) and 16 consumers
 *    `consume` -> `_ack`, over REST with keep-alive, for BENCH_SECONDS (15); counts acks.
 * 2. pg-boss 12 (`send` / `fetch` / `complete` as library calls, 16 + 16, same duration, own schema).
 * 3. Wake-up: one consume already waiting, then a put; the time from sending the put to
 *    receiving the delivery, p50/p99 over BENCH_WAKE_SAMPLES (1000).
 * 5. Streaming (the fast path for internal services): over gRPC (h2c), 4 producers put
 *    batches of 1000 with `PutMessages` (1 KiB payloads), 4 `StreamMessages` consumers
 *    (window 1000) ack each response with one `AckMessages`, for BENCH_SECONDS; counts acks.
 *    The client does not ask for gzip. Also prints the CPU time per message of the service,
 *    of the PostgreSQL backends and of this client: on a machine of few cores that, not
 *    waiting, is the limit. BENCH_STREAM_BATCH, BENCH_STREAM_WINDOW, BENCH_STREAM_PRODUCERS,
 *    BENCH_STREAM_CONSUMERS and BENCH_STREAM_GZIP=1 change its shape (the first version of
 *    this part: batches of 100, window 256, gzip). Runs before part 4, which ends the service.
 * 4. Idle: 2000 consumes waiting on 500 queues for 10 s: transactions per second of the
 *    benchmark database (`pg_stat_database`), and the server's RSS.
 *
 * 6. Queue controls (see `controlsBench`): put throughput at depth, the listing with 1M
 *    messages, REST batches, a stream whose acks land on another instance, REST on 3 instances
 *    and its database statements per message against 1 instance (`statements_per_msg_3_vs_1`; two
 *    rounds of the loads alternated; the 3 instances' idle statements are measured apart and logged),
 *    and the same with three times the clients, the same load per instance (`statements_per_msg_3_vs_1_scaled`).
 *    BENCH_INSTANCES_ONLY=1 runs only that load.
 * 7. Schedules firing 1,000 ticks a second for BENCH_SCHEDULE_SECONDS (10): how late each tick's
 *    message is put, p50/p99 (`bench/schedule-drift.ts`). Runs before part 4, which ends the service.
 * 8. Ordered groups and priorities (see `orderBench`): part 1's REST load on a plain queue, then
 *    with every put in one of 1,000 groups (`groups_vs_plain`), then with priorities 0 to 9
 *    mixed (`priority_vs_plain`), each on a fresh queue of its own app; then what a consume that finds
 *    nothing costs behind a leased group head with BENCH_BLOCKED_BEHIND (20,000) messages behind it
 *    (`group_blocked_claim_ms`), against one on an empty queue (`empty_claim_ms`).
 *
 * The last line of output is one JSON object:
 * {"msgs_per_s","pgboss_msgs_per_s","ratio_vs_pgboss","wake_p50_ms","wake_p99_ms","idle_xacts_per_s","idle_rss_mb",
 *  "stream_msgs_per_s","put_depth_ratio","list_ms_1m","rest_batch_msgs_per_s","stream_cross_instance_msgs_per_s",
 *  "rest_3_vs_1_instances","statements_per_msg_3_vs_1","statements_per_msg_3_vs_1_scaled","schedule_ticks_per_s","schedule_drift_p50_ms",
 *  "schedule_drift_p99_ms","groups_vs_plain","priority_vs_plain","empty_claim_ms","group_blocked_claim_ms"}.
 */
import type { ChildProcess } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { fromJson } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import pg from "pg";
import { PgBoss } from "pg-boss";
import { QueueService } from "../gen/platform/queues/v1/queues_pb.js";
import {
  adminCall,
  createBenchDatabase,
  jsonClient,
  log,
  NO_RATE_LIMITS,
  restQueueLoad,
  startService,
} from "./support.ts";
import { scheduleDrift } from "./schedule-drift.ts";

const BASE_URL = process.env.BENCH_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const SECONDS = Number(process.env.BENCH_SECONDS ?? 15);
const WAKE_SAMPLES = Number(process.env.BENCH_WAKE_SAMPLES ?? 1000);
const IDLE_POLLS = 2000;
const IDLE_QUEUES = 500;
const IDLE_SECONDS = 10;
const PRODUCERS = 16;
const CONSUMERS = 16;
/** Producers pause while this many messages are put but not yet acked, so depth stays bounded. */
const MAX_OUTSTANDING = 512;
/** Parts to run, e.g. BENCH_PARTS=3,4 while tuning; all by default. */
const PARTS = new Set((process.env.BENCH_PARTS ?? "1,2,3,5,6,7,8,4").split(",").map(Number));
const SCHEDULE_SECONDS = Number(process.env.BENCH_SCHEDULE_SECONDS ?? 10);
/** BENCH_INSTANCES_ONLY=1: part 6 runs only its 3-instance REST load (6e, 6f), e.g. while tuning the batches. */
const INSTANCES_ONLY = process.env.BENCH_INSTANCES_ONLY === "1";
const PAYLOAD = { data: "x".repeat(1010) }; // 1 KiB as JSON
const STREAM_PRODUCERS = Number(process.env.BENCH_STREAM_PRODUCERS ?? 4);
const STREAM_CONSUMERS = Number(process.env.BENCH_STREAM_CONSUMERS ?? 4);
/** The largest batch and window the API allows: per-call costs (a claim, a response, an ack call) spread over more messages. */
const STREAM_BATCH = Number(process.env.BENCH_STREAM_BATCH ?? 1000);
const STREAM_WINDOW = Number(process.env.BENCH_STREAM_WINDOW ?? 1000);
const STREAM_GZIP = process.env.BENCH_STREAM_GZIP === "1";
/** Producers of part 5 pause while this many messages are put but not yet acked. */
const STREAM_MAX_OUTSTANDING = 4096;

function grpcClient(baseUrl: string, token: string) {
  const transport = createGrpcTransport({
    baseUrl,
    // An internal service next to the server: gzip of every response (the default when the
    // client accepts it, from 1 KiB) would cost both sides more CPU than the bytes it saves.
    ...(STREAM_GZIP ? {} : { acceptCompression: [] }),
    interceptors: [
      (next) => (req) => {
        req.header.set("authorization", `Bearer ${token}`);
        return next(req);
      },
    ],
  });
  return createClient(QueueService, transport);
}

/**
 * Part 5: put -> deliver -> ack through PutMessages, StreamMessages and
 * AckMessages over gRPC (h2c), for `SECONDS`; returns acked messages per second.
 */
/** `cpu` measures where the time goes (one instance); without it no CPU line is printed. */
async function streamThroughput(
  baseUrl: string,
  token: string,
  cpu: CpuMeter | undefined,
  ackUrl = baseUrl,
): Promise<number> {
  const client = grpcClient(baseUrl, token);
  // Acks through another instance when `ackUrl` names one (a balancer spreading the calls).
  const ackClient = ackUrl === baseUrl ? client : grpcClient(ackUrl, token);
  const payload = fromJson(ValueSchema, PAYLOAD);
  const batch = Array.from({ length: STREAM_BATCH }, () => ({ payload }));
  const queue = ackUrl === baseUrl ? "stream" : "stream-cross";
  let put = 0;
  let acked = 0;
  let errors = 0;
  const stop = new AbortController();
  const producers = Array.from({ length: STREAM_PRODUCERS }, async () => {
    while (!stop.signal.aborted) {
      if (put - acked > STREAM_MAX_OUTSTANDING) {
        await new Promise((r) => setTimeout(r, 1));
        continue;
      }
      await client.putMessages({ queue, messages: batch });
      put += STREAM_BATCH;
    }
  });
  const acks: Promise<void>[] = [];
  const consumers = Array.from({ length: STREAM_CONSUMERS }, async () => {
    try {
      for await (const res of client.streamMessages({ queue, window: STREAM_WINDOW }, { signal: stop.signal })) {
        acks.push(
          ackClient.ackMessages({ receipts: res.messages.map((m) => m.receipt) }).then(
            (r) => void r.acked.forEach((ok) => (ok ? acked++ : errors++)),
            () => void errors++,
          ),
        );
      }
    } catch {
      // Cancelled at the end of the run.
    }
  });
  const started = performance.now();
  const cpu0 = await cpu?.read();
  await new Promise((r) => setTimeout(r, SECONDS * 1000));
  const ackedInWindow = acked;
  const cpu1 = await cpu?.read();
  const elapsed = (performance.now() - started) / 1000;
  stop.abort();
  await Promise.all([...producers, ...consumers, ...acks]);
  const perS = ackedInWindow / elapsed;
  if (cpu0 && cpu1) {
    const perMessage = (k: "server" | "postgres" | "client") =>
      round(((cpu1[k] - cpu0[k]) * 1e6) / Math.max(ackedInWindow, 1), 0);
    log(
      `   CPU per message: server ${perMessage("server")} µs, PostgreSQL backends ${perMessage("postgres")} µs, ` +
        `benchmark client ${perMessage("client")} µs (machine: ${os.cpus().length} cores); ` +
        `about ${round(((cpu1.xacts - cpu0.xacts) * 1000) / Math.max(ackedInWindow, 1), 0)} transactions per 1000 messages`,
    );
  }
  log(
    `5. gRPC PutMessages->StreamMessages->AckMessages: ${round(perS, 0)} msgs/s (${ackedInWindow} in ${round(elapsed, 1)} s, ${errors} errors; ${put} put, ${acks.length} responses)`,
  );
  return perS;
}

/** Puts per second of `producers` REST clients (small payloads) on one queue for `seconds`. */
async function putRate(url: string, token: string, queue: string, seconds: number, producers = 16): Promise<number> {
  const client = jsonClient(url, token, producers + 2);
  let n = 0;
  let stopped = false;
  const started = performance.now();
  const workers = Array.from({ length: producers }, async () => {
    while (!stopped) {
      const res = await client.request("POST", `/v1/queues/${queue}`, { payload: { n } });
      if (res.status !== 200) throw new Error(`put: ${res.status} ${JSON.stringify(res.body)}`);
      n++;
    }
  });
  await new Promise((r) => setTimeout(r, seconds * 1000));
  stopped = true;
  const inWindow = n;
  const elapsed = (performance.now() - started) / 1000;
  await Promise.all(workers);
  client.agent.destroy();
  return inWindow / elapsed;
}

/** Fills `queue` with `n` small messages through REST batches of 1000, `parallel` at a time. */
/** Puts `n` messages on `queue` in batches of up to 1000, `parallel` at once; all of one group when `groupKey` is given. */
async function fill(
  url: string,
  token: string,
  queue: string,
  n: number,
  parallel = 4,
  groupKey?: string,
): Promise<void> {
  const client = jsonClient(url, token, parallel + 2);
  const batch = (size: number) =>
    Array.from({ length: size }, (_, i) => ({ payload: i, ...(groupKey !== undefined && { groupKey }) }));
  const full = batch(1000);
  let left = n;
  await Promise.all(
    Array.from({ length: parallel }, async () => {
      while (left > 0) {
        const size = Math.min(1000, left);
        left -= size;
        const res = await client.request("POST", `/v1/queues/${queue}/batch`, {
          messages: size === full.length ? full : batch(size),
        });
        if (res.status !== 200) throw new Error(`batch: ${res.status} ${JSON.stringify(res.body)}`);
      }
    }),
  );
  client.agent.destroy();
}

/**
 * Part 6: `put_depth_ratio` (puts/s onto a queue with 50,000 waiting ÷ onto an
 * empty one), `list_ms_1m` (median listing time of an app with 100 queues ×
 * 10,000 messages), `rest_batch_msgs_per_s` (REST batches of 100: put ->
 * consume `max` -> ack `receipts`), then two more instances on the same
 * database: `stream_cross_instance_msgs_per_s` (part 5 with the acks sent to
 * another instance) and `rest_3_vs_1_instances` (part 1's REST load spread
 * over 3 instances ÷ on 1).
 */
/**
 * Part 7: what ordered groups and priorities cost against plain messages, as part 1's REST load
 * (16 producers, 16 consumers taking one message at a time, acks one by one) on three queues of a
 * fresh app: plain, every put in one of 1,000 groups (round robin, so a group's next message is
 * usually put long after its previous one was taken), and priorities 0 to 9 mixed; two rounds of the three.
 */
async function orderBench(url: string, adminToken: string): Promise<Record<string, number>> {
  const { app } = await adminCall(url, adminToken, "CreateApp", { name: "bench-order" });
  // Room for the blocked group's backlog (`blockedGroupClaim`); the loads keep at most MAX_OUTSTANDING.
  await adminCall(url, adminToken, "UpdateApp", {
    appId: app.id,
    limits: { maxQueueDepth: 1_000_000, ...NO_RATE_LIMITS },
  });
  const { token } = await adminCall(url, adminToken, "IssueToken", { appId: app.id });
  const seconds = Math.min(SECONDS, 10) / 2;
  const load = {
    producers: PRODUCERS,
    consumers: CONSUMERS,
    maxOutstanding: MAX_OUTSTANDING,
    payload: PAYLOAD,
    seconds,
  };
  const rate = async (queue: string, putBody?: (i: number) => Record<string, unknown>) => {
    const r = await restQueueLoad(url, token, { ...load, queue, ...(putBody && { putBody }) });
    if (r.errors > 0) log(`   (${queue}: ${r.errors} errors)`);
    return r.acked / r.elapsedS;
  };
  // Two rounds of the three, each run half the time: a drift of the machine (warm-up, other load) falls on all
  // three alike instead of on whichever ran first.
  let [plain, grouped, prioritised] = [0, 0, 0];
  for (let round = 0; round < 2; round++) {
    plain += (await rate(`order-plain-${round}`)) / 2;
    grouped += (await rate(`order-groups-${round}`, (i) => ({ payload: PAYLOAD, groupKey: `g${i % 1000}` }))) / 2;
    prioritised += (await rate(`order-priorities-${round}`, (i) => ({ payload: PAYLOAD, priority: (i * 7) % 10 }))) / 2;
  }
  log(
    `8. REST put->consume->ack: ${round(plain, 0)} msgs/s plain, ${round(grouped, 0)} in 1,000 groups, ${round(prioritised, 0)} with priorities 0-9`,
  );
  const blocked = await blockedGroupClaim(url, token);
  return {
    groups_vs_plain: round(grouped / plain),
    priority_vs_plain: round(prioritised / plain),
    ...blocked,
  };
}

/** Messages behind the leased head of the one group of `blockedGroupClaim`. */
const BLOCKED_BEHIND = Number(process.env.BENCH_BLOCKED_BEHIND ?? 20_000);

/**
 * What a consume that finds nothing costs when the queue's only group has its head leased and
 * `BLOCKED_BEHIND` messages behind it (`group_blocked_claim_ms`, the median of 5), against the same
 * consume on an empty queue (`empty_claim_ms`): the claim reads every message behind the head to find
 * none it may take (docs/queues.md "Ordered groups"), so the first grows with the backlog.
 */
async function blockedGroupClaim(url: string, token: string): Promise<Record<string, number>> {
  await fill(url, token, "order-blocked", BLOCKED_BEHIND + 1, 4, "one");
  const client = jsonClient(url, token, 4);
  try {
    const head = await client.request("POST", "/v1/queues/order-blocked/consume", { leaseSeconds: 600 });
    if (!head.body?.message) throw new Error("the group's head was not delivered");
    const median = async (queue: string) => {
      const times: number[] = [];
      for (let k = 0; k < 5; k++) {
        const started = performance.now();
        const res = await client.request("POST", `/v1/queues/${queue}/consume`, { waitSeconds: 0 });
        times.push(performance.now() - started);
        if (res.body?.message) throw new Error(`${queue}: a consume got a message`);
      }
      return times.sort((a, b) => a - b)[2];
    };
    const empty = await median("order-empty");
    const blocked = await median("order-blocked");
    log(
      `8b. a consume that finds nothing: ${round(empty)} ms on an empty queue, ${round(blocked)} ms with ${BLOCKED_BEHIND} messages behind a leased group head`,
    );
    return { empty_claim_ms: round(empty), group_blocked_claim_ms: round(blocked) };
  } finally {
    client.agent.destroy();
  }
}

async function controlsBench(
  url: string,
  adminToken: string,
  options: { databaseUrl: string; dataDir: string; adminToken: string },
  /** The benchmark database's transactions so far (each statement outside a transaction is one). */
  statements: () => Promise<number>,
): Promise<{ figures: Record<string, number> }> {
  const figures: Record<string, number> = {};
  const newApp = async (name: string) => {
    const { app } = await adminCall(url, adminToken, "CreateApp", { name });
    await adminCall(url, adminToken, "UpdateApp", {
      appId: app.id,
      limits: { maxQueueDepth: 1_000_000, ...NO_RATE_LIMITS },
    });
    const { token } = await adminCall(url, adminToken, "IssueToken", { appId: app.id });
    return token as string;
  };
  if (!INSTANCES_ONLY) {
    const PUT_SECONDS = Math.min(SECONDS, 8);
    const deep = await newApp("bench-depth");
    const empty = await putRate(url, deep, "empty", PUT_SECONDS);
    await fill(url, deep, "deep", 50_000);
    const full = await putRate(url, deep, "deep", PUT_SECONDS);
    figures.put_depth_ratio = round(full / empty);
    log(
      `6a. puts: ${round(empty, 0)}/s on an empty queue, ${round(full, 0)}/s with 50,000 waiting (ratio ${round(full / empty)})`,
    );

    const lister = await newApp("bench-list");
    const fillStarted = performance.now();
    for (let q = 0; q < 100; q++) await fill(url, lister, `q${q}`, 10_000);
    log(`    filled 100 queues x 10,000 in ${round((performance.now() - fillStarted) / 1000, 0)} s`);
    const listClient = jsonClient(url, lister, 2);
    const times: number[] = [];
    for (let i = 0; i < 25; i++) {
      const t0 = performance.now();
      const res = await listClient.request("GET", "/v1/queues");
      times.push(performance.now() - t0);
      if (res.body.queues.length !== 100) throw new Error(`listing: ${res.body.queues.length} queues`);
    }
    listClient.agent.destroy();
    figures.list_ms_1m = round(percentile(times.slice(5), 50));
    log(`6b. listing 100 queues x 10,000 messages: median ${figures.list_ms_1m} ms`);

    const batcher = await newApp("bench-batch");
    let stopped = false;
    // A saturated instance sheds the app asking most (fair shares, docs/api.md#rate-limits) with a 429: a
    // refused ack is sent again after its Retry-After, as a well-behaved client would, until the run stops.
    const bc = jsonClient(url, batcher, 12, { retry429: () => !stopped });
    const messages = Array.from({ length: 100 }, () => ({ payload: PAYLOAD }));
    let acked = 0;
    let put = 0;
    const producers = Array.from({ length: 2 }, async () => {
      while (!stopped) {
        if (put - acked > 2000) {
          await new Promise((r) => setTimeout(r, 1));
          continue;
        }
        const res = await bc.request("POST", "/v1/queues/batched/batch", { messages });
        if (res.status === 200) put += 100;
      }
    });
    const consumers = Array.from({ length: 4 }, async () => {
      while (!stopped) {
        const res = await bc.request("POST", "/v1/queues/batched/consume", { max: 100, waitSeconds: 1 });
        const got = (res.body?.messages ?? []) as { receipt: string }[];
        if (got.length === 0) continue;
        const a = await bc.request("POST", "/v1/queues/_ack", { receipts: got.map((m) => m.receipt) });
        if (a.status !== 200) continue;
        acked += (a.body.acked as boolean[]).filter(Boolean).length;
      }
    });
    const started = performance.now();
    await new Promise((r) => setTimeout(r, SECONDS * 1000));
    const inWindow = acked;
    const elapsed = (performance.now() - started) / 1000;
    stopped = true;
    await Promise.all([...producers, ...consumers]);
    bc.agent.destroy();
    figures.rest_batch_msgs_per_s = round(inWindow / elapsed, 0);
    log(`6c. REST batches of 100 put->consume max->ack receipts: ${figures.rest_batch_msgs_per_s} msgs/s`);
  }

  // Two more instances on the same database.
  const more = [await startService(options), await startService(options)];
  try {
    if (!INSTANCES_ONLY) {
      const streamer = await newApp("bench-cross");
      figures.stream_cross_instance_msgs_per_s = round(
        await streamThroughput(url, streamer, undefined, more[0].url),
        0,
      );
      log(`6d. stream on one instance, acks on another: ${figures.stream_cross_instance_msgs_per_s} msgs/s`);
    }
    const rest = await newApp("bench-rest3");
    const everyInstance = [url, ...more.map((m) => m.url)];
    // Two rounds of the two loads (1 instance, 3 instances), each half the time: a drift of the machine (warm-up
    // of the instances just started, other load) falls on both alike instead of on whichever ran first.
    const load = {
      producers: PRODUCERS,
      consumers: CONSUMERS,
      maxOutstanding: MAX_OUTSTANDING,
      payload: PAYLOAD,
      seconds: SECONDS / 2,
    };
    // Statements in the measured window: pg_stat_database as the backends report it (about once a second
    // while busy, so a second's worth of error at each end of a window, the same for both loads). The bench's
    // own queries go to another database. Every statement of this load runs outside a transaction, so a
    // transaction is a statement; the instances' background work (housekeeping, idle or not, of all three,
    // in both loads) counts too, and is measured apart, with no load, to be told from the load's statements.
    const statementsIn = async (urls: string[], clients: number) => {
      let from = 0;
      let to = 0;
      const r = await restQueueLoad(urls, rest, {
        ...load,
        producers: load.producers * clients,
        consumers: load.consumers * clients,
        maxOutstanding: load.maxOutstanding * clients,
        atStart: async () => void (from = await statements()),
        atEnd: async () => void (to = await statements()),
      });
      return { ...r, statements: to - from };
    };
    const idleFrom = await statements();
    const idleStarted = performance.now();
    await new Promise((r) => setTimeout(r, 5000));
    const idlePerS = ((await statements()) - idleFrom) / ((performance.now() - idleStarted) / 1000);
    const none = () => ({ acked: 0, elapsedS: 0, statements: 0 });
    const sum = { one: none(), three: none(), scaled: none() };
    for (let round = 0; round < 2; round++) {
      for (const [which, urls, clients] of [
        ["one", [url], 1],
        ["three", everyInstance, 1],
        // The same load per instance (three times the clients): what a platform adding instances for more
        // traffic sees. With the load above split three ways, an instance's batch can hold at most the calls
        // that reach it at once, a third of the one instance's, whatever the batcher does.
        ["scaled", everyInstance, everyInstance.length],
      ] as const) {
        const r = await statementsIn([...urls], clients);
        sum[which].acked += r.acked;
        sum[which].elapsedS += r.elapsedS;
        sum[which].statements += r.statements;
      }
    }
    const { one, three, scaled } = sum;
    const perS1 = one.acked / one.elapsedS;
    const perS3 = three.acked / three.elapsedS;
    figures.rest_3_vs_1_instances = round(perS3 / perS1);
    log(
      `6e. REST put->consume->ack: ${round(perS1, 0)} msgs/s on 1 instance, ${round(perS3, 0)} on 3 (ratio ${figures.rest_3_vs_1_instances})`,
    );
    const perMsg1 = one.statements / one.acked;
    const perMsg3 = three.statements / three.acked;
    figures.statements_per_msg_3_vs_1 = round(perMsg3 / perMsg1);
    const net = (x: typeof one) => (x.statements - idlePerS * x.elapsedS) / x.acked;
    log(
      `6f. database statements per message: ${round(perMsg1)} on 1 instance, ${round(perMsg3)} on 3 (ratio ${figures.statements_per_msg_3_vs_1}); ` +
        `without the ${round(idlePerS, 1)}/s of the 3 instances idle: ${round(net(one))} and ${round(net(three))} (ratio ${round(net(three) / net(one))})`,
    );
    const perMsgScaled = scaled.statements / scaled.acked;
    figures.statements_per_msg_3_vs_1_scaled = round(perMsgScaled / perMsg1);
    log(
      `6g. the same load per instance (${PRODUCERS * 3} producers and ${CONSUMERS * 3} consumers over 3 instances): ` +
        `${round(scaled.acked / scaled.elapsedS, 0)} msgs/s, ${round(perMsgScaled)} statements per message ` +
        `(ratio to 1 instance ${figures.statements_per_msg_3_vs_1_scaled}; without idle ${round(net(scaled) / net(one))})`,
    );
  } finally {
    for (const m of more) {
      // An instance that already ended (its "exit" event gone) is not waited for.
      if (m.child.exitCode !== null || m.child.signalCode !== null) continue;
      const exited = new Promise((r) => m.child.once("exit", r));
      m.child.kill("SIGTERM");
      await exited;
    }
  }
  return { figures };
}

interface CpuTimes {
  server: number;
  postgres: number;
  client: number;
  /** Transactions of the benchmark database so far (`pg_stat_database`, which backends update about once a second). */
  xacts: number;
}

interface CpuMeter {
  read(): Promise<CpuTimes>;
}

/** CPU seconds (user + system) a process has used so far, from /proc; 0 where it cannot be read. */
async function processCpuSeconds(pid: number): Promise<number> {
  try {
    const stat = await fs.readFile(`/proc/${pid}/stat`, "utf8");
    // Fields after the command (which may hold spaces), from field 3 on: utime and stime are fields 14 and 15.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return 0;
  }
}

/**
 * Where the CPU goes during a part: the service's process, the PostgreSQL
 * backends serving the benchmark database (when PostgreSQL runs on this
 * machine; its background writers are not counted) and this process.
 */
function cpuMeter(admin: pg.Client, dbName: string, serverPid: number): CpuMeter {
  return {
    async read() {
      const { rows } = await admin.query<{ pid: number }>(
        `SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`,
        [dbName],
      );
      const backends = await Promise.all(rows.map((r) => processCpuSeconds(r.pid)));
      const own = process.cpuUsage();
      const { rows: x } = await admin.query<{ n: string }>(
        `SELECT xact_commit + xact_rollback AS n FROM pg_stat_database WHERE datname = $1`,
        [dbName],
      );
      return {
        xacts: Number(x[0]?.n ?? 0),
        server: await processCpuSeconds(serverPid),
        postgres: backends.reduce((a, b) => a + b, 0),
        client: (own.user + own.system) / 1e6,
      };
    },
  };
}

function percentile(samples: number[], p: number): number {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

const round = (n: number, digits = 2) => Math.round(n * 10 ** digits) / 10 ** digits;

async function rssMb(pid: number): Promise<number> {
  const status = await fs.readFile(`/proc/${pid}/status`, "utf8");
  const kb = Number(/^VmRSS:\s+(\d+)/m.exec(status)?.[1] ?? 0);
  return kb / 1024;
}

/**
 * Committed + rolled-back transactions of the database so far. A backend
 * reports its counts to `pg_stat_database` only every so often while idle (up
 * to 10 s late), but always when it exits; so the service's idle pool
 * connections are ended first (the pool opens new ones on demand; the LISTEN
 * connection is left alone), which makes the count exact at this moment.
 */
async function xacts(admin: pg.Client, dbName: string): Promise<number> {
  await admin.query(
    `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
     WHERE datname = $1 AND state = 'idle' AND query NOT ILIKE 'LISTEN%' AND pid <> pg_backend_pid()`,
    [dbName],
  );
  await new Promise((r) => setTimeout(r, 300));
  const { rows } = await admin.query(
    `SELECT xact_commit + xact_rollback AS n FROM pg_stat_database WHERE datname = $1`,
    [dbName],
  );
  return Number(rows[0].n);
}

/** The benchmark database's transactions so far, as the backends last reported them (nothing is ended). */
async function transactionsNow(admin: pg.Client, dbName: string): Promise<number> {
  await admin.query(`SELECT pg_stat_clear_snapshot()`);
  const { rows } = await admin.query(
    `SELECT xact_commit + xact_rollback AS n FROM pg_stat_database WHERE datname = $1`,
    [dbName],
  );
  return Number(rows[0].n);
}

async function main(): Promise<void> {
  const database = await createBenchDatabase(BASE_URL, "pb_bench_queues");
  const { name: dbName } = database;
  const dbUrl = new URL(database.url);
  // The statistics views (each backend's CPU, the database's transactions) read from the server's own database.
  const admin = new pg.Client({ connectionString: BASE_URL });
  await admin.connect();
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), "pb-bench-queues-"));
  const adminToken = "pba_bench_" + crypto.randomBytes(24).toString("base64url");
  let child: ChildProcess | undefined;
  try {
    const service = await startService({ databaseUrl: dbUrl.toString(), dataDir, adminToken });
    child = service.child;
    const { app } = await adminCall(service.url, adminToken, "CreateApp", { name: "bench" });
    await adminCall(service.url, adminToken, "UpdateApp", { appId: app.id, limits: NO_RATE_LIMITS });
    const { token } = await adminCall(service.url, adminToken, "IssueToken", { appId: app.id });
    log(`service on ${service.url}, database ${dbName}`);

    let msgsPerS = NaN;
    let bossPerS = NaN;
    let wakeP50 = NaN;
    let wakeP99 = NaN;
    let idleXacts = NaN;
    let rss = NaN;
    let streamPerS = NaN;
    const controls: Record<string, number> = {
      put_depth_ratio: NaN,
      list_ms_1m: NaN,
      rest_batch_msgs_per_s: NaN,
      stream_cross_instance_msgs_per_s: NaN,
      rest_3_vs_1_instances: NaN,
      statements_per_msg_3_vs_1: NaN,
      statements_per_msg_3_vs_1_scaled: NaN,
      schedule_ticks_per_s: NaN,
      schedule_drift_p50_ms: NaN,
      schedule_drift_p99_ms: NaN,
      groups_vs_plain: NaN,
      empty_claim_ms: NaN,
      group_blocked_claim_ms: NaN,
      priority_vs_plain: NaN,
    };
    log(`server RSS at start: ${round(await rssMb(service.child.pid!), 0)} MB`);
    // 1. Throughput over REST.
    if (PARTS.has(1)) {
      const { acked, elapsedS, errors } = await restQueueLoad(service.url, token, {
        producers: PRODUCERS,
        consumers: CONSUMERS,
        maxOutstanding: MAX_OUTSTANDING,
        payload: PAYLOAD,
        seconds: SECONDS,
      });
      msgsPerS = acked / elapsedS;
      log(
        `1. REST put->consume->ack: ${round(msgsPerS, 0)} msgs/s (${acked} in ${round(elapsedS, 1)} s, ${errors} errors)`,
      );
    }

    // 2. pg-boss, same work, same PostgreSQL.
    if (PARTS.has(2)) {
      const boss = new PgBoss({ connectionString: dbUrl.toString(), max: 20, schedule: false, supervise: false });
      boss.on("error", (err: Error) => log(`pg-boss error: ${err.message}`));
      await boss.start();
      await boss.createQueue("bench");
      let bossDone = 0;
      let bossSent = 0;
      let bossStop = false;
      const bossProducers = Array.from({ length: PRODUCERS }, async () => {
        while (!bossStop) {
          if (bossSent - bossDone > MAX_OUTSTANDING) {
            await new Promise((r) => setTimeout(r, 1));
            continue;
          }
          await boss.send("bench", PAYLOAD);
          bossSent++;
        }
      });
      const bossConsumers = Array.from({ length: CONSUMERS }, async () => {
        while (!bossStop) {
          const jobs = await boss.fetch("bench");
          const job = jobs[0];
          if (!job) {
            await new Promise((r) => setTimeout(r, 5));
            continue;
          }
          await boss.complete("bench", job.id);
          bossDone++;
        }
      });
      const bossStarted = performance.now();
      await new Promise((r) => setTimeout(r, SECONDS * 1000));
      bossStop = true;
      const bossInWindow = bossDone;
      const bossElapsed = (performance.now() - bossStarted) / 1000;
      await Promise.all([...bossProducers, ...bossConsumers]);
      await boss.stop({ graceful: false });
      bossPerS = bossInWindow / bossElapsed;
      log(
        `2. pg-boss send->fetch->complete: ${round(bossPerS, 0)} jobs/s (${bossInWindow} in ${round(bossElapsed, 1)} s)`,
      );
    }

    // 3. Put -> delivery to an already waiting consume.
    if (PARTS.has(3)) {
      const waker = jsonClient(service.url, token, 4);
      const samples: number[] = [];
      for (let i = 0; i < 50 + WAKE_SAMPLES; i++) {
        const delivered = waker.request("POST", "/v1/queues/wake/consume", { waitSeconds: 25 });
        // Let the consume arrive and start waiting (its first claim finds nothing).
        await new Promise((r) => setTimeout(r, 8));
        const t0 = performance.now();
        const put = waker.request("POST", "/v1/queues/wake", { payload: i });
        const res = await delivered;
        const t1 = performance.now();
        await put;
        if (res.body?.message?.payload !== i) throw new Error(`wake: got ${JSON.stringify(res.body)} for ${i}`);
        await waker.request("POST", "/v1/queues/_ack", { receipt: res.body.message.receipt });
        if (i >= 50) samples.push(t1 - t0);
      }
      waker.agent.destroy();
      wakeP50 = percentile(samples, 50);
      wakeP99 = percentile(samples, 99);
      log(`3. wake-up put->delivery: p50 ${round(wakeP50)} ms, p99 ${round(wakeP99)} ms (${samples.length} samples)`);
    }

    // 5. The streaming fast path over gRPC.
    if (PARTS.has(5))
      streamPerS = await streamThroughput(service.url, token, cpuMeter(admin, dbName, service.child.pid!));

    // 6. Queue controls and costs that do not grow with the backlog.
    if (PARTS.has(6)) {
      const extra = await controlsBench(
        service.url,
        adminToken,
        { databaseUrl: dbUrl.toString(), dataDir, adminToken },
        () => transactionsNow(admin, dbName),
      );
      Object.assign(controls, extra.figures);
    }

    // 7. Schedules firing 1,000 ticks a second.
    if (PARTS.has(7)) {
      const drift = await scheduleDrift(service.url, adminToken, dbUrl.toString(), SCHEDULE_SECONDS);
      controls.schedule_ticks_per_s = round(drift.ticksPerS, 0);
      controls.schedule_drift_p50_ms = round(drift.p50Ms);
      controls.schedule_drift_p99_ms = round(drift.p99Ms);
      log(
        `7. schedules: ${round(drift.ticksPerS, 0)} ticks/s put, drift p50 ${round(drift.p50Ms)} ms, p99 ${round(drift.p99Ms)} ms, max ${round(drift.maxMs)} ms, by the put statement's time p50 ${round(drift.statementP50Ms)} ms, p99 ${round(drift.statementP99Ms)} ms (${drift.unseenCommits} commits unseen; ${drift.unput} ticks not put: ${drift.missed} missed, ${drift.skipped} skipped; ${drift.complete} schedules put every tick)`,
      );
    }

    // 8. Ordered groups and priorities against plain messages.
    if (PARTS.has(8)) Object.assign(controls, await orderBench(service.url, adminToken));

    // 4. Idle long-polls.
    if (PARTS.has(4)) {
      const idle = jsonClient(service.url, token, IDLE_POLLS + 10);
      let idleAnswers = 0;
      const polls = Array.from({ length: IDLE_POLLS }, (_, i) =>
        idle.request("POST", `/v1/queues/idle-${i % IDLE_QUEUES}/consume`, { waitSeconds: 25 }).then(
          () => idleAnswers++,
          () => idleAnswers++,
        ),
      );
      for (;;) {
        const text = await (await fetch(`${service.url}/metrics`)).text();
        if (Number(/^queue_waiting_consumers (\S+)$/m.exec(text)?.[1] ?? 0) >= IDLE_POLLS) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      const x0 = await xacts(admin, dbName);
      const t0 = performance.now();
      await new Promise((r) => setTimeout(r, IDLE_SECONDS * 1000));
      rss = await rssMb(service.child.pid!);
      const x1 = await xacts(admin, dbName);
      const idleSeconds = (performance.now() - t0) / 1000;
      idleXacts = (x1 - x0) / idleSeconds;
      if (idleAnswers > 0) log(`   (${idleAnswers} idle polls answered early)`);
      log(
        `4. ${IDLE_POLLS} idle long-polls on ${IDLE_QUEUES} queues: ${round(idleXacts)} xacts/s, server RSS ${round(rss, 0)} MB`,
      );
      child.kill("SIGTERM");
      await Promise.allSettled(polls);
      idle.agent.destroy();
    }

    process.stdout.write(
      JSON.stringify({
        msgs_per_s: round(msgsPerS, 0),
        pgboss_msgs_per_s: round(bossPerS, 0),
        ratio_vs_pgboss: round(msgsPerS / bossPerS),
        wake_p50_ms: round(wakeP50),
        wake_p99_ms: round(wakeP99),
        idle_xacts_per_s: round(idleXacts),
        idle_rss_mb: round(rss, 0),
        stream_msgs_per_s: round(streamPerS, 0),
        ...controls,
      }) + "\n",
    );
  } finally {
    if (child && child.exitCode === null) {
      child.kill("SIGTERM");
      await new Promise((r) => child!.once("exit", r));
    }
    await admin.end();
    await database.drop();
    await fs.rm(dataDir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`bench failed: ${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
