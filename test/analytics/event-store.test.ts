/**
 * One suite, every real event store: the SQL store on PGlite and, when one is
 * reachable, on PostgreSQL (`describeEachBackend`), and the MongoDB store
 * against a real server only when MONGODB_URL is set. Without MONGODB_URL the
 * MongoDB block is reported as skipped, never as passed.
 */
import crypto from "node:crypto";
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDatabase, migrate, type Database } from "../../src/core/database/index.ts";
import type { EventStore, StoredEvent } from "../../src/analytics/event-store.ts";
import { createSqlEventStore, type AnalyticsEventTables } from "../../src/analytics/sql-event-store.ts";
import { createMongoEventStore } from "../../src/analytics/mongo-event-store.ts";
import { createTestDatabase, type TestDatabase, describeEachBackend, describeOnPostgres } from "../support/harness.ts";
import { runExtended } from "../../src/analytics/query-extensions.ts";
import { STORE_CASES, T, referenceCount, spreadEvents, type StoreCase } from "./store-cases.ts";

interface StoreUnderTest {
  store: EventStore;
  close(): Promise<void>;
}

const iso = (rows: { at: number; group: string | null; count: number }[]) =>
  rows.map((r) => [new Date(r.at).toISOString(), r.group, r.count]);

function storeSuite(open: () => Promise<StoreUnderTest>): void {
  let subject: StoreUnderTest;
  let store: EventStore;
  beforeAll(async () => {
    subject = await open();
    store = subject.store;
  });
  afterAll(async () => {
    await subject?.close();
  });

  /** Each case in its own app; the same events under another app and another type are noise that must not count. */
  const run = async (c: StoreCase) => {
    const appId = crypto.randomUUID();
    const otherApp = crypto.randomUUID();
    await store.insert(appId, c.events);
    await store.insert(otherApp, c.events);
    await store.insert(
      appId,
      c.events.map((e): StoredEvent => ({ ...e, type: "other" })),
    );
    const rows = await store.count({ appId, type: "signup", ...c.query });
    expect(iso(rows)).toEqual(c.expected);
  };

  for (const c of STORE_CASES) it(c.name, () => run(c));

  it("answers the query extensions and a funnel step's events (the same events on every store)", async () => {
    const appId = crypto.randomUUID();
    const at = T("2024-03-31T00:30:00Z"); // Europe/Berlin's day of its spring change
    const e = (dt: number, distinctId: string | undefined, plan: string | undefined, amount: number): StoredEvent => ({
      type: "signup",
      at: at + dt,
      properties: { ...(plan === undefined ? {} : { plan }), amount: String(amount) },
      numbers: { amount },
      ...(distinctId === undefined ? {} : { distinctId }),
    });
    await store.insert(appId, [
      e(0, "u1", "pro", 10),
      e(1000, "u1", "pro", 5),
      e(2000, "u2", "free", 2.5),
      e(3000, undefined, "pro", 1),
      e(86_400_000, "u3", undefined, 4),
    ]);
    const base = {
      appId,
      type: "signup",
      since: at - 86_400_000,
      until: at + 2 * 86_400_000,
      unit: "day" as const,
      timezone: "Europe/Berlin",
      where: [],
      groupBy: [],
    };
    const unique = await runExtended(store, { ...base, aggregate: "unique" }, undefined);
    expect(unique.rows.map((r) => [new Date(r.at!).toISOString(), r.value])).toEqual([
      ["2024-03-30T23:00:00.000Z", 2],
      ["2024-03-31T22:00:00.000Z", 1],
    ]);
    expect(unique.total).toBe(3);
    const sums = await runExtended(
      store,
      {
        ...base,
        aggregate: "sum",
        of: { name: "amount", kind: "number" },
        where: [{ property: "amount", kind: "number", op: "gt", value: 2 }],
        groupBy: ["plan"],
      },
      1,
    );
    expect(sums.rows.map((r) => [r.groups, r.other, r.value])).toEqual([
      [["pro"], false, 15],
      [[null], true, 2.5],
      [[null], true, 4],
    ]);
    expect(sums.otherGroups).toBe(2);
    const step = await store.stepEvents({
      appId,
      type: "signup",
      where: [],
      since: at,
      until: at + 2500,
      breakdown: "plan",
    });
    expect(step.sort((a, b) => a.at - b.at)).toEqual([
      { distinctId: "u1", at, group: "pro" },
      { distinctId: "u1", at: at + 1000, group: "pro" },
      { distinctId: "u2", at: at + 2000, group: "free" },
    ]);
  });

  it("agrees with the reference count on a spread of events, for every unit, grouped or not", async () => {
    const appId = crypto.randomUUID();
    const events = spreadEvents(600);
    // Two batches, so rollup rows are both inserted and added to.
    await store.insert(appId, events.slice(0, 300));
    await store.insert(appId, events.slice(300));
    const since = T("2024-02-27T07:20:00Z");
    const until = T("2024-03-03T15:40:00Z");
    for (const unit of ["hour", "day", "week", "month"] as const) {
      for (const groupBy of [undefined, "plan", "paid"]) {
        const query = { unit, since, until, groupBy };
        const rows = await store.count({ appId, type: "signup", ...query });
        expect(iso(rows), `${unit} ${groupBy}`).toEqual(referenceCount(events, query));
      }
    }
  });

  it("counts nothing for an app without events", async () => {
    expect(
      await store.count({
        appId: crypto.randomUUID(),
        type: "signup",
        unit: "day",
        since: 0,
        until: T("2030-01-01T00:00:00Z"),
      }),
    ).toEqual([]);
  });

  it("keeps concurrent batches whole and counts every event once", async () => {
    const appId = crypto.randomUUID();
    const batches = Array.from({ length: 8 }, (_, i) => spreadEvents(250, i + 1));
    await Promise.all(batches.map((b) => store.insert(appId, b)));
    const rows = await store.count({
      appId,
      type: "signup",
      unit: "day",
      since: T("2024-02-01T00:00:00Z"),
      until: T("2024-04-01T00:00:00Z"),
      groupBy: "plan",
    });
    expect(rows.reduce((n, r) => n + r.count, 0)).toBe(2000);
    expect(iso(rows)).toEqual(
      referenceCount(batches.flat(), {
        unit: "day",
        since: T("2024-02-01T00:00:00Z"),
        until: T("2024-04-01T00:00:00Z"),
        groupBy: "plan",
      }),
    );
  });

  it("counts exactly while many clients write the same buckets at once, and after retention", async () => {
    const appId = crypto.randomUUID();
    // 8 clients with 5 batches each, every batch spread over the same 5 days:
    // each batch shares nearly every rollup row with every other one.
    const clients = Array.from({ length: 8 }, (_, c) =>
      Array.from({ length: 5 }, (_, b) => spreadEvents(200, 100 + c * 10 + b)),
    );
    await Promise.all(
      clients.map(async (batches) => {
        for (const batch of batches) await store.insert(appId, batch);
      }),
    );
    const since = T("2024-02-26T07:20:00Z");
    const until = T("2024-03-03T15:40:00Z");
    const check = async (events: StoredEvent[]) => {
      for (const unit of ["hour", "day", "week"] as const) {
        for (const groupBy of [undefined, "plan"]) {
          const query = { unit, since, until, groupBy };
          const rows = await store.count({ appId, type: "signup", ...query });
          expect(iso(rows), `${unit} ${groupBy}`).toEqual(referenceCount(events, query));
        }
      }
    };
    const events = clients.flat(2);
    await check(events);
    // Retention takes whole UTC days, in batches smaller than what it deletes.
    const before = new Date(T("2024-02-29T00:00:00Z"));
    while ((await store.deleteBefore(appId, before, 500)) === 500);
    await check(events.filter((e) => e.at >= before.getTime()));
  });
}

