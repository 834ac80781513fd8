/**
 * Every SQL statement on `quota_usage` and `quota_reservations`, and their
 * table types. A reservation is one conditional upsert (`used + n <= cap`),
 * never read-then-write, so concurrent requests can never overspend a cap;
 * the same statement records it as a row with its owner and expiry, and every
 * statement that ends it (settle, release, the sweep) deletes that row first
 * and adjusts `used` only by what it deleted, so a reservation is given back
 * at most once, whoever ends it.
 */
import { sql, type Kysely, type RawBuilder } from "kysely";
import { queryPrepared, type Db } from "../database/index.ts";

interface QuotaUsageTable {
  app_id: string;
  /** The UTC day, `YYYY-MM-DD`. */
  day: string;
  counter: string;
  used: number;
}

interface QuotaReservationTable {
  id: string;
  app_id: string;
  day: string;
  counter: string;
  amount: number;
  /** The instance whose run holds it (for the operator's eye; the expiry is what counts). */
  owner: string;
  expires_at: Date;
}

export type QuotaTables = {
  quota_usage: QuotaUsageTable;
  quota_reservations: QuotaReservationTable;
};

/**
 * Common table expressions that end a reservation as spent (its row deleted, `used` kept): added to
 * the `WITH` of the statement doing the work (`WITH ..., ${spend}`), so the work and its charge commit
 * together.
 */
export type SpendStatement = RawBuilder<unknown>;

/** Who holds a reservation and for how long without renewal. */
interface Hold {
  id: string;
  owner: string;
  seconds: number;
}

/** A reservation's row (`id`) and the counter row of the app and day it is charged to. */
interface HeldReservation {
  id: string;
  appId: string;
  day: string;
  counter: string;
}

export interface QuotaStore {
  /** Adds `amount` to the day's row while it stays within `cap`; the new total, or undefined when it would not. */
  add(take: {
    appId: string;
    day: string;
    counter: string;
    amount: number;
    cap: number;
    hold?: Hold;
  }): Promise<number | undefined>;
  /**
   * Ends reservation `id` with `actual` used: its row deleted and `used` moved by `actual - amount`
   * (by `actual` when the row was already gone: the sweep gave the amount back); the new total.
   */
  settle(reservation: HeldReservation, actual: number): Promise<number>;
  /** Gives reservation `id` back: its row deleted and its amount taken off `used`, only if the row was there. */
  release(id: string): Promise<void>;
  /** Ends reservation `id` as spent whole: its row deleted, `used` kept. */
  keep(id: string): Promise<void>;
  /**
   * The common table expressions that do `keep` inside another statement (see `SpendStatement`),
   * charging `amount` again if the sweep gave the reservation back meanwhile.
   */
  spendStatement(reservation: HeldReservation & { amount: number }): SpendStatement;
  /** Moves the expiry of live reservations to `seconds` from now. */
  renew(ids: readonly string[], seconds: number): Promise<void>;
  /** Gives back up to `batch` expired reservations (deleted, amounts taken off `used`); how many. */
  sweep(batch: number): Promise<number>;
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
  usedOnWithLimits(
    day: string,
  ): Promise<{ app: string; counter: string; used: number; limits: Record<string, number> }[]>;
  /** One app's use per day from `fromDay` on (days without use have no rows). */
  history(appId: string, fromDay: string): Promise<{ day: string; counter: string; used: number }[]>;
}

/** `usedMany`'s statement. */
const USED_MANY = `SELECT counter, used FROM quota_usage
  WHERE app_id = $1::uuid AND day = $2::date AND counter = ANY($3::text[])`;

