/**
 * Every SQL statement on `quota_usage`, and its table type. A reservation is
 * one conditional upsert (`used + n <= cap`), never read-then-write, so
 * concurrent requests can never overspend a cap.
 */
import { sql, type Kysely } from "kysely";
import { PREPARED, type Db } from "../database/index.ts";

export interface QuotaUsageTable {
  app_id: string;
  /** The UTC day, `YYYY-MM-DD`. */
  day: string;
  counter: string;
  used: number;
}

export type QuotaTables = {
  quota_usage: QuotaUsageTable;
};

export interface QuotaStore {
  /** Adds `amount` to the day's row while it stays within `cap`; the new total, or undefined when it would not. */
  add(appId: string, day: string, counter: string, amount: number, cap: number): Promise<number | undefined>;
  /** Adds `delta` (may be negative), never going below zero; the new total (0 when there is no row). */
  adjust(appId: string, day: string, counter: string, delta: number): Promise<number>;
  used(appId: string, day: string, counter: string): Promise<number>;
  /** The named counters of one app and day in one statement (0 for a counter without a row). */
  usedMany(appId: string, day: string, counters: readonly string[]): Promise<number[]>;
  /** Every app's use on one day (apps without use have no rows). */
  usedOn(day: string): Promise<{ appId: string; counter: string; used: number }[]>;
  /**
   * Every app's use on one day, with the limits the admin set for the app (the rest are the
   * defaults). One probe of the primary key per app, so its cost follows the apps, not the days kept.
   */
  usedOnWithLimits(day: string): Promise<{ counter: string; used: number; limits: Record<string, number> }[]>;
  /** One app's use per day from `fromDay` on (days without use have no rows). */
  history(appId: string, fromDay: string): Promise<{ day: string; counter: string; used: number }[]>;
}

export function createQuotaStore(database: Db): QuotaStore {
  const db: Kysely<QuotaTables> = database.withTables<QuotaTables>();
  return {
    async add(appId, day, counter, amount, cap) {
      // One statement: insert today's row, or add to it only while it stays within the cap.
      const result = await sql<{ used: number }>`
        INSERT INTO quota_usage AS q (app_id, day, counter, used)
        SELECT ${appId}::uuid, ${day}::date, ${counter}, ${amount}::bigint
        WHERE ${amount}::bigint <= ${cap}::bigint
        ON CONFLICT (app_id, day, counter)
        DO UPDATE SET used = q.used + excluded.used
        WHERE q.used + excluded.used <= ${cap}::bigint
        RETURNING used`.execute(db);
      const row = result.rows[0];
      return row ? Number(row.used) : undefined;
    },

    async adjust(appId, day, counter, delta) {
      const result = await sql<{ used: number }>`
        UPDATE quota_usage SET used = GREATEST(0, used + ${delta}::bigint)
        WHERE app_id = ${appId}::uuid AND day = ${day}::date AND counter = ${counter}
        RETURNING used`.execute(db);
      return Number(result.rows[0]?.used ?? 0);
    },

    async used(appId, day, counter) {
      const row = await db
        .selectFrom("quota_usage")
        .select("used")
        .where("app_id", "=", appId)
        .where("day", "=", day)
        .where("counter", "=", counter)
        .executeTakeFirst();
      return Number(row?.used ?? 0);
    },

    async usedMany(appId, day, counters) {
      const { rows } = await sql<{ counter: string; used: number }>`${PREPARED}
        SELECT counter, used FROM quota_usage
        WHERE app_id = ${appId}::uuid AND day = ${day}::date AND counter = ANY(${[...counters]}::text[])`.execute(db);
      const used = new Map(rows.map((r) => [r.counter, Number(r.used)]));
      return counters.map((c) => used.get(c) ?? 0);
    },

    async usedOn(day) {
      const rows = await db
        .selectFrom("quota_usage")
        .select(["app_id", "counter", "used"])
        .where("day", "=", day)
        .execute();
      return rows.map((r) => ({ appId: r.app_id, counter: r.counter, used: Number(r.used) }));
    },

    async usedOnWithLimits(day) {
      const { rows } = await sql<{ counter: string; used: string | number; limits: Record<string, number> }>`
        SELECT u.counter, u.used, a.limits FROM apps a
        CROSS JOIN LATERAL (
          SELECT counter, used FROM quota_usage WHERE app_id = a.id AND day = ${day}::date
        ) u`.execute(db);
      return rows.map((r) => ({ counter: r.counter, used: Number(r.used), limits: r.limits }));
    },

    async history(appId, fromDay) {
      const rows = await db
        .selectFrom("quota_usage")
        .select([sql<string>`to_char(day, 'YYYY-MM-DD')`.as("day"), "counter", "used"])
        .where("app_id", "=", appId)
        .where("day", ">=", fromDay)
        .execute();
      return rows.map((r) => ({ day: r.day, counter: r.counter, used: Number(r.used) }));
    },
  };
}