describeEachBackend("SQL event store", () => {
  let database: TestDatabase;
  let db: Database;
  storeSuite(async () => {
    database = await createTestDatabase();
    db = await openDatabase({ databaseUrl: database.url, dataDir: database.dataDir });
    await migrate(db.db);
    return {
      // Fewer slots than concurrent batches, and a low bar for a wide batch:
      // the spread batches below write the two wide slots, sharing them (and
      // waiting on each other's row locks) as well as writing different ones;
      // the small cases write the shared slot.
      store: createSqlEventStore(db.db, { slots: 3, sharedSlotMaxRows: 20 }),
      async close() {
        await db.close();
        await database.drop();
      },
    };
  });

  it("writes concurrent wide batches into slots of their own, narrow ones into the shared slot, and counts each event once", async () => {
    const store = createSqlEventStore(db.db, { slots: 4, sharedSlotMaxRows: 20 });
    const appId = crypto.randomUUID();
    const wide = Array.from({ length: 6 }, (_, i) => spreadEvents(200, 300 + i));
    const narrow = Array.from({ length: 4 }, (_, i) => spreadEvents(3, 400 + i));
    await Promise.all([...wide, ...narrow].map((batch) => store.insert(appId, batch)));
    const slots = await db.db
      .withTables<AnalyticsEventTables>()
      .selectFrom("analytics_daily")
      .select("slot")
      .distinct()
      .where("app_id", "=", appId)
      .execute();
    expect(slots).toHaveLength(4);
    const query = {
      unit: "hour" as const,
      since: T("2024-02-27T00:00:00Z"),
      until: T("2024-03-03T00:00:00Z"),
      groupBy: "plan",
    };
    expect(iso(await store.count({ appId, type: "signup", ...query }))).toEqual(
      referenceCount([...wide, ...narrow].flat(), query),
    );
  });

  it("stores each event's columns as given: ids and values holding separators, quotes and escapes, and events without an id or numbers", async () => {
    const store = createSqlEventStore(db.db);
    const at = T("2024-03-01T10:00:00.123Z");
    const odd = ["a\x1eb", 'q"uo\\te', "tab\tnew\nline", "comma,{brace}", "émoji 🙂", "NULL", " "];
    const event = (i: number, extra: Partial<StoredEvent>): StoredEvent => ({
      type: i % 2 === 0 ? "signup" : "a.b-c_d",
      at: at + i,
      properties: { plan: odd[i % odd.length] },
      ...extra,
    });
    const batches: StoredEvent[][] = [
      // Every id a separator the store may choose holds (so it uses none of them), and ids without one.
      [
        event(0, { distinctId: "\x1e\x1f\x1d\x1c" }),
        event(1, {}),
        event(2, { distinctId: odd[1], numbers: { n: -0.5 } }),
      ],
      odd.map((id, i) =>
        event(i, { distinctId: id, properties: { s: odd[i], n: String(i * 1.5) }, numbers: { n: i * 1.5 } }),
      ),
      [event(3, {})],
      [event(4, { distinctId: "only" })],
      [event(5, { properties: {} }), event(6, { properties: {}, distinctId: "x" })],
    ];
    const expected: unknown[] = [];
    for (const batch of batches) {
      const appId = crypto.randomUUID();
      await store.insert(appId, batch);
      const { rows } = await sql<{
        type: string;
        at: Date;
        properties: unknown;
        distinct_id: string | null;
        numbers: unknown;
      }>`
        SELECT type, at, properties, distinct_id, numbers FROM analytics_events WHERE app_id = ${appId}::uuid ORDER BY at`.execute(
        db.db,
      );
      expected.push(
        rows.map((r) => ({ ...r, at: new Date(r.at).getTime() })),
        batch.map((e) => ({
          type: e.type,
          at: e.at,
          properties: e.properties,
          distinct_id: e.distinctId ?? null,
          numbers: e.numbers ?? null,
        })),
      );
    }
    for (let i = 0; i < expected.length; i += 2) expect(expected[i], `batch ${i / 2}`).toEqual(expected[i + 1]);
  });
});

