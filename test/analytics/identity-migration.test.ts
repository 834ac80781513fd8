/**
 * Migration 0032 on events logged before it: a property its type declares a
 * number now gets its numeric form (values that do not read as a number, left
 * from when it was declared a string, do not), other properties none; the
 * extensions' sums then count the old events; and back down.
 */
import crypto from "node:crypto";
import path from "node:path";
import { sql } from "kysely";
import { Migrator, type Migration } from "kysely/migration";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDatabase, type Database } from "../../src/core/database/index.ts";
import { migrations } from "../../src/core/database/migrations/index.ts";
import { createSqlEventStore } from "../../src/analytics/sql-event-store.ts";
import { runExtended } from "../../src/analytics/query-extensions.ts";
import { backend, createTestDatabase, type TestDatabase } from "../support/harness.ts";
import { T } from "./store-cases.ts";

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

describe(`migration 0032-analytics-identity (${backend})`, () => {
  let database: TestDatabase;
  let db: Database;
  beforeAll(async () => {
    database = await createTestDatabase();
    db = await openDatabase({
      databaseUrl: database.url,
      dataDir: database.dataDir,
      templateCache: path.join(database.dataDir, "no-template"),
    });
  }, 120_000);
  afterAll(async () => {
    await db?.close();
    await database?.drop();
  });

  it("gives the events of number properties their numeric form", async () => {
    const before = migratorUpTo(db, "0031-~");
    expect((await before.migrateToLatest()).error).toBeUndefined();
    const appId = crypto.randomUUID();
    await sql`INSERT INTO apps (id, name) VALUES (${appId}::uuid, ${`m-${appId.slice(0, 8)}`})`.execute(db.db);
    await sql`
      INSERT INTO analytics_event_types (app_id, name, properties) VALUES
        (${appId}::uuid, 'order', '{"amount": "number", "plan": "string"}')`.execute(db.db);
    const at = new Date(T("2024-03-01T10:00:00Z"));
    await sql`
      INSERT INTO analytics_events (app_id, type, at, properties) VALUES
        (${appId}::uuid, 'order', ${at}, '{"amount": "12.5", "plan": "pro"}'),
        (${appId}::uuid, 'order', ${at}, '{"amount": "-1e+21"}'),
        (${appId}::uuid, 'order', ${at}, '{"amount": "many"}'),
        (${appId}::uuid, 'order', ${at}, '{"plan": "3"}'),
        (${appId}::uuid, 'other', ${at}, '{"amount": "7"}')`.execute(db.db);
    expect((await migratorUpTo(db, "0032-~").migrateToLatest()).error).toBeUndefined();
    const { rows } = await sql<{ numbers: Record<string, number> | null; distinct_id: string | null }>`
      SELECT numbers, distinct_id FROM analytics_events WHERE app_id = ${appId}::uuid ORDER BY properties::text`.execute(
      db.db,
    );
    const numbers = rows.map((r) => r.numbers);
    expect(numbers.filter((n) => n === null)).toHaveLength(3);
    expect(numbers.filter((n) => n !== null).sort((a, b) => a.amount - b.amount)).toEqual([
      { amount: -1e21 },
      { amount: 12.5 },
    ]);
    expect(rows.every((r) => r.distinct_id === null)).toBe(true);
    const answer = await runExtended(
      createSqlEventStore(db.db),
      {
        appId,
        type: "order",
        since: at.getTime(),
        until: at.getTime() + 1,
        aggregate: "max",
        of: { name: "amount", kind: "number" },
        where: [],
        groupBy: [],
      },
      undefined,
    );
    expect(answer.total).toBe(12.5);
    expect(answer.count).toBe(2);
  });

  it("goes back down", async () => {
    const down = await migratorUpTo(db, "0032-~").migrateDown();
    expect(down.error).toBeUndefined();
    const { rows } = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM information_schema.columns
      WHERE table_name = 'analytics_events' AND column_name IN ('distinct_id', 'numbers')`.execute(db.db);
    expect(rows[0].n).toBe(0);
  });
});
