/**
 * How the instances of one database agree on each one's share of every app's
 * limits: once per period, each writes the demand it saw per app and limit
 * and reads the others' (one statement per instance per period,
 * `limit-exchange-store.ts`), then takes its part of the total
 * (`sharesOf`). Nothing of this is on a request's path; a request only reads
 * the shares in memory. When the database cannot be reached the last shares
 * stay.
 */
import crypto from "node:crypto";
import type { Logger } from "pino";
import type { LimitExchangeStore } from "./limit-exchange-store.ts";
import { sharesOf, type RateLimiter } from "./rate-limiter.ts";

/** The default period: an app's total settles within a few periods of a change in how its calls are spread. */
export const LIMIT_EXCHANGE_MS = 1000;

export interface LimitExchange {
  readonly instanceId: string;
  /** The first exchange (awaited: the instance knows of the others before it serves), then one every period. */
  start(): Promise<void>;
  /** One exchange now (tests). */
  exchangeNow(): Promise<void>;
  close(): Promise<void>;
  /** Live instances as of the last exchange, this one included. */
  instances(): number;
}

export function createLimitExchange(options: {
  store: LimitExchangeStore;
  limiter: RateLimiter;
  logger: Logger;
  periodMs?: number;
}): LimitExchange {
  const periodMs = options.periodMs ?? LIMIT_EXCHANGE_MS;
  const instanceId = crypto.randomUUID();
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> | undefined;
  let live = 1;
  let failing = false;

  const once = async () => {
    const mine = options.limiter.takeDemand();
    try {
      // An instance that missed three periods is taken for gone.
      const others = await options.store.exchange(instanceId, mine, periodMs * 3 + 500);
      const { shares, fallback } = sharesOf(mine, others);
      options.limiter.setShares(shares, fallback);
      live = others.length + 1;
      if (failing) options.logger.info("limit exchange works again");
      failing = false;
    } catch (err) {
      if (!failing)
        options.logger.warn({ err: (err as Error).message }, "limit exchange failed; keeping the last shares");
      failing = true;
    }
  };
  const exchangeNow = () => (running ??= once().finally(() => (running = undefined)));

  return {
    instanceId,
    async start() {
      await exchangeNow();
      timer = setInterval(() => void exchangeNow(), periodMs);
      timer.unref();
    },
    exchangeNow,
    async close() {
      clearInterval(timer);
      await running;
      await options.store.leave(instanceId).catch(() => {});
    },
    instances: () => live,
  };
}
