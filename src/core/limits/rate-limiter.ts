/**
 * Per-app rate and concurrency limits (the app's `limits`, docs/api.md#rate-limits),
 * decided in memory: no statement on a request's path.
 *
 * - Rates are token buckets: `eventsPerSecond`/`eventsBurst` for logged
 *   events (each event one token), `queuePutsPerSecond`/`queuePutsBurst` for
 *   put messages (each message one token), `requestsPerSecond`/`requestsBurst`
 *   for every other facility call.
 * - Concurrency: consumes running at once (`maxWaitingConsumes`: REST
 *   consume, ConsumeMessage, ReadEventFeed), StreamMessages streams open at
 *   once (`maxOpenStreams`), and every other call in progress
 *   (`maxInFlightRequests`).
 *
 * Across instances, each instance enforces its share of each limit: the
 * bucket refills at `rate × share` and holds `burst × share`, and a
 * concurrency limit is `limit × share`. The share follows the demand each
 * instance saw in the last exchange period (what was asked for, refused or
 * not), which `limit-exchange.ts` trades between instances through the
 * database once per period; so an app's total stays near its limit however
 * a load balancer spreads its calls. A share never falls below a small floor,
 * so an instance that starts seeing an app's calls serves some at once.
 *
 * When the process is saturated, an app making more than its share of the calls is refused too
 * (`fair-share.ts`), at the call's head.
 *
 * A refusal is cheap, but a client that ignores `Retry-After` and calls again at once turns refusals into a
 * flood of their own (each costs a request's parsing, routing and answer): a call refused while its app's
 * previous refusal of the same kind still had time to run is answered only after a pause (until the
 * bucket could pay for it, or the `Retry-After` of a fair-share refusal, at most `MAX_PAUSE_MS`). The pause
 * costs a timer; a client that waits as told never meets it. Pauses that end together are answered a few a
 * turn of the event loop, app by app (`pause-line.ts`), so that their answers do not hold other apps' calls.
 */
import type { AppLimits, AppRecord } from "../apps/apps.ts";
import { PlatformError } from "../errors.ts";
import type { FairShare } from "./fair-share.ts";
import { createPauseLine } from "./pause-line.ts";

type RateClass = "events" | "puts" | "requests";
type ConcurrencyClass = "consumes" | "streams" | "inFlight";

/** What one call spends: tokens of one rate class, and one place of a concurrency class. */
export interface LimitPlan {
  rate: RateClass;
  cost: number;
  concurrency: ConcurrencyClass;
  /**
   * A check before the body is read (its cost unknown): refused when the bucket cannot pay for a call
   * like the app's last one of this class (capped at the bucket's size), nothing spent, no place taken.
   * A flood past its limit is then refused before its bodies are parsed: a bucket that refills 5000 events
   * a second is rarely empty, but it rarely holds the 1000 of the flood's next batch either.
   */
  early?: boolean;
  /** The call was let in at its head already (the fair share was checked there): this is its full check. */
  afterHead?: boolean;
}

/** What a refusal met: one of the app's limits, or its fair share of a saturated process. */
export type RefusalReason = keyof AppLimits | "fairShare";

const RATE_LIMITS: Record<RateClass, { rate: keyof AppLimits; burst: keyof AppLimits }> = {
  events: { rate: "eventsPerSecond", burst: "eventsBurst" },
  puts: { rate: "queuePutsPerSecond", burst: "queuePutsBurst" },
  requests: { rate: "requestsPerSecond", burst: "requestsBurst" },
};

const CONCURRENCY_LIMITS: Record<ConcurrencyClass, keyof AppLimits> = {
  consumes: "maxWaitingConsumes",
  streams: "maxOpenStreams",
  inFlight: "maxInFlightRequests",
};

const CONSUMES = new Set([
  "platform.queues.v1.QueueService/ConsumeMessage",
  "platform.queues.v1.QueueService/ReadEventFeed",
]);
const STREAMS = new Set(["platform.queues.v1.QueueService/StreamMessages"]);

function itemCount(message: unknown, field: string): number {
  const items = (message as Record<string, unknown> | undefined)?.[field];
  return Array.isArray(items) ? Math.max(1, items.length) : 1;
}

