/** Per-app rate and concurrency limits, shared out between instances. */
export { createRateLimiter, planOf, type RateLimiter } from "./rate-limiter.ts";
export { createFairShare } from "./fair-share.ts";
export { createLimitExchange, type LimitExchange } from "./limit-exchange.ts";
export { createLimitExchangeStore } from "./limit-exchange-store.ts";
