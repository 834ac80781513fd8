/**
 * Housekeeping deletes, run by the periodic sweeps (`queue-housekeeping.ts`) on the relaxed handle: expired
 * messages, dead letters and dedup keys, old activity hours, and what deleted apps left. Each deletes at
 * most `limit` rows, skipping locked ones, so a sweep never waits on a consumer.
 */
import { sql } from "kysely";
import type { QueueDbs } from "./queue-tables.ts";
import { boundedDelete, LEASED } from "./sql-fragments.ts";

/** The sweeps' deletes; each answers how many rows it deleted. */
export interface HousekeepingStore {
  /** Deletes up to `limit` policies, dedup keys and count rows of apps that no longer exist; how many. */
  deleteControlOrphans(limit: number): Promise<number>;
  /** Deletes up to `limit` dedup keys past their window; how many. */
  expireDedupKeys(limit: number): Promise<number>;
  /** Deletes up to `limit` expired waiting messages; returns how many. */
  expire(limit: number): Promise<number>;
  /** Deletes up to `limit` messages of apps that no longer exist; returns how many. */
  deleteOrphans(limit: number): Promise<number>;
  /** Deletes up to `limit` dead letters past their `expires_at`; how many. */
  expireDeadLetters(limit: number): Promise<number>;
  /** Deletes up to `limit` dead letters of apps that no longer exist; how many. */
  deleteDeadLetterOrphans(limit: number): Promise<number>;
  /** Deletes up to `limit` count rows of hours older than `keepHours` (deleted apps' rows age out the same way). */
  pruneActivity(prune: { keepHours: number; limit: number }): Promise<number>;
}

export function createHousekeepingStore({ relaxedDb }: QueueDbs): HousekeepingStore {
  /** Deletes up to `limit` rows of `table` whose app is gone (deleted apps' messages and dead letters follow through housekeeping). */
  function deleteOrphansOf(table: "queue_messages" | "queue_dead_letters", limit: number): Promise<number> {
    const rows = sql`${sql.table(table)} t WHERE NOT EXISTS (SELECT 1 FROM apps a WHERE a.id = t.app_id)`;
    return boundedDelete(relaxedDb, { table, keys: ["id"], rows, limit });
  }

  return {
    async deleteControlOrphans(limit) {
      let total = 0;
      for (const table of ["queue_policies", "queue_dedup", "queue_counts"] as const) {
        const result = await sql`
          DELETE FROM ${sql.table(table)} WHERE app_id IN (
            SELECT DISTINCT t.app_id FROM ${sql.table(table)} t
            WHERE NOT EXISTS (SELECT 1 FROM apps a WHERE a.id = t.app_id)
            LIMIT ${limit}
          )`.execute(relaxedDb);
        total += Number(result.numAffectedRows ?? 0n);
      }
      return total;
    },
    expireDedupKeys: (limit) =>
      boundedDelete(relaxedDb, {
        table: "queue_dedup",
        keys: ["app_id", "queue", "dedup_key"],
        rows: sql`queue_dedup WHERE until <= now() ORDER BY until`,
        limit,
      }),
    expire: (limit) =>
      boundedDelete(relaxedDb, {
        table: "queue_messages",
        keys: ["id"],
        rows: sql`queue_messages WHERE expires_at <= now() AND NOT coalesce(${LEASED}, false) ORDER BY expires_at`,
        limit,
      }),
    deleteOrphans: (limit) => deleteOrphansOf("queue_messages", limit),
    expireDeadLetters: (limit) =>
      boundedDelete(relaxedDb, {
        table: "queue_dead_letters",
        keys: ["id"],
        rows: sql`queue_dead_letters WHERE expires_at <= now() ORDER BY expires_at`,
        limit,
      }),
    deleteDeadLetterOrphans: (limit) => deleteOrphansOf("queue_dead_letters", limit),
    pruneActivity: ({ keepHours, limit }) =>
      boundedDelete(relaxedDb, {
        table: "queue_activity",
        keys: ["app_id", "queue", "hour", "slot"],
        rows: sql`queue_activity
          WHERE hour < date_trunc('hour', now(), 'UTC') - make_interval(hours => ${keepHours}) ORDER BY hour`,
        limit,
      }),
  };
}
