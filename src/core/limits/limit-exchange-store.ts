/**
 * The one statement of the limit exchange (`limit-exchange.ts`) on
 * `limit_exchange` (migration 0025), and the table's type.
 */
import { sql, type Kysely } from "kysely";
import type { Db } from "../database/index.ts";

interface LimitExchangeTable {
  instance_id: string;
  /** `{ "appId|class": demand }` */
  demand: Record<string, number>;
  seen_at: Date;
}

type LimitExchangeTables = { limit_exchange: LimitExchangeTable };

export interface LimitExchangeStore {
  /**
   * Writes this instance's demand and reads every other live instance's (one
   * seen within `freshMs`, or `idleFreshMs` for one that reported no demand:
   * an idle instance writes less often), in ONE statement; rows of instances
   * gone for long are deleted on the way.
   */
  exchange(
    instanceId: string,
    demand: Record<string, number>,
    freshMs: number,
    idleFreshMs: number,
  ): Promise<Record<string, number>[]>;
  /** This instance stops: its row goes, so the others take its share at once. */
  leave(instanceId: string): Promise<void>;
}

export function createLimitExchangeStore(database: Db): LimitExchangeStore {
  const db: Kysely<LimitExchangeTables> = database.withTables<LimitExchangeTables>();
  return {
    async exchange(instanceId, demand, freshMs, idleFreshMs) {
      // The CTEs and the SELECT see the same snapshot: this instance's own row is excluded from what is read.
      const result = await sql<{ demand: Record<string, number> | string }>`
        WITH mine AS (
          INSERT INTO limit_exchange (instance_id, demand, seen_at)
          VALUES (${instanceId}, ${JSON.stringify(demand)}::jsonb, now())
          ON CONFLICT (instance_id) DO UPDATE SET demand = excluded.demand, seen_at = excluded.seen_at
        ), gone AS (
          DELETE FROM limit_exchange WHERE seen_at < now() - interval '10 minutes' AND instance_id <> ${instanceId}
        )
        SELECT demand FROM limit_exchange
        WHERE instance_id <> ${instanceId}
          AND seen_at > now() - (CASE WHEN demand = '{}'::jsonb THEN ${idleFreshMs}::int ELSE ${freshMs}::int END)
            * interval '1 millisecond'`.execute(db);
      return result.rows.map((r) =>
        typeof r.demand === "string" ? (JSON.parse(r.demand) as Record<string, number>) : r.demand,
      );
    },
    async leave(instanceId) {
      await sql`DELETE FROM limit_exchange WHERE instance_id = ${instanceId}`.execute(db);
    },
  };
}
