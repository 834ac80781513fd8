/**
 * A real PostgreSQL failover under load: a primary and a synchronous standby
 * (Debian's `pg_createcluster`, the standby made with `pg_basebackup -R`),
 * HAProxy in TCP mode in front (`deploy/haproxy/postgres-failover.cfg`), two
 * service processes on it, producers putting with Idempotency-Keys and
 * consumers taking and acking. Then `kill -9` of the primary's postmaster and
 * the standby promoted. Between the two, new connections reach the standby,
 * where writes fail with SQLSTATE 25006 (read-only): that, and the killed
 * connections, must be answered 503 `unavailable` with Retry-After, never 500,
 * and not logged as unexpected errors. After the promotion: a put succeeds
 * within 5 s, `/ready` is ready again, every put that got 200 is still there
 * (consumed or in the queue), and a consume waiting on one instance is woken
 * by a put on the other (LISTEN came back, on the new primary).
 *
 * Runs on the PostgreSQL suite only, as root (pg_createcluster writes
 * /etc/postgresql), with haproxy installed (`.ci/run` installs it). Skipped on
 * PGlite, saying so: an embedded database has no failover.
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import fsp from "node:fs/promises";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { ErrorDetailSchema } from "../../gen/platform/meta/v1/error_pb.js";
import { QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import { backend } from "../support/harness.ts";
import { cleanEnv, startServiceProcess, type ServiceProcess } from "../support/service-process.ts";

const run = promisify(execFile);
const HAPROXY = ["/usr/sbin/haproxy", "/usr/bin/haproxy"].find((p) => fs.existsSync(p));
const CONFIG = path.resolve(import.meta.dirname, "../../deploy/haproxy/postgres-failover.cfg");
const PG_VERSION = fs.existsSync("/usr/lib/postgresql")
  ? fs
      .readdirSync("/usr/lib/postgresql")
      .filter((v) => fs.existsSync(`/usr/lib/postgresql/${v}/bin/pg_basebackup`))
      .sort((a, b) => Number(b) - Number(a))[0]
  : undefined;
const why =
  backend !== "postgres"
    ? "skipped on PGlite: an embedded database has no failover; runs with the PostgreSQL suite"
    : process.getuid?.() !== 0
      ? "skipped: pg_createcluster needs root"
      : !fs.existsSync("/usr/bin/pg_createcluster") || !PG_VERSION
        ? "skipped: Debian's postgresql-common (pg_createcluster) is not installed"
        : !HAPROXY
          ? "skipped: haproxy is not installed"
          : undefined;

/** A free port in 22100-22199 (this test's own range, for the clusters and the proxy). */
async function freePort(taken: Set<number>): Promise<number> {
  for (
    let port = 22100 + crypto.randomInt(100), tries = 0;
    tries < 100;
    tries++, port = 22100 + ((port - 22099) % 100)
  ) {
    if (taken.has(port)) continue;
    const free = await new Promise<boolean>((resolve) => {
      const s = net.createServer();
      s.once("error", () => resolve(false));
      s.listen(port, "127.0.0.1", () => s.close(() => resolve(true)));
    });
    if (free) {
      taken.add(port);
      return port;
    }
  }
  throw new Error("no free port in 22100-22199");
}

/** Statuses and times of every answer the load got, and the keys of the puts that got 200. */
interface Load {
  answers: { at: number; status: number | "network"; what: string; code?: string; retryAfter?: string | null }[];
  acked: Set<string>;
  seen: Set<string>;
  stop: boolean;
}

