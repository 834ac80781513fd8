/**
 * Daily allowances per app and per UTC day, kept in Postgres so that every
 * instance shares them. A reservation is one conditional upsert
 * (`used + n <= cap`), never read-then-write, so concurrent requests can
 * never overspend a cap. Every capped operation spends through
 * `withReservation`: reserve before the work, then settle the reservation to
 * the real amount or release it when the work failed, so a request answered
 * with an error consumes nothing. The SQL is in `quota-store.ts`.
 *
 * A reservation is also a row with its owner (the instance) and an expiry,
 * which `withReservation` renews while its run lives. A run that dies (the
 * process killed, its database connection cut) stops renewing, and the
 * housekeeping sweep (`reservationSweepTask`) gives its amount back within
 * `RESERVATION_HOLD_SECONDS` plus the sweep's period: what is counted is what
 * was really done. Work that records its result in the platform database ends
 * its reservation in the same statement (`spendIn`), so a run dying at any
 * point counts its work exactly once or not at all.
 *
 * Terminology:
 * - **counter**: one allowance, e.g. `events` or `fast_tokens`.
 * - **reservation**: an amount taken from today's allowance, not yet settled.
 */
import { randomUUID } from "node:crypto";
import { inTransaction, type Db } from "../database/index.ts";
import { effectiveLimits, type AppLimits } from "../apps/apps.ts";
import type { HousekeepingTask } from "../housekeeping.ts";
import { createQuotaStore, type SpendStatement } from "./quota-store.ts";
import { PlatformError } from "../errors.ts";
import { isNoAnswer } from "../database/health.ts";
import { DAY_MS, utcDayOf } from "../time.ts";

/** Seconds from `now` to the next UTC midnight, when every daily cap resets. */
function secondsToUtcMidnight(now: Date = new Date()): number {
  const next = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() + 1);
  return Math.max(1, Math.ceil((next - now.getTime()) / 1000));
}

export type QuotaCounter = "events" | "mail" | "fast_tokens" | "embed_tokens";

/** How long a reservation lasts without renewal: a run renews it every third of this while it lives. */
export const RESERVATION_HOLD_SECONDS = 15;

/** How often each instance sweeps expired reservations. */
const RESERVATION_SWEEP_INTERVAL_MS = 5_000;

export type { SpendStatement };

/** The app limit that caps each counter per UTC day. */
export const CAP_LIMITS: Readonly<Record<QuotaCounter, keyof AppLimits>> = Object.freeze({
  events: "eventsPerDay",
  mail: "mailPerDay",
  fast_tokens: "fastTokensPerDay",
  embed_tokens: "embedTokensPerDay",
});

export interface Reservation {
  /** Its row in `quota_reservations`. */
  readonly id: string;
  readonly appId: string;
  readonly counter: QuotaCounter;
  readonly day: string;
  readonly amount: number;
  /** What is left today after this reservation. */
  readonly remaining: number;
}

export interface Quotas {
  /** Takes `amount` from today's allowance or throws 429 `quota_exceeded`; nothing is taken then. */
  reserve(take: { appId: string; counter: QuotaCounter; amount: number; cap: number }): Promise<Reservation>;
  /** Replaces a reservation by what was really used; returns what is left today. */
  settle(reservation: Reservation, spent: { actual: number; cap: number }): Promise<number>;
  /**
   * What is left today once `reservation` is spent: its own figure, or, when
   * the work ran past UTC midnight, the new day's (read again).
   */
  remainingAfter(reservation: Reservation, cap: number): Promise<number>;
  /** Gives a reservation back whole (the work failed); nothing if the sweep already did. */
  release(reservation: Reservation): Promise<void>;
  /** Ends a reservation as spent whole (work whose outcome is unknown stays counted). */
  keep(reservation: Reservation): Promise<void>;
  /**
   * The statement fragment that ends `reservation` as spent, for the work's own statement to run (a
   * data-modifying CTE): the work and its charge commit together. `withReservation` then settles nothing.
   */
  spendIn(reservation: Reservation): SpendStatement;
  /**
   * Settles `reservation` to `actual` in a transaction that also runs `then` (an idempotent answer
   * stored with its charge: both commit or neither); what is left today. `withReservation` then
   * settles nothing.
   */
  settleWith(
    reservation: Reservation,
    spent: { actual: number; cap: number },
    then: (trx: Db, remaining: number) => Promise<void>,
  ): Promise<number>;
  /** Whether `spendIn` or `settleWith` ended this reservation in the work. */
  spentInWork(reservation: Reservation): boolean;
  /** Moves the expiry of live reservations on (their runs still work). */
  renew(reservations: readonly Reservation[]): Promise<void>;
  /** Gives back the expired reservations (of runs that died); how many. */
  sweep(): Promise<number>;
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
  capSharesToday(): Promise<{ app: string; counter: QuotaCounter; share: number }[]>;
  /**
   * One app's use per UTC day over the last `days` days, today last, oldest first; days without
   * use have zeros. `quota_usage` keeps every day, so this is the daily usage history.
   */
  history(appId: string, days: number): Promise<{ day: string; used: Record<QuotaCounter, number> }[]>;
}

/** Expired reservations one sweep statement gives back. */
const SWEEP_BATCH = 1000;

