/**
 * Analytics ingest serves apps in turn (`analytics-service.ts`'s gate): app
 * A's event batches are stuck (a transaction elsewhere holds A's rollup rows,
 * as a slow disk or a long backfill would), A keeps sending, and app B's batch
 * is stored all the same. Before, A's batches took every connection of the
 * pool while they waited, and B's waited behind them until A's were free.
 * PostgreSQL only: it holds a transaction open beside the server's.
 */
import pg from "pg";
import { expect, it } from "vitest";
import { backend, useTestServer } from "../support/harness.ts";

const t = useTestServer();

it.skipIf(backend !== "postgres")("stores another app's batch while a flooding app's batches are stuck", async () => {
  const a = await t.createApp();
  const b = await t.createApp();
  // A's rate is not limited here: what is measured is who gets stored, not the limit.
  await t.admin.updateApp({ appId: a.id, limits: { eventsPerSecond: 0 } });
  const log = (token: string) =>
    t.request("POST", "/v1/analytics/events", { token, body: { events: [{ type: "tick" }] } });
  for (const app of [a, b]) {
    expect((await t.request("POST", "/v1/analytics/types", { token: app.token, body: { name: "tick" } })).status).toBe(
      200,
    );
    expect((await log(app.token)).status).toBe(200);
  }
  const blocker = new pg.Client({ connectionString: t.database.url });
  await blocker.connect();
  try {
    await blocker.query("BEGIN");
    await blocker.query("SELECT 1 FROM analytics_daily WHERE app_id = $1 FOR UPDATE", [a.id]);
    const flood = Array.from({ length: 30 }, () => log(a.token));
    // A's batches being stored wait on the lock; the others wait for their turn.
    // (pg_stat_activity is read once per transaction unless its snapshot is cleared.)
    const lockWaits = async () => {
      await blocker.query("SELECT pg_stat_clear_snapshot()");
      const { rows } = await blocker.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
      );
      return rows[0].n;
    };
    // A's share of the ingest's places (2 of 4) is stuck on the lock.
    await expect.poll(lockWaits, { timeout: 10_000 }).toBeGreaterThanOrEqual(2);
    // And all of A's calls have arrived (nothing outside the server shows where each waits: a second's margin).
    await new Promise((r) => setTimeout(r, 1000));
    const answer = await Promise.race([
      log(b.token),
      new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 4000)),
    ]);
    await blocker.query("ROLLBACK");
    expect(answer?.status).toBe(200);
    expect((await Promise.all(flood)).map((r) => r.status)).toEqual(Array(30).fill(200));
  } finally {
    await blocker.end();
  }
});
