/**
 * Connections of a test's own to the test server's PostgreSQL database (not
 * PGlite, which has one connection): one holds a lock or a transaction open
 * while the server works, another watches from outside that transaction
 * (whose view of pg_stat_activity would stay fixed).
 */
import pg from "pg";
import { afterAll, beforeAll } from "vitest";
import type { TestDatabase } from "./harness.ts";

/** `n` clients, connected in the file's `beforeAll` and ended after it. */
export function usePgClients(t: { database: TestDatabase }, n: number): pg.Client[] {
  const clients: pg.Client[] = [];
  beforeAll(async () => {
    for (let i = 0; i < n; i++) {
      const client = new pg.Client({ connectionString: t.database.url });
      await client.connect();
      clients.push(client);
    }
  });
  afterAll(async () => {
    await Promise.all(clients.map((c) => c.end()));
  });
  return clients;
}
