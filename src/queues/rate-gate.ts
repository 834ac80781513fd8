/**
 * Consumer rate limits (docs/queues.md "Rate limits"): a queue whose policy sets
 * `maxDeliveriesPerSecond` hands its messages out no faster than that across all
 * consumers and instances. A claim on such a queue first takes tokens from the
 * queue's bucket in PostgreSQL (`rate-bucket-store.ts`), claims as many messages
 * as it was granted, and gives back what it did not use; the claim statement
 * itself is the same as for any queue, and a queue without a limit takes no
 * token.
 *
 * On each instance, the consumes and streams of one queue wait for tokens in one
 * line: one statement asks for what all of them want, the grant goes to the
 * first of them in arrival order (a consume asking for 10 and granted 3 gets 3
 * at once), and when the bucket is empty the line sleeps until the database says
 * the next token is due. So a queue limited to r a second costs each instance
 * about r / burst takes a second however many consumers wait, and a consume that
 * waits gets what the limit allows as soon as it allows it.
 */
import type { Logger } from "pino";
import type { Metrics } from "../core/metrics.ts";
import type { RateBucketStore } from "./rate-bucket-store.ts";

/**
 * The bucket holds at most this many seconds of the rate (and at least one token): after an idle time a
 * queue limited to r a second may hand out up to `max(1, r × RATE_BURST_SECONDS)` messages at once, then r a
 * second. Small against a measured window (5 s of the rate: +5%), yet enough that a take delayed by a busy
 * database (up to a quarter second) loses no token.
 */
export const RATE_BURST_SECONDS = 0.25;
/** The shortest sleep of a line whose bucket is empty (a grant then covers what accrued meanwhile). */
const RATE_MIN_SLEEP_MS = 10;
/** The most tokens one take asks for. */
const RATE_MAX_TAKE = 1_000;

const rateBurst = (rate: number) => Math.max(1, rate * RATE_BURST_SECONDS);

export interface RateGate {
  /**
   * Takes up to `n` tokens of the queue's bucket for a rate of `rate` a second: at once when the bucket
   * holds any, else as soon as one is due. 0 when none came by `untilMs` or `signal` aborted.
   */
  take(appId: string, queue: string, rate: number, n: number, untilMs: number, signal: AbortSignal): Promise<number>;
  /** Gives back tokens taken and not used (a claim found fewer messages than it was granted). */
  giveBack(appId: string, queue: string, rate: number, n: number): Promise<void>;
}

interface Taker {
  n: number;
  untilMs: number;
  done: boolean;
  resolve(granted: number): void;
  reject(err: Error): void;
}

interface Line {
  appId: string;
  queue: string;
  rate: number;
  takers: Taker[];
  running: boolean;
}

export function createRateGate(store: RateBucketStore, logger: Logger, metrics: Metrics): RateGate {
  const lines = new Map<string, Line>();
  const takes = metrics.counter(
    "queue_rate_takes_total",
    "Statements taking tokens from the buckets of rate-limited queues (one serves every consume waiting on the queue here).",
    [],
  );
  const granted = metrics.counter(
    "queue_rate_tokens_granted_total",
    "Tokens of rate-limited queues granted to consumes and streams (given-back ones included).",
    [],
  );

  const settle = (t: Taker, granted: number) => {
    if (t.done) return;
    t.done = true;
    t.resolve(granted);
  };

  async function run(key: string, line: Line): Promise<void> {
    try {
      for (;;) {
        const now = Date.now();
        // Takers gone (their deadline passed, their caller left) are answered 0 by their own timers.
        line.takers = line.takers.filter((t) => !t.done);
        if (line.takers.length === 0) return;
        const demand = Math.min(
          RATE_MAX_TAKE,
          line.takers.reduce((sum, t) => sum + t.n, 0),
        );
        let taken: { granted: number; tokens: number };
        try {
          takes.inc();
          taken = await store.take(line.appId, line.queue, line.rate, rateBurst(line.rate), demand);
          granted.inc(taken.granted);
        } catch (err) {
          for (const t of line.takers.splice(0))
            if (!t.done) {
              t.done = true;
              t.reject(err as Error);
            }
          return;
        }
        let left = taken.granted;
        const waiting: Taker[] = [];
        for (const t of line.takers) {
          if (t.done) continue;
          if (left > 0) {
            const share = Math.min(t.n, left);
            left -= share;
            settle(t, share);
          } else if (t.untilMs <= now) settle(t, 0);
          else waiting.push(t);
        }
        line.takers = waiting;
        // Granted to takers that left while the statement ran: back to the bucket for the others.
        if (left > 0) await giveBack(line.appId, line.queue, line.rate, left);
        if (line.takers.length === 0) return;
        const dueMs = Math.max(0, ((1 - taken.tokens) / line.rate) * 1000);
        // Unref'd: a slow limit's sleep (up to 100 s at 0.01 a second) must not keep a closing process alive.
        await new Promise((resolve) => setTimeout(resolve, Math.max(RATE_MIN_SLEEP_MS, dueMs)).unref());
      }
    } finally {
      line.running = false;
      if (line.takers.some((t) => !t.done)) start(key, line);
      else lines.delete(key);
    }
  }

  function start(key: string, line: Line) {
    if (line.running) return;
    line.running = true;
    // At the end of the turn: the consumes of one turn share one take.
    setImmediate(() => void run(key, line));
  }

  async function giveBack(appId: string, queue: string, rate: number, n: number): Promise<void> {
    if (n <= 0) return;
    try {
      await store.giveBack(appId, queue, rateBurst(rate), n);
    } catch (err) {
      // A token not given back is a delivery slot lost for a moment, never a message.
      logger.warn({ err: (err as Error).message, appId, queue, count: n }, "could not give back rate-limit tokens");
    }
  }

  return {
    take(appId, queue, rate, n, untilMs, signal) {
      if (signal.aborted || n <= 0) return Promise.resolve(0);
      const key = `${appId}|${queue}`;
      let line = lines.get(key);
      if (!line) lines.set(key, (line = { appId, queue, rate, takers: [], running: false }));
      line.rate = rate;
      const current = line;
      return new Promise<number>((resolve, reject) => {
        let timer: NodeJS.Timeout | undefined;
        const onAbort = () => settle(taker, 0);
        const cleanup = () => {
          clearTimeout(timer);
          signal.removeEventListener("abort", onAbort);
        };
        const taker: Taker = {
          n,
          untilMs,
          done: false,
          resolve: (granted) => (cleanup(), resolve(granted)),
          reject: (err) => (cleanup(), reject(err)),
        };
        // A taker that may wait is answered 0 at its deadline even while a take is in flight.
        const ms = untilMs - Date.now();
        if (ms > 0) timer = setTimeout(() => settle(taker, 0), ms);
        signal.addEventListener("abort", onAbort, { once: true });
        current.takers.push(taker);
        start(key, current);
      });
    },
    giveBack,
  };
}
