/**
 * The set-up the analytics store tests share: a fresh database of this run's backend, migrated, and the
 * SQL event store on it, for the describe block (or file) that calls `useSqlEventStore`; closed and
 * dropped after it. Hooks registered after the call (filling the store) run once it is there.
 */
import { beforeAll } from "vitest";
import type { EventStore } from "../../src/analytics/event-store.ts";
import { createSqlEventStore } from "../../src/analytics/sql-event-store.ts";
import type { Database } from "../../src/core/database/index.ts";
import { useMigratedDatabase } from "./harness.ts";

export interface SqlEventStoreFixture {
  readonly store: EventStore;
  readonly db: Database;
}

export function useSqlEventStore(): SqlEventStoreFixture {
  const db = useMigratedDatabase();
  let store: EventStore | undefined;
  beforeAll(() => {
    store = createSqlEventStore(db.db);
  });
  return {
    get store() {
      if (!store) throw new Error("the store is made in beforeAll");
      return store;
    },
    db,
  };
}
