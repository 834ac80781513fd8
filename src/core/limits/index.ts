/** Per-app rate and concurrency limits, shared out between instances. */
export {
  createRateLimiter,
  planOf,
  sharesOf,
  type Admission,
  type LimitPlan,
  type RateLimiter,
  type RefusalReason,
} from "./rate-limiter.ts";
export { createFairShare, type FairShare } from "./fair-share.ts";
export { createLimitExchange, LIMIT_EXCHANGE_MS, type LimitExchange } from "./limit-exchange.ts";
export { createLimitExchangeStore } from "./limit-exchange-store.ts";