/** The plan of a call of `service/method` with its request `message` (undefined for a stream's). */
export function planOf(service: string, method: string, message: unknown): LimitPlan {
  const rpc = `${service}/${method}`;
  const concurrency: ConcurrencyClass = CONSUMES.has(rpc) ? "consumes" : STREAMS.has(rpc) ? "streams" : "inFlight";
  if (rpc === "platform.analytics.v1.AnalyticsService/LogEvents")
    return { rate: "events", cost: itemCount(message, "events"), concurrency };
  if (rpc === "platform.queues.v1.QueueService/PutMessage") return { rate: "puts", cost: 1, concurrency };
  if (rpc === "platform.queues.v1.QueueService/PutMessages")
    return { rate: "puts", cost: itemCount(message, "messages"), concurrency };
  return { rate: "requests", cost: 1, concurrency };
}

/** A call let in: its answer's headers, and the place it holds until it ends. */
interface Admission {
  /** `RateLimit-Policy` and `RateLimit` (the IETF httpapi ratelimit-headers draft), when the class is limited. */
  headers: [string, string][];
  /** The 429 `rate_limited` when the call is refused (its headers are still to be sent). */
  refused: PlatformError | undefined;
  /**
   * Resolves when a refused call may be answered: at once, or after a pause when its app ignored the
   * `Retry-After` of its previous refusal (see the top of this file). Await it before answering the refusal.
   */
  pause(): Promise<void>;
  /** Gives the concurrency place back; call once, when the call ended (answered, failed or gone). */
  release(): void;
}

export interface RateLimiter {
  admit(app: AppRecord, plan: LimitPlan): Admission;
  /**
   * What this instance saw since the last call, per `appId|class`: for a rate
   * class, what was asked for a second (smoothed); for a concurrency class,
   * the most held at once plus what was refused. Forgets idle apps.
   */
  takeDemand(): Record<string, number>;
  /** This instance's share of each `appId|class` from now on; `fallback` for any other (1 / live instances). */
  setShares(shares: ReadonlyMap<string, number>, fallback: number): void;
}

interface Bucket {
  tokens: number;
  at: number;
  /** Tokens asked for since the last `takeDemand`. */
  asked: number;
  /** Tokens asked for a second, smoothed over exchange periods. */
  demand: number;
  lastUsed: number;
  /** The cost of the last call let in: what a call refused early is taken to have asked for. */
  lastCost: number;
  /** Until when (clock ms) the last refusal's `Retry-After` runs. */
  refusedUntil: number;
}

interface Counter {
  held: number;
  peak: number;
  refused: number;
  demand: number;
  lastUsed: number;
}

/** Buckets and counters unused this long are forgotten (a full bucket and an empty counter are the defaults). */
const IDLE_MS = 60_000;
/** The longest pause before a refusal is answered. */
const MAX_PAUSE_MS = 1000;
/** Refusals of one app paused at once, at most; past it they are answered at once (each pause holds a request). */
const MAX_PAUSED_PER_APP = 1024;

const noPause = () => Promise.resolve();
/**
 * Paused refusals answered a turn of the event loop, at most: each is a 429 rendered and written (about 0.1 ms
 * of CPU over REST, up to 0.5 ms for a refused stream), so another app's request waits for a millisecond or two
 * of them, not for every pause over by then.
 */
const PAUSES_PER_TURN = 4;
/** For an app's share of a saturated process, a call of many events or messages counts one call per this many. */
const ITEMS_PER_CALL = 25;

