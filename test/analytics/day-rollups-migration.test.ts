/**
 * Migration 0010 on a database that already holds rollups: the hourly rows of
 * 0003 become the hourly counts of their day's row (slot 0), so counts over
 * hours and days read the same before and after; and back down.
 */
import crypto from "node:crypto";
import path from "node:path";
import { sql } from "kysely";
import { Migrator, type Migration } from "kysely/migration";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDatabase, type Database } from "../../src/core/database/index.ts";
import { migrations } from "../../src/core/database/migrations/index.ts";
import { createSqlEventStore } from "../../src/analytics/sql-event-store.ts";
import { backend, createTestDatabase, type TestDatabase } from "../support/harness.ts";
import { T } from "./store-cases.ts";

/** The migration before 0010: going down to it takes 0010 and every later one down. */
const LAST_BEFORE_0010 = Object.keys(migrations)
  .filter((name) => name < "0010")
  .sort()
  .at(-1)!;

const migratorUpTo = (db: Database, last: string) =>
  new Migrator({
    db: db.db,
    provider: {
      getMigrations: () =>
        Promise.resolve(
          Object.fromEntries(Object.entries(migrations).filter(([name]) => name <= last)) as Record<string, Migration>,
        ),
    },
  });

describe(`migration 0010-analytics-day-rollups (${backend})`, () => {
  let database: TestDatabase;
  let db: Database;
  beforeAll(async () => {
    database = await createTestDatabase();
    // No template: the migrations before 0010 must run here, on a database that has none yet.
    db = await openDatabase({
      databaseUrl: database.url,
      dataDir: database.dataDir,
      templateCache: path.join(database.dataDir, "no-template"),
    });
  });
  afterAll(async () => {
    await db?.close();
    await database?.drop();
  });

  it("folds the hourly rows into their day's row and keeps every count", async () => {
    const before = migratorUpTo(db, "0009-~"); // every migration before 0010
    expect((await before.migrateToLatest()).error).toBeUndefined();
    const appId = crypto.randomUUID();
    // Day 2024-03-10: 2 events at 03:xx (one with plan=pro), 1 at 05:xx (plan=basic).
    await sql`
      INSERT INTO analytics_hourly (app_id, type, prop, hour, value, n) VALUES
        (${appId}::uuid, 'signup', '', '2024-03-10T03:00:00Z', '', 2),
        (${appId}::uuid, 'signup', '', '2024-03-10T05:00:00Z', '', 1),
        (${appId}::uuid, 'signup', 'plan', '2024-03-10T03:00:00Z', 'pro', 1),
        (${appId}::uuid, 'signup', 'plan', '2024-03-10T05:00:00Z', 'basic', 1)`.execute(db.db);
    await sql`
      INSERT INTO analytics_daily (app_id, type, prop, day, value, n) VALUES
        (${appId}::uuid, 'signup', '', '2024-03-10T00:00:00Z', '', 3),
        (${appId}::uuid, 'signup', 'plan', '2024-03-10T00:00:00Z', 'pro', 1),
        (${appId}::uuid, 'signup', 'plan', '2024-03-10T00:00:00Z', 'basic', 1)`.execute(db.db);

    expect((await migratorUpTo(db, "0010-analytics-day-rollups").migrateToLatest()).error).toBeUndefined();
    const store = createSqlEventStore(db.db);
    const since = T("2024-03-10T00:00:00Z");
    const until = T("2024-03-11T00:00:00Z");
    const rows = (unit: "hour" | "day") => store.count({ appId, type: "signup", unit, since, until, groupBy: "plan" });
    expect(await rows("hour")).toEqual([
      { at: T("2024-03-10T03:00:00Z"), group: null, count: 1 },
      { at: T("2024-03-10T03:00:00Z"), group: "pro", count: 1 },
      { at: T("2024-03-10T05:00:00Z"), group: "basic", count: 1 },
    ]);
    expect(await rows("day")).toEqual([
      { at: since, group: null, count: 1 },
      { at: since, group: "basic", count: 1 },
      { at: since, group: "pro", count: 1 },
    ]);
    // Written after the migration (by today's store, so with every later migration too), the next batch adds
    // to the same rows.
    expect((await migratorUpTo(db, "~").migrateToLatest()).error).toBeUndefined();
    await store.insert(appId, [{ type: "signup", at: T("2024-03-10T05:30:00Z"), properties: { plan: "basic" } }]);
    expect((await rows("hour")).at(-1)).toEqual({ at: T("2024-03-10T05:00:00Z"), group: "basic", count: 2 });

    // Down again: the hourly rows are back, with the batch written after the migration.
    const { error } = await migratorUpTo(db, "~").migrateTo(LAST_BEFORE_0010);
    expect(error).toBeUndefined();
    const hourly = await sql<{ hour: Date; prop: string; value: string; n: number }>`
      SELECT hour, prop, value, n FROM analytics_hourly WHERE app_id = ${appId}::uuid ORDER BY hour, prop, value`.execute(
      db.db,
    );
    expect(hourly.rows.map((r) => [new Date(r.hour).toISOString(), r.prop, r.value, Number(r.n)])).toEqual([
      ["2024-03-10T03:00:00.000Z", "", "", 2],
      ["2024-03-10T03:00:00.000Z", "plan", "pro", 1],
      ["2024-03-10T05:00:00.000Z", "", "", 2],
      ["2024-03-10T05:00:00.000Z", "plan", "basic", 2],
    ]);
  });
});
