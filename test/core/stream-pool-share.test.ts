/**
 * A stream's statements are its app's work (`connect-interceptor.ts` runs the stream's messages as the
 * app's tenant, `tenant.ts`): they count against the app's share of the database pool
 * (`DATABASE_POOL_APP_SHARE`), not against the share of the work of no app, which every app's token
 * lookups, the shared statements and the housekeeping wait on. App A's streams are stuck (a transaction
 * elsewhere locks the messages table, as a long migration or a slow disk would), and app B's first call,
 * whose token is looked up as nobody's work, is answered all the same. Before, the streams' claims ran
 * as nobody's work: they filled that share, and B's lookup waited behind them until the pool's wait ran
 * out (a 503). PostgreSQL only: it holds a transaction open beside the server's.
 */
import { createClient } from "@connectrpc/connect";
import pg from "pg";
import { expect, it } from "vitest";
import { QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import { backend, transportFor, useTestServer } from "../support/harness.ts";

// A pool of 20 at 20% each: one tenant holds at most 4 connections.
const t = useTestServer({ env: { DATABASE_POOL_APP_SHARE: "20" } });

it.skipIf(backend !== "postgres")(
  "answers another app while one app's streams hold their share of the pool stuck",
  async () => {
    const a = await t.createApp();
    const b = await t.createApp();
    const queues = createClient(QueueService, transportFor(t.url, "grpc", a.token));
    const blocker = new pg.Client({ connectionString: t.database.url });
    await blocker.connect();
    const stop = new AbortController();
    const streams: Promise<unknown>[] = [];
    try {
      await blocker.query("BEGIN");
      // Claims lock rows of the messages table, so they wait for this lock; plain reads do not.
      await blocker.query("LOCK TABLE queue_messages IN EXCLUSIVE MODE");
      for (let i = 0; i < 8; i++)
        streams.push(
          (async () => {
            for await (const res of queues.streamMessages({ queue: `stuck-${i}`, window: 5 }, { signal: stop.signal }))
              void res;
          })().catch(() => undefined),
        );
      const lockWaits = async () => {
        await blocker.query("SELECT pg_stat_clear_snapshot()");
        const { rows } = await blocker.query<{ n: number }>(
          "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
        );
        return rows[0].n;
      };
      // One tenant's share of the pool (4 of 20) is stuck on the lock; the other streams' claims wait for it.
      // (A housekeeping sweep of the messages table may be stuck beside them.)
      await expect.poll(lockWaits, { timeout: 15_000 }).toBeGreaterThanOrEqual(4);
      // B's first call: its token is looked up (nobody's work), then its types are read (B's work).
      const answer = await t.request("GET", "/v1/analytics/types", { token: b.token });
      expect(answer.status).toBe(200);
      // Still stuck: B was answered beside A's streams, not after them.
      expect(await lockWaits()).toBeGreaterThanOrEqual(4);
    } finally {
      await blocker.query("ROLLBACK").catch(() => undefined);
      stop.abort();
      await Promise.all(streams);
      await blocker.end();
    }
  },
  30_000,
);