describe.skipIf(why !== undefined)(`PostgreSQL failover behind HAProxy${why ? ` (${why})` : ""}`, () => {
  const id = crypto.randomBytes(3).toString("hex");
  const primary = `pbfo_p_${id}`;
  const standby = `pbfo_s_${id}`;
  const ports = new Set<number>();
  let proxyUrl = "";
  let haproxy: ChildProcess | undefined;
  const instances: ServiceProcess[] = [];
  let dataDir = "";
  const adminToken = "pba_test_" + crypto.randomBytes(24).toString("base64url");
  const cluster = (name: string, ...args: string[]) => run("pg_ctlcluster", [PG_VERSION!, name, ...args]);
  const psql = async (port: number, text: string) => {
    const client = new pg.Client({ connectionString: `postgres://postgres@127.0.0.1:${port}/postgres` });
    await client.connect();
    try {
      return (await client.query(text)).rows as Record<string, unknown>[];
    } finally {
      await client.end();
    }
  };

  beforeAll(async () => {
    const [p1, p2, p3] = [await freePort(ports), await freePort(ports), await freePort(ports)];
    const settings = ["-o", "fsync=off", "-o", "full_page_writes=off"];
    const initdb = ["--", "--auth-local=trust", "--auth-host=trust", "--no-sync"];
    await run("pg_createcluster", [PG_VERSION!, primary, "-p", String(p1), ...settings, "--start", ...initdb]);
    // The standby: a base backup of the primary (-R: it follows the primary), with the primary's configuration
    // files beside it, taken in as a cluster of its own by pg_createcluster (which rewrites their paths and
    // port). No initdb of a cluster that the backup would replace: the slowest step of making one.
    const makeStandby = async () => {
      const standbyData = `/var/lib/postgresql/${PG_VERSION}/${standby}`;
      await run("runuser", [
        "-u",
        "postgres",
        "--",
        `/usr/lib/postgresql/${PG_VERSION}/bin/pg_basebackup`,
        ...[
          "-h",
          "127.0.0.1",
          "-p",
          String(p1),
          "-U",
          "postgres",
          "-D",
          standbyData,
          "-R",
          "-X",
          "stream",
          "-c",
          "fast",
        ],
      ]);
      for (const file of ["postgresql.conf", "pg_hba.conf", "pg_ident.conf"]) {
        await run("install", [
          ...["-o", "postgres", "-g", "postgres", "-m", "600"],
          `/etc/postgresql/${PG_VERSION}/${primary}/${file}`,
          `${standbyData}/${file}`,
        ]);
      }
      await run("pg_createcluster", [PG_VERSION!, standby, "-p", String(p2), "--start"]);
    };

    haproxy = spawn(HAPROXY!, ["-db", "-f", CONFIG], {
      env: {
        ...process.env,
        PB_PG_LISTEN: `127.0.0.1:${p3}`,
        PB_PG_PRIMARY: `127.0.0.1:${p1}`,
        PB_PG_STANDBY: `127.0.0.1:${p2}`,
      },
      stdio: ["ignore", "ignore", "ignore"],
    });
    proxyUrl = `postgres://postgres@127.0.0.1:${p3}/postgres`;
    dataDir = await fsp.mkdtemp(path.join(os.tmpdir(), "pb-failover-"));
    const env = cleanEnv({
      PORT: "0",
      DATA_DIR: dataDir,
      DATABASE_URL: proxyUrl,
      ADMIN_TOKEN: adminToken,
      SECRETS_KEY: crypto.randomBytes(32).toString("base64"),
    });
    // The instances start (one migrates, the other waits for its migration lock, both for HAProxy if need be)
    // while the standby is made: the backup is consistent whatever runs meanwhile, and streams what follows.
    const [started] = await Promise.all([
      Promise.all([startServiceProcess(env), startServiceProcess(env)]),
      makeStandby(),
    ]);
    instances.push(...started);
    // Synchronous from now on (set after the base backup, so the standby does not inherit it and, once
    // promoted, wait for a standby of its own): a commit answers only once the standby has it.
    await psql(p1, "ALTER SYSTEM SET synchronous_standby_names = '*'");
    await psql(p1, "SELECT pg_reload_conf()");
    for (;;) {
      const rows = await psql(p1, "SELECT sync_state FROM pg_stat_replication");
      if (rows[0]?.sync_state === "sync") break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }, 120_000);

  afterAll(async () => {
    for (const instance of instances) instance.child.kill("SIGTERM");
    await Promise.all(instances.map((i) => i.exited));
    haproxy?.kill("SIGTERM");
    await Promise.all(
      [primary, standby].map((name) => run("pg_dropcluster", ["--stop", PG_VERSION!, name]).catch(() => {})),
    );
    if (dataDir) await fsp.rm(dataDir, { recursive: true, force: true });
  }, 60_000);

  it("answers 503 (never 500) while it fails over, loses no acknowledged put, and serves again within 5 s of the promotion", async () => {
    const [a, b] = instances;
    const admin = async (url: string, rpc: string, body: object) => {
      const res = await fetch(`${url}/platform.admin.v1.AdminService/${rpc}`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${adminToken}` },
        body: JSON.stringify(body),
      });
      expect(res.status).toBe(200);
      return (await res.json()) as Record<string, unknown>;
    };
    const created = (await admin(a.url, "CreateApp", { name: `failover-${id}` })) as { app: { id: string } };
    const { token } = (await admin(a.url, "IssueToken", { appId: created.app.id })) as { token: string };

    const load: Load = { answers: [], acked: new Set(), seen: new Set(), stop: false };
    /** Resolves at the next answer: the loops' own progress is what the test waits on. */
    const nextAnswer: (() => void)[] = [];
    const call = async (
      url: string,
      what: string,
      pathname: string,
      body: object,
      headers: Record<string, string> = {},
    ) => {
      let answer: Load["answers"][number];
      let json: Record<string, unknown> | undefined;
      try {
        const res = await fetch(url + pathname, {
          method: "POST",
          headers: { "content-type": "application/json", authorization: `Bearer ${token}`, ...headers },
          body: JSON.stringify(body),
          signal: AbortSignal.timeout(30_000),
        });
        json = (await res.json()) as Record<string, unknown>;
        answer = {
          at: Date.now(),
          status: res.status,
          what,
          code: (json.error as { code?: string } | undefined)?.code,
          retryAfter: res.headers.get("retry-after"),
        };
      } catch {
        answer = { at: Date.now(), status: "network", what };
      }
      load.answers.push(answer);
      for (const resolve of nextAnswer.splice(0)) resolve();
      return { status: answer.status, json };
    };
    const until = async (condition: () => boolean, what: string, withinMs = 30_000) => {
      const deadline = Date.now() + withinMs;
      while (!condition()) {
        if (Date.now() > deadline) throw new Error(`not within ${withinMs} ms: ${what}`);
        await new Promise<void>((resolve) => {
          nextAnswer.push(resolve);
          setTimeout(resolve, 200);
        });
      }
    };

    const producer = async (p: number) => {
      const url = instances[p % 2].url;
      for (let n = 0; !load.stop; n++) {
        const key = `p${p}-${n}`;
        const put = await call(url, "put", "/v1/queues/load", { payload: { key } }, { "idempotency-key": key });
        if (put.status === 200) load.acked.add(key);
      }
    };
    const consumer = async (c: number) => {
      const url = instances[c % 2].url;
      while (!load.stop) {
        const got = await call(url, "consume", "/v1/queues/load/consume", { waitSeconds: 1, leaseSeconds: 5 });
        const message = got.json?.message as { payload: { key: string }; receipt: string } | null | undefined;
        if (got.status !== 200 || !message) continue;
        load.seen.add(message.payload.key);
        await call(url, "ack", "/v1/queues/_ack", { receipt: message.receipt });
      }
    };
    /** Puts over gRPC (h2c) and Connect: a refusal must be UNAVAILABLE carrying our code and a retry hint. */
    const rpcProducer = async (p: number) => {
      const url = instances[p % 2].url;
      const protocol = p % 2 === 0 ? "grpc" : "connect";
      const transport =
        protocol === "grpc"
          ? createGrpcTransport({ baseUrl: url })
          : createConnectTransport({ baseUrl: url, httpVersion: "1.1" });
      const queues = createClient(QueueService, transport);
      for (let n = 0; !load.stop; n++) {
        const key = `${protocol}${p}-${n}`;
        let answer: Load["answers"][number];
        try {
          await queues.putMessage(
            {
              queue: "load",
              payload: {
                kind: {
                  case: "structValue",
                  value: { fields: { key: { kind: { case: "stringValue", value: key } } } },
                },
              },
            },
            { headers: { authorization: `Bearer ${token}`, "idempotency-key": key }, timeoutMs: 30_000 },
          );
          load.acked.add(key);
          answer = { at: Date.now(), status: 200, what: "put" };
        } catch (err) {
          const e = ConnectError.from(err);
          const detail = e.findDetails(ErrorDetailSchema)[0];
          answer = {
            at: Date.now(),
            // UNAVAILABLE counts as the 503 it is over REST; any other code fails the test below.
            status: e.code === Code.Unavailable ? 503 : 1000 + e.code,
            what: `${protocol} put`,
            code: detail?.code,
            retryAfter: detail?.retryAfterSeconds === undefined ? null : String(detail.retryAfterSeconds),
          };
        }
        load.answers.push(answer);
        for (const resolve of nextAnswer.splice(0)) resolve();
      }
    };
    const loops = [0, 1, 2, 3, 4, 5].map(producer).concat([0, 1].map(consumer)).concat([0, 1].map(rpcProducer));

    await until(() => load.acked.size >= 100, "100 puts before the failover");
    const pid = Number(
      (await fsp.readFile(`/var/lib/postgresql/${PG_VERSION}/${primary}/postmaster.pid`, "utf8")).split("\n")[0],
    );
    process.kill(pid, "SIGKILL");
    const killedAt = Date.now();
    // The standby, not promoted yet, takes the new connections (HAProxy's backup): writes are refused there.
    await until(
      () => load.answers.filter((x) => x.at > killedAt && x.status !== 200).length >= 20,
      "20 refusals after the kill",
    );
    const readyDuring = await Promise.all(instances.map((i) => fetch(`${i.url}/ready`)));
    const promotedAt = Date.now();
    await cluster(standby, "promote");
    await until(
      () => load.answers.some((x) => x.at > promotedAt && x.what === "put" && x.status === 200),
      "a put answered 200 after the promotion",
      10_000,
    );
    const firstOk = load.answers.find((x) => x.at > promotedAt && x.what === "put" && x.status === 200)!;
    const secondsToFirst200 = (firstOk.at - promotedAt) / 1000;
    const ackedAtPromotion = load.acked.size;
    await until(() => load.acked.size >= ackedAtPromotion + 100, "100 puts after the promotion");

    // A consume waiting on one instance is woken by a put on the other: NOTIFY reaches it over the LISTEN
    // connection made anew on the new primary (the periodic re-check is 5 s apart; twice within 1.5 s is not it).
    for (const [waiter, putter] of [
      [a, b],
      [b, a],
    ]) {
      const waiting = fetch(`${waiter.url}/v1/queues/wake/consume`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
        body: JSON.stringify({ waitSeconds: 20 }),
      }).then(async (res) => ({
        at: Date.now(),
        body: (await res.json()) as { message: { payload: unknown } | null },
      }));
      await untilWaiting(waiter.url);
      const putAt = Date.now();
      const put = await fetch(`${putter.url}/v1/queues/wake`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
        body: JSON.stringify({ payload: { wake: putAt } }),
      });
      expect(put.status).toBe(200);
      const woken = await waiting;
      expect(woken.body.message?.payload).toEqual({ wake: putAt });
      expect(woken.at - putAt).toBeLessThan(1500);
    }

    load.stop = true;
    await Promise.all(loops);

    // Every put that got 200 is still there: consumed, or in the queue (leased or waiting).
    const stored = new pg.Client({ connectionString: proxyUrl });
    await stored.connect();
    const rows = (await stored.query<{ payload: string }>("SELECT payload FROM queue_messages")).rows;
    await stored.end();
    const inQueue = new Set(rows.map((r) => (JSON.parse(r.payload) as { key?: string }).key));
    const lost = [...load.acked].filter((key) => !load.seen.has(key) && !inQueue.has(key));

    const statuses = load.answers.map((x) => x.status);
    const count = (s: number | "network") => statuses.filter((x) => x === s).length;
    const figures = {
      puts: load.answers.filter((x) => x.what.endsWith("put")).length,
      rpcRefusals: load.answers.filter((x) => x.what !== "put" && x.what.endsWith("put") && x.status !== 200).length,
      acknowledged: load.acked.size,
      lost: lost.length,
      answers500: count(500),
      answers503: count(503),
      network: count("network"),
      secondsToFirst200: secondsToFirst200,
    };
    console.log(`failover figures: ${JSON.stringify(figures)}`);
    expect(lost).toEqual([]);
    expect(count(500)).toBe(0);
    expect(statuses.filter((s) => s !== 200 && s !== 503)).toEqual([]);
    for (const x of load.answers.filter((x) => x.status === 503)) {
      expect(x).toMatchObject({ code: "unavailable", retryAfter: expect.stringMatching(/^\d+$/) as unknown });
    }
    expect(secondsToFirst200).toBeLessThan(5);
    // While the standby was read-only, /ready said so (a SELECT 1 there answers, and said ready).
    expect(readyDuring.map((r) => r.status)).toEqual([503, 503]);
    for (const instance of instances) expect((await fetch(`${instance.url}/ready`)).status).toBe(200);
    // An outage, not a fault: no error-level "unexpected error" lines in either instance's log.
    for (const instance of instances) {
      const unexpected = instance
        .stdout()
        .split("\n")
        .filter((line) => line.includes('"unexpected error"'));
      expect(unexpected).toEqual([]);
    }
  }, 120_000);
});

/** Resolves once `/metrics` of `url` counts a waiting consume (nothing else tells a client it waits). */
async function untilWaiting(url: string): Promise<void> {
  for (;;) {
    const text = await (await fetch(`${url}/metrics`)).text();
    if (/^queue_waiting_consumers [1-9]/m.test(text)) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
