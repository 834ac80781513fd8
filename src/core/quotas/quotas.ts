/**
 * Daily allowances per app and per UTC day, kept in Postgres so that every
 * instance shares them. A reservation is one conditional upsert
 * (`used + n <= cap`), never read-then-write, so concurrent requests can
 * never overspend a cap. Every capped operation spends through
 * `withReservation`: reserve before the work, then settle the reservation to
 * the real amount or release it when the work failed, so a request answered
 * with an error consumes nothing. The SQL is in `quota-store.ts`.
 *
 * Terminology:
 * - **counter**: one allowance, e.g. `events` or `fast_tokens`.
 * - **reservation**: an amount taken from today's allowance, not yet settled.
 */
import type { Db } from "../database/index.ts";
import { effectiveLimits, type AppLimits } from "../apps/apps.ts";
import { createQuotaStore } from "./quota-store.ts";
import { PlatformError } from "../errors.ts";
import { isNoAnswer } from "../database/health.ts";
import { DAY_MS } from "../time.ts";

/** Seconds from `now` to the next UTC midnight, when every daily cap resets. */
export function secondsToUtcMidnight(now: Date = new Date()): number {
  const next = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() + 1);
  return Math.max(1, Math.ceil((next - now.getTime()) / 1000));
}

export type QuotaCounter = "events" | "mail" | "fast_tokens" | "embed_tokens";

/** The app limit that caps each counter per UTC day. */
export const CAP_LIMITS: Readonly<Record<QuotaCounter, keyof AppLimits>> = Object.freeze({
  events: "eventsPerDay",
  mail: "mailPerDay",
  fast_tokens: "fastTokensPerDay",
  embed_tokens: "embedTokensPerDay",
});

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
  /**
   * What is left today once `reservation` is spent: its own figure, or, when
   * the work ran past UTC midnight, the new day's (read again).
   */
  remainingAfter(reservation: Reservation, cap: number): Promise<number>;
  /** Gives a reservation back whole (the work failed). */
  release(reservation: Reservation): Promise<void>;
  /** What was used today. */
  used(appId: string, counter: QuotaCounter): Promise<number>;
  /** What was used today of each of `counters`, in order, read in one statement. */
  usedMany(appId: string, counters: readonly QuotaCounter[]): Promise<number[]>;
  /** Today's use of every app that used anything today: app id → counter → used. */
  usedToday(): Promise<Map<string, Map<QuotaCounter, number>>>;
  /**
   * Today's use of each daily cap by every app that used it, as a share of the app's cap
   * (1 = reached; caps set to 0 are left out): what the quota gauges of /metrics report.
   */
  capSharesToday(): Promise<{ counter: QuotaCounter; share: number }[]>;
  /**
   * One app's use per UTC day over the last `days` days, today last, oldest first; days without
   * use have zeros. `quota_usage` keeps every day, so this is the daily usage history.
   */
  history(appId: string, days: number): Promise<{ day: string; used: Record<QuotaCounter, number> }[]>;
}

export function utcDay(now: Date = new Date()): string {
  return now.toISOString().slice(0, 10);
}

export interface ReservationOptions<T> {
  appId: string;
  counter: QuotaCounter;
  /** What to take before the work (an estimate where the real amount is known only after). */
  amount: number;
  cap: number;
  /** The real amount once the work succeeded; the reservation is settled to it. Default: `amount`, nothing to settle. */
  actual?: (result: T) => number;
  /** Runs when the work failed, after the reservation was given back (or could not be). */
  onFailure?: (err: unknown) => void;
  /** Where a failed release is reported; the work's own error is what the caller gets. */
  onReleaseError?: (err: unknown) => void;
  /**
   * Where a failed settle is reported. The work is done (a model answered, its
   * tokens are spent), so its result is still answered, charged at the
   * reservation: an error would make the caller retry and pay for it twice.
   */
  onSettleError?: (err: unknown) => void;
}

/**
 * The one way a capped operation spends an allowance: reserve (or 429),
 * run the work, then settle the reservation to what was really used, or
 * release it whole when the work threw, so an error costs nothing.
 * Resolves to the work's result and what is left today.
 */