describeOnPostgres(
  "SQL event store on a database whose time zone keeps summer time",
  "PGlite runs in UTC and does not apply a database's own zone",
  () => {
    // Days are UTC days whatever the database's own zone: a rollup row stored at
    // local midnight of a summer-time zone sat an hour before its UTC day, so its
    // day was read as the one before and retention took it with the day before.
    let database: TestDatabase;
    let db: Database;
    beforeAll(async () => {
      database = await createTestDatabase();
      const first = await openDatabase({ databaseUrl: database.url, dataDir: database.dataDir });
      await migrate(first.db);
      await sql`DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET TimeZone = %L', current_database(), 'Europe/Berlin'); END $$`.execute(
        first.db,
      );
      await first.close();
      db = await openDatabase({ databaseUrl: database.url, dataDir: database.dataDir });
    });
    afterAll(async () => {
      await db?.close();
      await database?.drop();
    });

    it("stores and counts summer days and hours in UTC, and retention keeps the cutoff day", async () => {
      const store = createSqlEventStore(db.db);
      const appId = crypto.randomUUID();
      const start = T("2024-07-09T00:00:00Z");
      const events = spreadEvents(400, 11).map((e) => ({ ...e, at: start + (e.at - T("2024-02-27T00:00:00Z")) }));
      await store.insert(appId, events);
      const check = async (kept: StoredEvent[]) => {
        for (const unit of ["hour", "day"] as const) {
          const query = { unit, since: T("2024-07-09T00:00:00Z"), until: T("2024-07-16T00:00:00Z"), groupBy: "plan" };
          const rows = await store.count({ appId, type: "signup", ...query });
          expect(iso(rows), unit).toEqual(referenceCount(kept, query));
        }
      };
      await check(events);
      const before = new Date(T("2024-07-11T00:00:00Z"));
      while ((await store.deleteBefore(appId, before, 500)) === 500);
      await check(events.filter((e) => e.at >= before.getTime()));
    });

    it("runs its sessions in UTC, whatever the database's own zone", async () => {
      const { rows } = await sql<{ setconfig: string[] }>`
      SELECT setconfig FROM pg_db_role_setting s JOIN pg_database d ON d.oid = s.setdatabase
      WHERE d.datname = current_database()`.execute(db.db);
      expect(rows.flatMap((r) => r.setconfig)).toContain("TimeZone=Europe/Berlin");
      for (const on of [db.db, db.relaxedDb, db.unboundedDb])
        expect((await sql<{ TimeZone: string }>`SHOW TimeZone`.execute(on)).rows).toEqual([{ TimeZone: "UTC" }]);
    });
  },
);