export function createRateLimiter(
  options: {
    clock?: () => number;
    /** Told of every call refused, with the name of the limit it met (e.g. for a metric). */
    onRefused?: (limit: RefusalReason) => void;
    /** Fair shares of a saturated process; none: no call is refused for it. */
    fairShare?: FairShare;
  } = {},
): RateLimiter {
  const clock = options.clock ?? Date.now;
  const buckets = new Map<string, Bucket>();
  const counters = new Map<string, Counter>();
  let shares: ReadonlyMap<string, number> = new Map();
  let fallback = 1;
  let lastTaken = clock();
  const shareOf = (key: string) => shares.get(key) ?? fallback;
  /** Per app: refusals paused now, and until when its last fair-share refusal's `Retry-After` runs. */
  const paused = new Map<string, number>();
  const shedUntil = new Map<string, number>();
  const pauses = createPauseLine({ perTurn: PAUSES_PER_TURN });

  const refused = (message: string, retryAfterSeconds: number, limit: keyof AppLimits) => {
    options.onRefused?.(limit);
    return new PlatformError("rate_limited", message, {
      details: [`limits.${limit}: the app's limit across all instances; retry after ${retryAfterSeconds} s`],
      retryAfterSeconds,
    });
  };

  /** How long a refusal of `appId` pauses: `ms`, or none past the app's bound of paused refusals. */
  const pauseMs = (appId: string, ms: number) =>
    (paused.get(appId) ?? 0) >= MAX_PAUSED_PER_APP ? 0 : Math.min(MAX_PAUSE_MS, Math.max(0, Math.ceil(ms)));
  const pauseOf = (appId: string, ms: number): (() => Promise<void>) => {
    if (ms < 1) return noPause;
    return () => {
      paused.set(appId, (paused.get(appId) ?? 0) + 1);
      const unhold = options.fairShare?.hold(appId);
      // Jittered, so that the refusals of many calls refused together are not all answered together again;
      // those whose pauses end together anyway are answered a few a turn of the event loop (`pause-line.ts`).
      const wait = ms * (0.75 + Math.random() * 0.25);
      return pauses.wait(appId, wait).finally(() => {
        unhold?.();
        const n = (paused.get(appId) ?? 1) - 1;
        if (n <= 0) paused.delete(appId);
        else paused.set(appId, n);
      });
    };
  };

  /** The fair-share check at a call's head: the refusal when the process is saturated and the app is above its share. */
  const shed = (app: AppRecord, plan: LimitPlan, now: number): Admission | undefined => {
    if (!options.fairShare) return undefined;
    // A call of many events or messages weighs as one call per ITEMS_PER_CALL of them (a batch of 1000 events
    // keeps the event loop about as busy as 40 puts); at the head, the app's last call of its kind stands for it.
    const cost = plan.early ? (buckets.get(`${app.id}|${plan.rate}`)?.lastCost ?? 1) : plan.cost;
    if (options.fairShare.admit(app.id, 1 + Math.floor(cost / ITEMS_PER_CALL))) return undefined;
    options.onRefused?.("fairShare");
    // A call refused again before the last refusal's second ran out waits that second before its answer.
    const ms = (shedUntil.get(app.id) ?? 0) > now ? pauseMs(app.id, 1000) : 0;
    shedUntil.set(app.id, now + ms + 1000);
    if (shedUntil.size > 10_000) for (const [id, t] of shedUntil) if (t < now) shedUntil.delete(id);
    return {
      headers: [],
      refused: new PlatformError(
        "rate_limited",
        "the service is busy and this app makes more than its share of the calls",
        {
          details: ["load: the service is saturated and this app makes more calls than the others; retry after 1 s"],
          retryAfterSeconds: 1,
        },
      ),
      pause: pauseOf(app.id, ms),
      release: () => {},
    };
  };

  return {
    admit(app, plan) {
      const now = clock();
      if (!plan.afterHead) {
        const shedding = shed(app, plan, now);
        if (shedding) return shedding;
      }
      const headers: [string, string][] = [];
      let refusal: PlatformError | undefined;
      let pause = noPause;

      const names = RATE_LIMITS[plan.rate];
      const rate = app.limits[names.rate];
      const burst = Math.max(1, app.limits[names.burst]);
      if (rate > 0) {
        const key = `${app.id}|${plan.rate}`;
        const share = shareOf(key);
        const localRate = rate * share;
        const capacity = Math.max(1, burst * share);
        let bucket = buckets.get(key);
        if (!bucket)
          buckets.set(
            key,
            (bucket = { tokens: capacity, at: now, asked: 0, demand: 0, lastUsed: now, lastCost: 1, refusedUntil: 0 }),
          );
        bucket.tokens = Math.min(capacity, bucket.tokens + ((now - bucket.at) / 1000) * localRate);
        bucket.at = now;
        bucket.lastUsed = now;
        // A call larger than the bucket (a batch of 1000 events on a small share) goes when the bucket is
        // full and leaves it in debt, so the long-run rate holds without refusing big batches for ever.
        const needed = Math.min(plan.early ? bucket.lastCost : plan.cost, capacity);
        if (bucket.tokens >= needed) {
          if (!plan.early) {
            bucket.tokens -= plan.cost;
            bucket.asked += plan.cost;
            bucket.lastCost = plan.cost;
          }
        } else {
          bucket.asked += plan.early ? bucket.lastCost : plan.cost;
          const retryAfter = Math.max(1, Math.ceil((needed - bucket.tokens) / localRate));
          refusal = refused(
            `rate limit: at most ${rate} ${plan.rate === "requests" ? "requests" : plan.rate === "events" ? "events" : "queue messages"} a second (burst ${burst}) for this app`,
            retryAfter,
            names.rate,
          );
          // Called again before the last refusal's Retry-After ran out: answered when the bucket could pay.
          const ms = bucket.refusedUntil > now ? pauseMs(app.id, ((needed - bucket.tokens) / localRate) * 1000) : 0;
          pause = pauseOf(app.id, ms);
          bucket.refusedUntil = now + ms + retryAfter * 1000;
        }
        const window = Math.max(1, Math.ceil(burst / rate));
        const remaining = Math.max(0, Math.min(burst, Math.floor(bucket.tokens / share)));
        const reset = refusal
          ? refusal.retryAfterSeconds!
          : Math.max(0, Math.ceil((capacity - bucket.tokens) / localRate));
        headers.push(["ratelimit-policy", `"${plan.rate}";q=${burst};w=${window}`]);
        headers.push(["ratelimit", `"${plan.rate}";r=${refusal ? 0 : remaining};t=${reset}`]);
      }

      const limitName = CONCURRENCY_LIMITS[plan.concurrency];
      const limit = app.limits[limitName];
      if (refusal || plan.early || limit <= 0) return { headers, refused: refusal, pause, release: () => {} };
      const key = `${app.id}|${plan.concurrency}`;
      let counter = counters.get(key);
      if (!counter) counters.set(key, (counter = { held: 0, peak: 0, refused: 0, demand: 0, lastUsed: now }));
      counter.lastUsed = now;
      const localLimit = Math.max(1, Math.round(limit * shareOf(key)));
      if (counter.held >= localLimit) {
        counter.refused++;
        const what =
          plan.concurrency === "consumes"
            ? "consumes at once"
            : plan.concurrency === "streams"
              ? "open streams"
              : "requests in progress at once";
        return {
          headers,
          refused: refused(`rate limit: at most ${limit} ${what} for this app`, 1, limitName),
          pause: noPause,
          release: () => {},
        };
      }
      counter.held++;
      counter.peak = Math.max(counter.peak, counter.held);
      const c = counter;
      let released = false;
      return {
        headers,
        refused: undefined,
        pause: noPause,
        release() {
          if (released) return;
          released = true;
          c.held--;
        },
      };
    },

    takeDemand() {
      const now = clock();
      const seconds = Math.max(0.001, (now - lastTaken) / 1000);
      lastTaken = now;
      const out: Record<string, number> = {};
      for (const [key, b] of buckets) {
        b.demand = b.demand === 0 ? b.asked / seconds : 0.5 * b.demand + 0.5 * (b.asked / seconds);
        b.asked = 0;
        if (now - b.lastUsed > IDLE_MS) buckets.delete(key);
        else if (b.demand >= 0.01) out[key] = Math.round(b.demand * 100) / 100;
      }
      for (const [key, c] of counters) {
        c.demand = c.peak + c.refused;
        c.peak = c.held;
        c.refused = 0;
        if (c.held === 0 && now - c.lastUsed > IDLE_MS) counters.delete(key);
        else if (c.demand > 0) out[key] = c.demand;
      }
      return out;
    },

    setShares(next, nextFallback) {
      shares = next;
      // A bucket is held to its new capacity at its next call (`admit` refills up to the capacity).
      fallback = nextFallback;
    },
  };
}

/**
 * Each instance's share of each `appId|class`, from the demand every live
 * instance reported: its part of the total demand, never below `floor / n`
 * (n live instances); an even split while nobody asks.
 */
export function sharesOf(
  mine: Readonly<Record<string, number>>,
  others: readonly Readonly<Record<string, number>>[],
): { shares: Map<string, number>; fallback: number } {
  const n = others.length + 1;
  const floor = 0.05 / n;
  const keys = new Set(Object.keys(mine));
  for (const o of others) for (const k of Object.keys(o)) keys.add(k);
  const shares = new Map<string, number>();
  for (const key of keys) {
    const own = mine[key] ?? 0;
    let total = own;
    for (const o of others) total += o[key] ?? 0;
    shares.set(key, total <= 0 ? 1 / n : Math.max(own / total, floor));
  }
  return { shares, fallback: 1 / n };
}