export async function withReservation<T>(
  quotas: Quotas,
  options: ReservationOptions<T>,
  work: (reservation: Reservation) => Promise<T>,
): Promise<{ result: T; remaining: number }> {
  const reservation = await quotas.reserve(options.appId, options.counter, options.amount, options.cap);
  let result: T;
  try {
    result = await work(reservation);
  } catch (err) {
    // Work that may have been done all the same (a provider failed after taking it, or the database did
    // not answer a statement that may still have committed) stays counted: released, it could be done
    // once more within the cap and overspend it.
    if (!((err instanceof PlatformError && err.outcomeUnknown) || isNoAnswer(err))) {
      try {
        await quotas.release(reservation);
      } catch (releaseErr) {
        options.onReleaseError?.(releaseErr);
      }
    }
    options.onFailure?.(err);
    throw err;
  }
  try {
    const remaining = options.actual
      ? await quotas.settle(reservation, options.actual(result), options.cap)
      : await quotas.remainingAfter(reservation, options.cap);
    return { result, remaining };
  } catch (err) {
    options.onSettleError?.(err);
    return { result, remaining: reservation.remaining };
  }
}

export function createQuotas(db: Db, clock: () => Date = () => new Date()): Quotas {
  const store = createQuotaStore(db);
  return {
    async reserve(appId, counter, amount, cap) {
      const day = utcDay(clock());
      if (!Number.isSafeInteger(amount) || amount < 0) throw new Error(`bad reservation amount ${amount}`);
      const used = await store.add(appId, day, counter, amount, cap);
      if (used === undefined) {
        const usedNow = await this.used(appId, counter);
        throw new PlatformError("quota_exceeded", `daily ${counter.replace("_", " ")} allowance spent`, {
          details: [`${counter}: ${Math.max(0, cap - usedNow)} of ${cap} left today, ${amount} needed`],
          retryAfterSeconds: secondsToUtcMidnight(clock()),
        });
      }
      return { appId, counter, day, amount, remaining: Math.max(0, cap - used) };
    },

    async settle(reservation, actual, cap) {
      const delta = Math.max(0, Math.round(actual)) - reservation.amount;
      if (delta === 0) return this.remainingAfter(reservation, cap);
      // Settling may exceed the cap by what the provider really used beyond the
      // estimate (it was already spent); it never goes below zero.
      const used = await store.adjust(reservation.appId, reservation.day, reservation.counter, delta);
      return reservation.day === utcDay(clock()) ? Math.max(0, cap - used) : this.remainingAfter(reservation, cap);
    },

    async remainingAfter(reservation, cap) {
      if (reservation.day === utcDay(clock())) return reservation.remaining;
      // Today's use may be above the cap (a settle beyond the estimate): nothing is left then, never less.
      return Math.max(0, cap - (await this.used(reservation.appId, reservation.counter)));
    },

    async release(reservation) {
      if (reservation.amount === 0) return;
      await store.adjust(reservation.appId, reservation.day, reservation.counter, -reservation.amount);
    },

    async usedToday() {
      const out = new Map<string, Map<QuotaCounter, number>>();
      for (const r of await store.usedOn(utcDay(clock()))) {
        let app = out.get(r.appId);
        if (!app) out.set(r.appId, (app = new Map<QuotaCounter, number>()));
        app.set(r.counter as QuotaCounter, r.used);
      }
      return out;
    },

    async capSharesToday() {
      const shares: { counter: QuotaCounter; share: number }[] = [];
      for (const r of await store.usedOnWithLimits(utcDay(clock()))) {
        const limit = CAP_LIMITS[r.counter as QuotaCounter];
        if (!limit) continue;
        const cap = effectiveLimits(r.limits)[limit];
        if (cap > 0) shares.push({ counter: r.counter as QuotaCounter, share: r.used / cap });
      }
      return shares;
    },

    async history(appId, days) {
      const today = Date.parse(`${utcDay(clock())}T00:00:00Z`);
      const first = today - (days - 1) * DAY_MS;
      const byDay = new Map<string, Partial<Record<QuotaCounter, number>>>();
      for (const r of await store.history(appId, utcDay(new Date(first)))) {
        byDay.set(r.day, { ...byDay.get(r.day), [r.counter]: r.used });
      }
      return Array.from({ length: days }, (_, i) => {
        const day = utcDay(new Date(first + i * DAY_MS));
        const d = byDay.get(day) ?? {};
        return {
          day,
          used: {
            events: d.events ?? 0,
            mail: d.mail ?? 0,
            fast_tokens: d.fast_tokens ?? 0,
            embed_tokens: d.embed_tokens ?? 0,
          },
        };
      });
    },

    async used(appId, counter) {
      return store.used(appId, utcDay(clock()), counter);
    },

    async usedMany(appId, counters) {
      return store.usedMany(appId, utcDay(clock()), counters);
    },
  };
}