export function createQuotaStore(database: Db): QuotaStore {
  const db: Kysely<QuotaTables> = database.withTables<QuotaTables>();
  return {
    async add({ appId, day, counter, amount, cap, hold }) {
      // One statement: insert today's row, or add to it only while it stays within the cap; and, when it
      // was added, the reservation's row.
      const added = sql`
        INSERT INTO quota_usage AS q (app_id, day, counter, used)
        SELECT ${appId}::uuid, ${day}::date, ${counter}, ${amount}::bigint
        WHERE ${amount}::bigint <= ${cap}::bigint
        ON CONFLICT (app_id, day, counter)
        DO UPDATE SET used = q.used + excluded.used
        WHERE q.used + excluded.used <= ${cap}::bigint
        RETURNING used`;
      const result = hold
        ? await sql<{ used: number }>`
            WITH added AS (${added}), held AS (
              INSERT INTO quota_reservations (id, app_id, day, counter, amount, owner, expires_at)
              SELECT ${hold.id}::uuid, ${appId}::uuid, ${day}::date, ${counter}, ${amount}::bigint, ${hold.owner},
                now() + ${hold.seconds}::int * interval '1 second'
              FROM added
            )
            SELECT used FROM added`.execute(db)
        : await added.execute(db);
      const row = result.rows[0] as { used: number } | undefined;
      return row ? Number(row.used) : undefined;
    },

    async settle({ id, appId, day, counter }, actual) {
      const result = await sql<{ used: number }>`
        WITH gone AS (DELETE FROM quota_reservations WHERE id = ${id}::uuid RETURNING amount)
        UPDATE quota_usage
        SET used = GREATEST(0, used + ${actual}::bigint - COALESCE((SELECT amount FROM gone), 0))
        WHERE app_id = ${appId}::uuid AND day = ${day}::date AND counter = ${counter}
        RETURNING used`.execute(db);
      return Number(result.rows[0]?.used ?? 0);
    },

    async release(id) {
      await sql`
        WITH gone AS (
          DELETE FROM quota_reservations WHERE id = ${id}::uuid RETURNING app_id, day, counter, amount
        )
        UPDATE quota_usage q SET used = GREATEST(0, q.used - gone.amount)
        FROM gone
        WHERE q.app_id = gone.app_id AND q.day = gone.day AND q.counter = gone.counter`.execute(db);
    },

    async keep(id) {
      await sql`DELETE FROM quota_reservations WHERE id = ${id}::uuid`.execute(db);
    },

    spendStatement({ id, appId, day, counter, amount }) {
      // Two CTEs (data-modifying statements cannot nest): a reservation the sweep already gave back (its run
      // looked dead) is charged again, since the work is done after all.
      return sql`spent_gone AS (
          DELETE FROM quota_reservations WHERE id = ${id}::uuid RETURNING 1
        ), spent_back AS (
          UPDATE quota_usage SET used = used + ${amount}::bigint
          WHERE app_id = ${appId}::uuid AND day = ${day}::date AND counter = ${counter}
            AND NOT EXISTS (SELECT 1 FROM spent_gone)
        )`;
    },

    async renew(ids, seconds) {
      if (ids.length === 0) return;
      await sql`
        UPDATE quota_reservations SET expires_at = now() + ${seconds}::int * interval '1 second'
        WHERE id = ANY(${[...ids]}::uuid[])`.execute(db);
    },

    async sweep(batch) {
      // Rows locked by a settle or release under way are skipped (theirs to end); one day's row of an app
      // is updated once with the sum of its expired reservations.
      const result = await sql<{ n: number }>`
        WITH gone AS (
          DELETE FROM quota_reservations WHERE id IN (
            SELECT id FROM quota_reservations WHERE expires_at < now()
            ORDER BY expires_at LIMIT ${batch} FOR UPDATE SKIP LOCKED
          )
          RETURNING app_id, day, counter, amount
        ), sums AS (
          SELECT app_id, day, counter, sum(amount)::bigint AS amount, count(*) AS n
          FROM gone GROUP BY app_id, day, counter
        ), fixed AS (
          UPDATE quota_usage q SET used = GREATEST(0, q.used - sums.amount)
          FROM sums
          WHERE q.app_id = sums.app_id AND q.day = sums.day AND q.counter = sums.counter
        )
        SELECT COALESCE(sum(n), 0)::int AS n FROM sums`.execute(db);
      return Number(result.rows[0]?.n ?? 0);
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
      // Every ListModels reads this: run without the query builder (`queryPrepared`).
      const rows = await queryPrepared<{ counter: string; used: number }>(database, USED_MANY, [
        appId,
        day,
        [...counters],
      ]);
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
      const { rows } = await sql<{
        app: string;
        counter: string;
        used: string | number;
        limits: Record<string, number>;
      }>`
        SELECT a.name AS app, u.counter, u.used, a.limits FROM apps a
        CROSS JOIN LATERAL (
          SELECT counter, used FROM quota_usage WHERE app_id = a.id AND day = ${day}::date
        ) u`.execute(db);
      return rows.map((r) => ({ app: r.app, counter: r.counter, used: Number(r.used), limits: r.limits }));
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