export function utcDay(now: Date = new Date()): string {
  return utcDayOf(now.getTime());
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
  const reservation = await quotas.reserve(options);
  // Renewed while the work runs: only a run that died leaves its reservation to expire.
  const renewal = setInterval(
    () => void quotas.renew([reservation]).catch(() => {}),
    (RESERVATION_HOLD_SECONDS * 1000) / 3,
  );
  renewal.unref?.();
  let result: T;
  try {
    result = await work(reservation);
  } catch (err) {
    clearInterval(renewal);
    // Work that may have been done all the same (a provider failed after taking it, or the database did
    // not answer a statement that may still have committed) stays counted: released, it could be done
    // once more within the cap and overspend it. Work that spends in its own statement needs nothing:
    // committed, that statement ended the reservation; not committed, the sweep gives it back.
    const unknown = (err instanceof PlatformError && err.outcomeUnknown) || isNoAnswer(err);
    if (!unknown) {
      try {
        await quotas.release(reservation);
      } catch (releaseErr) {
        options.onReleaseError?.(releaseErr);
      }
    } else if (!quotas.spentInWork(reservation)) {
      await quotas.keep(reservation).catch((keepErr: unknown) => options.onReleaseError?.(keepErr));
    }
    options.onFailure?.(err);
    throw err;
  }
  clearInterval(renewal);
  try {
    const remaining = quotas.spentInWork(reservation)
      ? await quotas.remainingAfter(reservation, options.cap)
      : await quotas.settle(reservation, {
          actual: options.actual ? options.actual(result) : reservation.amount,
          cap: options.cap,
        });
    return { result, remaining };
  } catch (err) {
    options.onSettleError?.(err);
    return { result, remaining: reservation.remaining };
  }
}

/** The housekeeping task that gives back the reservations of runs that died (see `Quotas.sweep`). */
export function reservationSweepTask(quotas: Quotas): HousekeepingTask {
  return {
    name: "quota reservations",
    intervalMs: RESERVATION_SWEEP_INTERVAL_MS,
    run: () => quotas.sweep(),
  };
}

export function createQuotas(
  db: Db,
  clock: () => Date = () => new Date(),
  /** This instance, recorded as the owner of its reservations. */
  owner: string = randomUUID(),
): Quotas {
  const store = createQuotaStore(db);
  const spent = new WeakSet<Reservation>();
  return {
    async reserve({ appId, counter, amount, cap }) {
      const day = utcDay(clock());
      if (!Number.isSafeInteger(amount) || amount < 0) throw new Error(`bad reservation amount ${amount}`);
      const id = randomUUID();
      const hold = { id, owner, seconds: RESERVATION_HOLD_SECONDS };
      const used = await store.add({ appId, day, counter, amount, cap, hold });
      if (used === undefined) {
        const usedNow = await this.used(appId, counter);
        throw new PlatformError("quota_exceeded", `daily ${counter.replace("_", " ")} allowance spent`, {
          details: [`${counter}: ${Math.max(0, cap - usedNow)} of ${cap} left today, ${amount} needed`],
          retryAfterSeconds: secondsToUtcMidnight(clock()),
        });
      }
      return { id, appId, counter, day, amount, remaining: Math.max(0, cap - used) };
    },

    async settle(reservation, { actual, cap }) {
      // Settling may exceed the cap by what the provider really used beyond the
      // estimate (it was already spent); it never goes below zero.
      const spentNow = Math.max(0, Math.round(actual));
      const used = await store.settle(reservation, spentNow);
      // Spent as reserved: what was left after this reservation, as it was taken (each of concurrent calls
      // sees its own place in the allowance, not whatever the others have taken since).
      if (spentNow === reservation.amount) return this.remainingAfter(reservation, cap);
      return reservation.day === utcDay(clock()) ? Math.max(0, cap - used) : this.remainingAfter(reservation, cap);
    },

    async keep(reservation) {
      await store.keep(reservation.id);
    },

    spendIn(reservation) {
      spent.add(reservation);
      return store.spendStatement(reservation);
    },

    async settleWith(reservation, { actual, cap }, then) {
      const remaining = await inTransaction(db, async (trx) => {
        const used = await createQuotaStore(trx).settle(reservation, Math.max(0, Math.round(actual)));
        const left = Math.max(0, cap - used);
        await then(trx, left);
        return left;
      });
      spent.add(reservation);
      return reservation.day === utcDay(clock()) ? remaining : this.remainingAfter(reservation, cap);
    },

    spentInWork(reservation) {
      return spent.has(reservation);
    },

    async renew(reservations) {
      await store.renew(
        reservations.map((r) => r.id),
        RESERVATION_HOLD_SECONDS,
      );
    },

    async sweep() {
      let total = 0;
      for (let n = SWEEP_BATCH; n === SWEEP_BATCH;) total += n = await store.sweep(SWEEP_BATCH);
      return total;
    },

    async remainingAfter(reservation, cap) {
      if (reservation.day === utcDay(clock())) return reservation.remaining;
      // Today's use may be above the cap (a settle beyond the estimate): nothing is left then, never less.
      return Math.max(0, cap - (await this.used(reservation.appId, reservation.counter)));
    },

    async release(reservation) {
      await store.release(reservation.id);
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
      const shares: { app: string; counter: QuotaCounter; share: number }[] = [];
      for (const r of await store.usedOnWithLimits(utcDay(clock()))) {
        const limit = CAP_LIMITS[r.counter as QuotaCounter];
        if (!limit) continue;
        const cap = effectiveLimits(r.limits)[limit];
        if (cap > 0) shares.push({ app: r.app, counter: r.counter as QuotaCounter, share: r.used / cap });
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