describe.skipIf(!process.env.MONGODB_URL)(
  "MongoDB event store (real server; SKIPPED unless MONGODB_URL is set)",
  () => {
    storeSuite(async () => {
      const collection = `analytics_events_test_${crypto.randomBytes(4).toString("hex")}`;
      const dbName = process.env.MONGODB_DB ?? "platform_batteries_test";
      const store = createMongoEventStore({ url: process.env.MONGODB_URL!, dbName, collection });
      return {
        store,
        async close() {
          const { MongoClient } = await import("mongodb");
          const client = new MongoClient(process.env.MONGODB_URL!);
          await client
            .db(dbName)
            .collection(collection)
            .drop()
            .catch(() => {});
          await client.close();
          await store.close();
        },
      };
    });

    it("lists the apps it holds events of, and deletes an app's events, saying how many", async () => {
      const collection = `analytics_events_test_${crypto.randomBytes(4).toString("hex")}`;
      const dbName = process.env.MONGODB_DB ?? "platform_batteries_test";
      const store = createMongoEventStore({ url: process.env.MONGODB_URL!, dbName, collection });
      try {
        const [a, b] = [crypto.randomUUID(), crypto.randomUUID()];
        await store.insert(a, spreadEvents(5));
        await store.insert(b, spreadEvents(3));
        expect((await store.appIds!()).sort()).toEqual([a, b].sort());
        expect(await store.deleteApp(a)).toBe(5);
        expect(await store.appIds!()).toEqual([b]);
      } finally {
        await store.close();
      }
    });
  },
);
