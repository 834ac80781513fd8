/**
 * The overview's request counts (`src/core/request-counts/`) against the real
 * database on both backends: counts recorded between two flushes are added
 * once, per 5-minute bucket and per app and UTC day, with 4xx and 5xx apart;
 * the instances of one database add up; and a flush that fails (the table
 * cannot be written) keeps its counts for the next one: nothing is lost or
 * written twice.
 */
import { describe, expect, it } from "vitest";
import { sql } from "kysely";
import pino from "pino";
import { BUCKET_MS, createRequestCounts } from "../../src/core/request-counts/index.ts";
import { useTestServer } from "../support/harness.ts";

const t = useTestServer();
const silent = pino({ level: "silent" });

async function appRow(name: string): Promise<string> {
  return (await t.createApp(name)).id;
}

describe("request counts", () => {
  it("adds each instance's counts once, per bucket and per app and day, and keeps them through a failed flush", async () => {
    const db = t.server.deps.db;
    const appId = await appRow("counted");
    // Two "instances" on one database, on a fixed clock in the middle of a bucket.
    const now = Math.floor(Date.now() / BUCKET_MS) * BUCKET_MS + 60_000;
    const a = createRequestCounts(db, silent, () => now);
    const b = createRequestCounts(db, silent, () => now);
    a.record("mail", appId, 200);
    a.record("mail", appId, 429);
    a.record("mail", undefined, 401);
    b.record("mail", appId, 502);
    await Promise.all([a.flush(), b.flush()]);
    // Nothing new: a second flush writes nothing twice.
    await a.flush();

    const buckets = (await a.store.buckets(new Date(now - BUCKET_MS))).filter((r) => r.facility === "mail");
    expect(buckets).toEqual([
      { bucket: new Date(now - 60_000), facility: "mail", requests: 4, clientErrors: 2, serverErrors: 1 },
    ]);
    const day = new Date(now).toISOString().slice(0, 10);
    expect((await a.store.topApps(day, 10)).find((r) => r.appId === appId)).toMatchObject({
      requests: 3,
      clientErrors: 1,
      serverErrors: 1,
    });

    // The table cannot be written: the flush fails, the counts stay for the next one.
    await sql`ALTER TABLE app_request_days RENAME TO app_request_days_away`.execute(db);
    a.record("mail", appId, 200);
    try {
      await a.flush();
    } finally {
      await sql`ALTER TABLE app_request_days_away RENAME TO app_request_days`.execute(db);
    }
    a.record("mail", appId, 200);
    await a.flush();
    expect((await a.store.topApps(day, 10)).find((r) => r.appId === appId)?.requests).toBe(5);
    const after = (await a.store.buckets(new Date(now - BUCKET_MS))).filter((r) => r.facility === "mail");
    expect(after[0].requests).toBe(6);
  });
});
