/**
 * Daily allowances per app and per UTC day, kept in Postgres so that every
 * instance shares them. A reservation is one conditional upsert
 * (`used + n <= cap`), never read-then-write, so concurrent requests can
 * never overspend a cap. Callers reserve before the work, then settle the
 * reservation to the real amount or release it when the work failed: a
 * request answered with an error consumes nothing.
 *
 * Terminology:
 * - **counter**: one allowance, e.g. `events` or `fast_tokens`.
 * - **reservation**: an amount taken from today's allowance, not yet settled.
 */
import { sql, type Db } from "../database/database.ts";
import { PlatformError, secondsToUtcMidnight } from "../errors.ts";

export type QuotaCounter = "events" | "mail" | "fast_tokens" | "embed_tokens";

export interface Reservation {
  readonly appId: string;
  readonly counter: QuotaCounter;
  readonly day: string;
  readonly amount: number;
  /** What is left today after this reservation. */
  readonly remaining: number;
}

export interface Quotas {
  /** Takes `amount` from today's allowance or throws 429 `quota_exceeded`; nothing is taken then. */
  reserve(appId: string, counter: QuotaCounter, amount: number, cap: number): Promise<Reservation>;
  /** Replaces a reservation by what was really used; returns what is left today. */
  settle(reservation: Reservation, actual: number, cap: number): Promise<number>;
  /** Gives a reservation back whole (the work failed). */
  release(reservation: Reservation): Promise<void>;
  /** What was used today. */
  used(appId: string, counter: QuotaCounter): Promise<number>;
}

export function utcDay(now: Date = new Date()): string {
  return now.toISOString().slice(0, 10);
}

export function createQuotas(db: Db, clock: () => Date = () => new Date()): Quotas {
  return {
    async reserve(appId, counter, amount, cap) {
      const day = utcDay(clock());
      if (!Number.isSafeInteger(amount) || amount < 0) throw new Error(`bad reservation amount ${amount}`);
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
      if (!row) {
        const used = await this.used(appId, counter);
        throw new PlatformError("quota_exceeded", `daily ${counter.replace("_", " ")} allowance spent`, {
          details: [`${counter}: ${Math.max(0, cap - used)} of ${cap} left today, ${amount} needed`],
          retryAfterSeconds: secondsToUtcMidnight(clock()),
        });
      }
      return { appId, counter, day, amount, remaining: Math.max(0, cap - Number(row.used)) };
    },

    async settle(reservation, actual, cap) {
      const delta = Math.max(0, Math.round(actual)) - reservation.amount;
      if (delta === 0) return reservation.remaining;
      // Settling may exceed the cap by what the provider really used beyond the
      // estimate (it was already spent); it never goes below zero.
      const result = await sql<{ used: number }>`
        UPDATE quota_usage SET used = GREATEST(0, used + ${delta}::bigint)
        WHERE app_id = ${reservation.appId}::uuid AND day = ${reservation.day}::date AND counter = ${reservation.counter}
        RETURNING used`.execute(db);
      const used = Number(result.rows[0]?.used ?? 0);
      return reservation.day === utcDay(clock()) ? Math.max(0, cap - used) : cap - (await this.used(reservation.appId, reservation.counter));
    },

    async release(reservation) {
      if (reservation.amount === 0) return;
      await sql`
        UPDATE quota_usage SET used = GREATEST(0, used - ${reservation.amount}::bigint)
        WHERE app_id = ${reservation.appId}::uuid AND day = ${reservation.day}::date AND counter = ${reservation.counter}`.execute(db);
    },

    async used(appId, counter) {
      const row = await db
        .selectFrom("quota_usage")
        .select("used")
        .where("app_id", "=", appId)
        .where("day", "=", utcDay(clock()))
        .where("counter", "=", counter)
        .executeTakeFirst();
      return Number(row?.used ?? 0);
    },
  };
}
