/**
 * A database outage under load, with a PostgreSQL this test owns and stops:
 * every request is answered 200 or 503 `unavailable` with Retry-After (REST
 * and Connect), never 500; the log says so once per outage, with no stack
 * per request; `/ready` says not ready while `/health` stays ok; after the
 * restart requests succeed again, and every put that got 200 is still there.
 * Needs PostgreSQL's server binaries, so it runs with the PostgreSQL suite.
 */
import crypto from "node:crypto";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import { ErrorDetailSchema } from "../../gen/platform/meta/v1/error_pb.js";
import { startServer, type TestServer } from "../support/harness.ts";
import { postgresBin, startOwnPostgres, type OwnPostgres } from "../support/own-postgres.ts";

const run = process.env.DATABASE_URL !== undefined && postgresBin !== undefined;

describe.runIf(run)("a database outage (src/core/database/health.ts, src/core/errors.ts, GET /ready)", () => {
  let pg: OwnPostgres;
  let t: TestServer;
  const lines: string[] = [];

  beforeAll(async () => {
    pg = await startOwnPostgres();
    const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), "pb-outage-"));
    t = await startServer({
      logLines: lines,
      database: {
        url: pg.url,
        dataDir,
        adminToken: "pba_test_" + crypto.randomBytes(24).toString("base64url"),
        secretsKey: crypto.randomBytes(32).toString("base64"),
        drop: () => fs.rm(dataDir, { recursive: true, force: true }),
      },
    });
  });
  afterAll(async () => {
    await t?.close();
    await t?.database.drop();
    await pg?.destroy();
  });

  it("answers 503 unavailable (never 500) while it is down, warns once, and recovers", async () => {
    const app = await t.createApp();
    const queues = t.client(QueueService, app.token);
    expect((await t.request("GET", "/ready")).status).toBe(200);

    const statuses: number[] = [];
    const bad: unknown[] = [];
    let putsOk = 0;
    let phase: "up" | "down" | "back" = "up";
    let downAnswers = 0;
    let backOk = 0;
    let stop = false;
    const restLoop = async () => {
      while (!stop) {
        const put = await t.request("POST", "/v1/queues/jobs", { token: app.token, body: { payload: { n: 1 } } });
        const list = await t.request("GET", "/v1/queues", { token: app.token });
        for (const res of [put, list]) {
          statuses.push(res.status);
          if (res.status === 503) {
            if (res.body?.error?.code !== "unavailable" || res.headers.get("retry-after") !== "2") bad.push(res.body);
            if (phase === "down") downAnswers++;
          } else if (res.status !== 200) bad.push({ status: res.status, body: res.body });
        }
        if (put.status === 200) {
          putsOk++;
          if (phase === "back") backOk++;
        }
      }
    };
    const connectLoop = async () => {
      while (!stop) {
        try {
          await queues.listQueues({});
        } catch (err) {
          const e = ConnectError.from(err);
          if (e.code !== Code.Unavailable || e.findDetails(ErrorDetailSchema)[0]?.code !== "unavailable")
            bad.push(e.message);
        }
      }
    };
    const loops = [restLoop(), restLoop(), restLoop(), connectLoop()];
    const until = async (condition: () => boolean) => {
      // Each iteration of the loops is a request: wait for the next answers, not for time.
      while (!condition()) await t.request("GET", "/health");
    };
    await until(() => putsOk >= 20);

    await pg.stop();
    phase = "down";
    await until(() => downAnswers >= 30);
    const notReady = await t.request("GET", "/ready");
    expect(notReady.status).toBe(503);
    expect(notReady.body.error.code).toBe("unavailable");
    expect(notReady.body.checks.database).not.toBe("ok");
    expect((await t.request("GET", "/health")).status).toBe(200);

    await pg.start();
    phase = "back";
    // An answer within a second of the outage's start proves nothing (health.ts, OUTAGE_SETTLE_MS): the
    // outage is over, and said so, with the first one after that.
    await until(() => backOk >= 10 && lines.some((l) => l.includes('"msg":"database reachable again"')));
    stop = true;
    await Promise.all(loops);

    expect(bad).toEqual([]);
    expect(statuses).not.toContain(500);
    expect(statuses.filter((s) => s === 503).length).toBeGreaterThanOrEqual(30);
    expect((await t.request("GET", "/ready")).status).toBe(200);
    // Every put that got 200 survived the outage.
    const listed = await t.request("GET", "/v1/queues", { token: app.token });
    expect(listed.body.queues[0].depth).toBe(putsOk);

    const logged = lines.map((l) => JSON.parse(l) as { level: number; msg: string; err?: unknown });
    expect(logged.filter((l) => l.msg === "unexpected error")).toEqual([]);
    expect(logged.filter((l) => l.msg.startsWith("database unreachable")).length).toBe(1);
    expect(logged.filter((l) => l.msg === "database reachable again").length).toBe(1);
  });
});
