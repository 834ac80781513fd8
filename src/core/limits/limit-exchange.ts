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
const LIMIT_EXCHANGE_MS = 1000;

/** While every instance is idle, an instance exchanges once in this many periods. */
const IDLE_EVERY = 10;

export interface LimitExchange {
  readonly instanceId: string;
  /** The first exchange (awaited: the instance knows of the others before it serves), then one every period. */
  start(): Promise<void>;
  /** One exchange now, also while idle (tests). */
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

  let idleRounds = 0;
  let allIdle = false;
  const once = async (force: boolean) => {
    const mine = options.limiter.takeDemand();
    const idle = Object.keys(mine).length === 0;
    // While no instance sees any call, one exchange in IDLE_EVERY is enough (an idle service's database
    // stays quiet); what it skips has nothing to tell, and the first call seen ends the pause.
    if (!force && idle && allIdle && ++idleRounds % IDLE_EVERY !== 0) return;
    try {
      // An instance that missed three periods is taken for gone (an idle one, more than IDLE_EVERY).
      const others = await options.store.exchange(
        instanceId,
        mine,
        periodMs * 3 + 500,
        periodMs * (IDLE_EVERY + 2) + 500,
      );
      allIdle = idle && others.every((o) => Object.keys(o).length === 0);
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
  const exchange = (force: boolean) => (running ??= once(force).finally(() => (running = undefined)));
  const exchangeNow = () => exchange(true);

  return {
    instanceId,
    async start() {
      await exchangeNow();
      timer = setInterval(() => void exchange(false), periodMs);
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
