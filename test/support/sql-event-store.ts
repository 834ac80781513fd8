/**
 * The set-up the analytics store tests share: a fresh database of this run's backend, migrated, and the
 * SQL event store on it, for the describe block (or file) that calls `useSqlEventStore`; closed and
 * dropped after it. Hooks registered after the call (filling the store) run once it is there.
 */
import { afterAll, beforeAll } from "vitest";
import type { EventStore } from "../../src/analytics/event-store.ts";
import { createSqlEventStore } from "../../src/analytics/sql-event-store.ts";
import { migrate, openDatabase, type Database } from "../../src/core/database/index.ts";
import { createTestDatabase, type TestDatabase } from "./harness.ts";

export interface SqlEventStoreFixture {
  readonly store: EventStore;
  readonly db: Database;
}

export function useSqlEventStore(): SqlEventStoreFixture {
  let database: TestDatabase | undefined;
  let db: Database | undefined;
  let store: EventStore | undefined;
  beforeAll(async () => {
    database = await createTestDatabase();
    db = await openDatabase({ databaseUrl: database.url, dataDir: database.dataDir });
    await migrate(db.db);
    store = createSqlEventStore(db.db);
  }, 120_000);
  afterAll(async () => {
    await db?.close();
    await database?.drop();
  });
  return {
    get store() {
      if (!store) throw new Error("the store is made in beforeAll");
      return store;
    },
    get db() {
      if (!db) throw new Error("the database is opened in beforeAll");
      return db;
    },
  };
}
