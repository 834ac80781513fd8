/**
 * A database that hangs (a TCP proxy between the service and PostgreSQL
 * stops forwarding: connections stay open and nothing answers, as with a
 * stopped server): requests are answered 503 `unavailable` with Retry-After
 * within the configured bounds (DATABASE_STATEMENT_TIMEOUT_MS,
 * DATABASE_POOL_WAIT_MS) instead of waiting for the whole hang, `/ready`
 * says not ready, and once the database answers again so does the service.
 * A consumer's long-poll still waits longer than the statement bound: its
 * waiting is not a statement. And the analytics SQL store answers an
 * unreachable database 503 `unavailable`, as every other path does.
 */
import net from "node:net";
import { expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import { openDatabase } from "../../src/core/database/index.ts";
import { toPlatformError } from "../../src/core/errors.ts";
import { createSqlEventStore } from "../../src/analytics/sql-event-store.ts";
import { describeOnPostgres } from "../support/harness.ts";
import { useServerBehindProxy } from "../support/tcp-proxy.ts";

const STATEMENT_MS = 1000;
const POOL_WAIT_MS = 1000;
/** The longest a request may take while the database hangs: the bound, its grace for no answer at all, and slack for a loaded machine. */
const ANSWER_WITHIN_MS = STATEMENT_MS + 1000 + POOL_WAIT_MS + 4000;

describeOnPostgres(
  "a database that hangs (src/core/database/pg-pool.ts)",
  "it holds a connection to the server",
  () => {
    const behind = useServerBehindProxy({
      DATABASE_STATEMENT_TIMEOUT_MS: String(STATEMENT_MS),
      DATABASE_POOL_WAIT_MS: String(POOL_WAIT_MS),
    });

    /** A REST call that gives up (throws) long after the service should have answered. */
    const timed = async (method: string, path: string, token?: string, body?: unknown) => {
      const started = performance.now();
      const res = await fetch(behind.t.url + path, {
        method,
        headers: {
          ...(token ? { authorization: `Bearer ${token}` } : {}),
          ...(body === undefined ? {} : { "content-type": "application/json" }),
        },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(30_000),
      });
      return {
        status: res.status,
        retryAfter: res.headers.get("retry-after"),
        body: (await res.json()) as { error?: { code: string }; checks?: Record<string, string> },
        ms: performance.now() - started,
      };
    };

    it("lets a long-poll wait longer than the statement bound", async () => {
      const app = await behind.t.createApp();
      const res = await timed("POST", "/v1/queues/idle/consume", app.token, { waitSeconds: 3 });
      expect(res.status).toBe(200);
      expect(res.body).toEqual({ message: null });
      expect(res.ms).toBeGreaterThanOrEqual(2900);
    });

    it("answers 503 unavailable within the bounds while it hangs, and recovers", async () => {
      const app = await behind.t.createApp();
      expect((await timed("POST", "/v1/queues/jobs", app.token, { payload: 1 })).status).toBe(200);
      expect((await timed("GET", "/ready")).status).toBe(200);

      behind.proxy.hold();
      // More requests at once than the pool has connections: some wait for the pool, all are bounded.
      const during = await Promise.all([
        ...Array.from({ length: 30 }, (_, i) => timed("POST", "/v1/queues/jobs", app.token, { payload: i })),
        ...Array.from({ length: 5 }, () => timed("POST", "/v1/queues/jobs/consume", app.token, { waitSeconds: 0 })),
        timed("GET", "/v1/queues", app.token),
      ]);
      for (const res of during) {
        expect(res.status).toBe(503);
        expect(res.body.error?.code).toBe("unavailable");
        expect(Number(res.retryAfter)).toBeGreaterThan(0);
        expect(res.ms).toBeLessThan(ANSWER_WITHIN_MS);
      }
      const connect = behind.t.client(QueueService, app.token);
      const started = performance.now();
      const err = await connect.listQueues({}).then(
        () => undefined,
        (e: unknown) => ConnectError.from(e),
      );
      expect(err?.code).toBe(Code.Unavailable);
      expect(performance.now() - started).toBeLessThan(ANSWER_WITHIN_MS);
      const ready = await timed("GET", "/ready");
      expect(ready.status).toBe(503);
      expect(ready.body.checks?.database).not.toBe("ok");
      expect((await timed("GET", "/health")).status).toBe(200);

      behind.proxy.release();
      // Each try is a request: wait for the service to answer again, not for time.
      let put = await timed("POST", "/v1/queues/jobs", app.token, { payload: "after" });
      while (put.status !== 200) {
        expect(put.status).toBe(503);
        put = await timed("POST", "/v1/queues/jobs", app.token, { payload: "after" });
      }
      let readyAgain = await timed("GET", "/ready");
      while (readyAgain.status !== 200) readyAgain = await timed("GET", "/ready");
      expect(readyAgain.body.checks?.database).toBe("ok");
      const consumed = await timed("POST", "/v1/queues/jobs/consume", app.token, { waitSeconds: 0 });
      expect(consumed.status).toBe(200);
    });
  },
);

describeOnPostgres(
  "an unreachable database is one error everywhere (src/core/database/health.ts)",
  "the embedded database is never unreachable",
  () => {
    it("the analytics SQL store's failures are 503 unavailable, as on every other path", async () => {
      // A port nothing listens on: every connection is refused.
      const server = net.createServer();
      await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
      const { port } = server.address() as net.AddressInfo;
      await new Promise((resolve) => server.close(resolve));
      const database = await openDatabase({
        databaseUrl: `postgres://postgres@127.0.0.1:${port}/nothing`,
        dataDir: "/nonexistent",
        poolWaitMs: 1000,
      });
      try {
        const store = createSqlEventStore(database.db);
        const now = Date.now();
        const failures = await Promise.all([
          store.count({ appId: crypto.randomUUID(), type: "t", since: now - 3_600_000, until: now, unit: "hour" }).then(
            () => undefined,
            (e: unknown) => e,
          ),
          store.insert(crypto.randomUUID(), [{ type: "t", at: now, properties: {} }]).then(
            () => undefined,
            (e: unknown) => e,
          ),
        ]);
        for (const failure of failures) {
          const mapped = toPlatformError(failure);
          expect(mapped.code).toBe("unavailable");
          expect(mapped.status).toBe(503);
          expect(mapped.retryAfterSeconds).toBeGreaterThan(0);
        }
      } finally {
        await database.close();
      }
    });
  },
);
