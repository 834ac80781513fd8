/**
 * The consume → work → ack loop (`queues.work`). Each of `concurrency` slots
 * long-polls for a message (or, with `batchSize` above 1, one loop takes up
 * to that many at once for the free slots), runs the handler, and acks only
 * after the handler has succeeded, so a message is never acked while its
 * handler runs. While a handler runs, its lease is extended in the
 * background (a heartbeat), so a slow job is not handed to a second consumer.
 * A handler that throws gives its message back at once with a nack, so the
 * queue's retry policy (delay, backoff, max deliveries, dead letters) decides
 * when it comes back. An ack that answers `acked: false` means the lease
 * lapsed before the work finished (the message may be worked twice); it goes
 * to `onLeaseLost`.
 *
 * Stopping (the signal, `stop()`, or the client's close) starts no new
 * consume and aborts the waiting ones, except that a consume sent less than
 * `STOP_CONSUME_GRACE_MS` before may be bringing a message (a queue with
 * messages answers at once): it is let finish, and whatever it brings is
 * given back at once (nack with no delay), never dropped with an aborted
 * call, which would leave it leased to nobody for a whole lease. Then it lets the running handlers
 * finish (their own calls are not aborted) and acks what they finished: the
 * acks are sent even though the worker is stopping, because dropping them
 * would make finished work come back. A handler still running after the stop
 * timeout is abandoned: its `context.signal` aborts, its message is not
 * acked (it comes back after its lease), and `stop()` resolves naming it, so
 * a handler that never settles cannot keep the shutdown pending forever.
 */
import { PlatformError } from "./platform-error.ts";
import { backoff, sleep } from "./transport.ts";
import type {
  AckResponse,
  ConsumeOptions,
  ConsumeResponse,
  ExtendResponse,
  JsonValue,
  NackResponse,
  QueueMessage,
} from "./types.ts";

export interface HandlerContext {
  /**
   * Aborts when the handler is abandoned: the worker stopped and the stop
   * timeout passed while the handler was still running. Pass it to calls the
   * handler may give up on; its message is not acked and comes back.
   */
  signal: AbortSignal;
  /**
   * Aborts as soon as the worker starts stopping. A handler may use it to
   * finish early (it is still acked when it returns), or ignore it and run to
   * its end within the stop timeout.
   */
  stopping: AbortSignal;
  /**
   * Gives the message back instead of acking it when the handler returns:
   * now, or after `delaySeconds` (default: the queue policy's retry delay and
   * backoff). The delivery counts toward the policy's max deliveries.
   */
  nack(delaySeconds?: number): void;
  /** Sets the lease to end `leaseSeconds` from now (the heartbeat does this on its own). False if it lapsed. */
  extend(leaseSeconds: number): Promise<boolean>;
}

export type MessageHandler<P = JsonValue> = (message: QueueMessage<P>, context: HandlerContext) => unknown;

export interface LeaseLost<P = JsonValue> {
  message: QueueMessage<P>;
  /** Always false: the ack (or a heartbeat) came after the lease had lapsed, so the message went back on the queue. */
  acked: false;
  /**
   * The ack was answered `false` only on a retry, after an attempt whose answer was lost (a dropped
   * connection, a 502/503/504): that attempt may have acked the message, and then nothing was lost.
   * False when the service answered the first attempt, or when a heartbeat found the lease lapsed.
   */
  afterRetry: boolean;
}

export interface StopOptions {
  /** How long running handlers may take to finish before they are abandoned. Default: the worker's `stopTimeoutMs`. */
  timeoutMs?: number;
}

export interface StopResult<P = JsonValue> {
  /**
   * Messages whose handler was still running when the stop timeout passed:
   * not acked, they come back after their lease (handlers must be idempotent).
   */
  abandoned: QueueMessage<P>[];
}

export interface WorkOptions<P = JsonValue> {
  /** Messages worked at the same time. Default 1. */
  concurrency?: number;
  /**
   * Messages taken per consume call, 1 to 100 (never more than the free
   * slots). Above 1, one loop fetches for every slot with `{ max }`.
   * Default 1 (each slot long-polls on its own).
   */
  batchSize?: number;
  /** Lease per message (1 to 43200 s). Default: the queue's policy, else the app's lease (30 s). */
  leaseSeconds?: number;
  /** Long-poll wait per consume (0 to 25 s). Default 25. */
  waitSeconds?: number;
  /**
   * Extend the lease while the handler runs (every third of the lease, by
   * the lease's length), so a handler may outlive `leaseSeconds` without its
   * message being handed out again. Default true.
   */
  heartbeat?: boolean;
  /**
   * When a handler throws, give the message back at once (`nack`), so the
   * queue policy's retry delay and backoff apply, instead of waiting for the
   * lease to lapse. Default true.
   */
  nackOnError?: boolean;
  /** How long `stop()` waits for running handlers before abandoning them. Default 30000 ms. */
  stopTimeoutMs?: number;
  /** Stops the worker gracefully when aborted. */
  signal?: AbortSignal;
  /** A handler outlived its lease: the late ack (or a heartbeat) found it lapsed. */
  onLeaseLost?: (info: LeaseLost<P>) => void;
  /**
   * Daily allowances the handler spends (`mail`, `events`, `fast_tokens`, `embed_tokens`): the worker
   * pauses as soon as any worker of the same client meets one of these caps, not only after its own
   * handler met it. A handler that meets a daily cap adds it on its own.
   */
  needs?: string[];
  /** The worker paused: a daily cap its handlers need is spent until `until` (see `Worker.paused`). */
  onPause?: (pause: WorkerPause) => void;
  /**
   * A handler threw (its message was nacked, or comes back after its lease),
   * an ack failed, a handler was abandoned at stop, or consuming failed for a
   * while (the worker keeps trying). Default: `console.error`.
   */
  onError?: (error: unknown, message?: QueueMessage<P>) => void;
}

/** Why and until when a worker takes no messages. */
export interface WorkerPause {
  /** The daily allowance spent (`mail`, `events`, `fast_tokens`, `embed_tokens`; `daily` when the 429 named none). */
  allowance: string;
  /** Epoch ms (this machine's clock) when the allowance resets and the worker consumes again. */
  until: number;
}

/**
 * The daily caps met by a client's workers, shared by them: a worker whose
 * handlers need an allowance pauses when any of them meets its cap.
 */
export interface DailyCaps {
  /** `allowance` is spent until `until` (epoch ms). */
  note(allowance: string, until: number): void;
  /** When `allowance` resets, if it is spent now. */
  until(allowance: string): number | undefined;
  /** Called after every `note`; returns the unsubscribe. */
  subscribe(listener: (allowance: string) => void): () => void;
}

export function createDailyCaps(): DailyCaps {
  const spent = new Map<string, number>();
  const listeners = new Set<(allowance: string) => void>();
  return {
    note(allowance, until) {
      if ((spent.get(allowance) ?? 0) >= until) return;
      spent.set(allowance, until);
      for (const l of [...listeners]) l(allowance);
    },
    until(allowance) {
      const at = spent.get(allowance);
      if (at === undefined || at <= Date.now()) return undefined;
      return at;
    },
    subscribe(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
  };
}

export interface Worker<P = JsonValue> {
  /**
   * Settles when the worker has stopped and every running handler has
   * finished and been acked (or was abandoned at the stop timeout); rejects
   * when the worker cannot go on (bad queue name, token refused).
   */
  readonly done: Promise<StopResult<P>>;
  /** Stops gracefully; resolves like `done`. */
  stop(options?: StopOptions): Promise<StopResult<P>>;
  /** Handlers running right now. */
  readonly running: number;
  /** Set while the worker takes no messages because a daily cap its handlers need is spent. */
  readonly paused: WorkerPause | undefined;
  /** Consumes again now (e.g. after the operator raised the cap), forgetting the pause. */
  resume(): void;
}

export interface WorkerDeps {
  consume(queue: string, options: ConsumeOptions, signal: AbortSignal): Promise<ConsumeResponse>;
  /** Batch consume (`{ max }`); returns the leased messages (maybe none after the wait). */
  consumeMany(queue: string, options: ConsumeOptions, max: number, signal: AbortSignal): Promise<QueueMessage[]>;
  /**
   * Must not be tied to the worker's signal: finished work is acked while stopping. `afterRetry`:
   * the answer came on a retry, after an attempt whose answer was lost.
   */
  ack(receipt: string): Promise<AckResponse & { afterRetry: boolean }>;
  extend(receipt: string, leaseSeconds: number): Promise<ExtendResponse>;
  nack(receipt: string, delaySeconds?: number, reason?: string): Promise<NackResponse>;
  /** The queue's lease length (its policy's): what the heartbeat extends by when `leaseSeconds` is not given. */
  policyLeaseSeconds(queue: string): Promise<number>;
  /** Aborts when the client starts closing: the worker then stops (the client waits for it with its own timeout). */
  closing: AbortSignal;
  /** The client's daily caps, shared by its workers (a worker of its own when absent). */
  caps?: DailyCaps;
}

/** The longest lease the service grants. */
const MAX_LEASE_SECONDS = 43_200;

/** How long the heartbeat trusts a queue policy's lease length it read, before it reads it again. */
const POLICY_READ_MS = 60_000;

/**
 * At stop, a consume in flight for less than this is let finish: the service answers a consume at once
 * when the queue has a message, so a young one may be bringing one (its answer may already be on the way,
 * where an abort would drop it). One in flight for longer is a waiting consume on an empty queue, aborted.
 */
export const STOP_CONSUME_GRACE_MS = 1_000;

/**
 * The give-back of a message whose handler threw a 429 with `retryAfter`: after that delay, capped by
 * what is left of the message's lifetime (a delay past it would only let it expire unworked; it comes
 * back a little before instead) and by the longest delay the service takes. Undefined for other errors.
 */
export function refusedFor(error: unknown, message: { expiresAt: number }): { delaySeconds: number } | undefined {
  if (!(error instanceof PlatformError) || error.status !== 429 || error.retryAfter === undefined) return undefined;
  return { delaySeconds: delayWithin(error.retryAfter, message) };
}

/** A give-back delay within what is left of the message's lifetime (less a minute) and the longest the service takes. */
function delayWithin(seconds: number, message: { expiresAt: number }): number {
  const lifeLeft = Math.floor((message.expiresAt - Date.now()) / 1000) - 60;
  return Math.max(0, Math.min(seconds, lifeLeft, MAX_LEASE_SECONDS));
}

/** Slack for a 429's `Retry-After` that reaches the next UTC midnight: the service rounds, and clocks differ. */
const DAILY_RESET_SLACK_MS = 120_000;

/**
 * The daily cap a 429 says is spent, and when it resets: a `quota_exceeded`,
 * or any 429 whose `retryAfter` reaches the next UTC midnight (a daily reset).
 * The allowance is the one its details name (`mail: 0 of 3 left today`).
 * Undefined for other errors, and for short refusals (`rate_limited`,
 * `queue_full`), after which consuming on is right.
 */
export function dailyCapOf(error: unknown, now = Date.now()): WorkerPause | undefined {
  if (!(error instanceof PlatformError) || error.status !== 429 || error.retryAfter === undefined) return undefined;
  const until = now + error.retryAfter * 1000;
  const midnight = new Date(now).setUTCHours(24, 0, 0, 0);
  if (error.code !== "quota_exceeded" && until < midnight - DAILY_RESET_SLACK_MS) return undefined;
  const named = /^([a-z_]+):/.exec(error.details[0] ?? "");
  return { allowance: named?.[1] ?? "daily", until };
}

/** The longest nack `reason` the service keeps, in characters. */
const MAX_REASON_CHARS = 1_000;

/**
 * What a thrown error says, as a nack's `reason` (kept on the message and shown on its dead letter):
 * its name (a service error's code) and message, cut to what the service keeps. Undefined when there is nothing to say.
 */
export function reasonOf(error: unknown): string | undefined {
  const text =
    error instanceof PlatformError
      ? `${error.code}: ${error.message}`
      : error instanceof Error
        ? `${error.name}: ${error.message}`
        : typeof error === "string"
          ? error
          : undefined;
  if (!text) return undefined;
  // A lone surrogate is not text the service keeps: replaced, as String#toWellFormed does.
  const chars = [...text.replace(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, "\uFFFD")];
  return chars.length <= MAX_REASON_CHARS ? chars.join("") : chars.slice(0, MAX_REASON_CHARS - 1).join("") + "…";
}

/** Errors after which consuming again cannot succeed: the worker stops and `done` rejects. */
const FATAL = new Set(["invalid_argument", "unauthenticated", "permission_denied", "not_found", "not_configured"]);

/**
 * A server without lease extension or nack (older than those endpoints)
 * answers 404, or 400 because it reads `_extend`/`_nack` as a put on a queue of that name:
 * the worker then stops using that feature and falls back to lease lapse.
 */
export function isUnsupported(err: unknown): boolean {
  return (
    err instanceof PlatformError &&
    (err.status === 404 || err.status === 405 || (err.status === 400 && /^(queue|payload):/.test(err.message)))
  );
}

export function startWorker<P = JsonValue>(
  deps: WorkerDeps,
  queue: string,
  handler: MessageHandler<P>,
  options: WorkOptions<P> = {},
): Worker<P> {
  const concurrency = options.concurrency ?? 1;
  if (!Number.isInteger(concurrency) || concurrency < 1)
    throw new RangeError("work: concurrency must be an integer of at least 1");
  const batchSize = options.batchSize ?? 1;
  if (!Number.isInteger(batchSize) || batchSize < 1 || batchSize > 100)
    throw new RangeError("work: batchSize must be an integer from 1 to 100");
  const stopTimeoutMs = options.stopTimeoutMs ?? 30_000;
  const useHeartbeat = options.heartbeat ?? true;
  const useNack = options.nackOnError ?? true;

  const stopper = new AbortController();
  const stopSignal = stopper.signal;
  let deadline: number | undefined;
  /** The consumes in flight: when each was sent, and what aborts it. */
  const consuming = new Set<{ sentAt: number; controller: AbortController; timer?: ReturnType<typeof setTimeout> }>();
  const stop = (timeoutMs = stopTimeoutMs) => {
    deadline = Math.min(deadline ?? Infinity, Date.now() + Math.max(0, timeoutMs));
    if (!stopSignal.aborted) {
      stopper.abort(new DOMException("the worker is stopping", "AbortError"));
      for (const c of consuming) {
        const left = c.sentAt + STOP_CONSUME_GRACE_MS - Date.now();
        if (left <= 0) c.controller.abort(stopSignal.reason);
        else c.timer = setTimeout(() => c.controller.abort(stopSignal.reason), left);
      }
    }
    armDeadline();
  };
  /** Runs one consume, aborted at stop as `STOP_CONSUME_GRACE_MS` says. */
  async function consumeOnce<T>(run: (signal: AbortSignal) => Promise<T>): Promise<T> {
    const c = { sentAt: Date.now(), controller: new AbortController() } as {
      sentAt: number;
      controller: AbortController;
      timer?: ReturnType<typeof setTimeout>;
    };
    consuming.add(c);
    try {
      return await run(c.controller.signal);
    } finally {
      consuming.delete(c);
      if (c.timer !== undefined) clearTimeout(c.timer);
    }
  }
  /**
   * Messages a consume brought after the stop or a pause began, not worked: given back at once
   * (nack, no delay) at a stop, and while paused with the delay left of the pause (within the
   * message's lifetime), so that no other consumer of the app takes them only to meet the cap.
   */
  async function giveBack(messages: QueueMessage<P>[]): Promise<void> {
    const p = pausedNow();
    await Promise.all(
      messages.map(async (m) => {
        try {
          await deps.nack(m.receipt, p ? delayWithin(Math.ceil((p.until - Date.now()) / 1000), m) : 0);
        } catch (err) {
          report(err, m); // not given back: it comes back after its lease
        }
      }),
    );
  }

  /*
   * Pausing: a handler that met a daily cap (or any worker of the client that
   * met the cap of an allowance this worker `needs`) pauses the worker until
   * the cap resets. A paused worker starts no consume and aborts its waiting
   * ones the way a stop does (a young one is let finish, and what it brings
   * goes back with the pause's delay): every message it took would only meet
   * the cap again.
   */
  const caps = deps.caps ?? createDailyCaps();
  const needs = new Set(options.needs ?? []);
  let pause: WorkerPause | undefined;
  const pauseWaiters = new Set<() => void>();
  function pausedNow(): WorkerPause | undefined {
    if (pause && pause.until <= Date.now()) pause = undefined;
    return pause;
  }
  function pauseFor(p: WorkerPause): void {
    if (stopSignal.aborted || (pause && pause.until >= p.until)) return;
    pause = { ...p };
    for (const c of consuming) {
      const left = c.sentAt + STOP_CONSUME_GRACE_MS - Date.now();
      const reason = new DOMException("the worker paused", "AbortError");
      if (left <= 0) c.controller.abort(reason);
      else if (c.timer === undefined) c.timer = setTimeout(() => c.controller.abort(reason), left);
    }
    try {
      options.onPause?.({ ...p });
    } catch {
      // A failing callback must not break the loop.
    }
  }
  /** Waits while paused; false when the worker stops meanwhile. */
  async function whilePaused(): Promise<boolean> {
    for (let p = pausedNow(); p; p = pausedNow()) {
      const wake = new AbortController();
      const waker = () => wake.abort();
      pauseWaiters.add(waker);
      try {
        await sleep(Math.max(0, p.until - Date.now()), AbortSignal.any([stopSignal, wake.signal]));
      } catch {
        if (stopSignal.aborted) return false;
      } finally {
        pauseWaiters.delete(waker);
      }
    }
    return !stopSignal.aborted;
  }
  const unsubscribe = caps.subscribe((allowance) => {
    const until = needs.has(allowance) ? caps.until(allowance) : undefined;
    if (until !== undefined) pauseFor({ allowance, until });
  });
  for (const allowance of needs) {
    const until = caps.until(allowance);
    if (until !== undefined) pauseFor({ allowance, until });
  }
  for (const s of [options.signal, deps.closing]) {
    if (!s) continue;
    if (s.aborted) stop();
    else s.addEventListener("abort", () => stop(), { once: true });
  }
  const onError = options.onError ?? ((error: unknown) => console.error(`queue worker ${queue}:`, error));
  const report = (error: unknown, message?: QueueMessage<P>) => {
    try {
      onError(error, message);
    } catch {
      // A failing callback must not break the loop.
    }
  };
  const consumeOptions: ConsumeOptions = { waitSeconds: options.waitSeconds, leaseSeconds: options.leaseSeconds };
  let heartbeatSupported = useHeartbeat;
  let nackSupported = useNack;
  let reasonsSupported = true;

  /** Messages whose lapsed lease a heartbeat already reported (until their handler ends). */
  const leaseLost = new WeakSet<QueueMessage<P>>();
  /** Handlers running now, with the controller that abandons each. */
  const active = new Map<QueueMessage<P>, AbortController>();
  const abandoned: QueueMessage<P>[] = [];
  const idle = new Set<() => void>();
  const changed = () => {
    for (const w of [...idle]) w();
  };

  let deadlineTimer: ReturnType<typeof setTimeout> | undefined;
  function armDeadline(): void {
    if (deadline === undefined) return;
    if (deadlineTimer !== undefined) clearTimeout(deadlineTimer);
    deadlineTimer = setTimeout(abandonAll, Math.max(0, deadline - Date.now()));
  }
  function abandonAll(): void {
    deadlineTimer = undefined;
    for (const [message, controller] of active) {
      abandoned.push(message);
      active.delete(message);
      controller.abort(new DOMException("the worker stopped and this handler outlived the stop timeout", "AbortError"));
      report(
        new Error(`handler of message ${message.id} abandoned at stop (still running after the stop timeout)`),
        message,
      );
    }
    changed();
  }

  /**
   * The lease length the heartbeat extends by without `leaseSeconds`: the
   * queue policy's, read from the service (again after a minute). Never
   * worked out from the message's `leaseExpiresAt`, which is on the server's
   * clock: with this machine's clock ahead, that gave a lease of a second, and
   * every beat cut the lease down to it. Only when the policy cannot be read
   * (a server without policies, a failed call, read again at the next beat)
   * does the message's lease as it was told (`toldMs`, on this machine's
   * clock when the message came) stand in.
   */
  let policyLease: { seconds: Promise<number | undefined>; at: number } | undefined;
  async function leaseSecondsOf(toldMs: number): Promise<number> {
    if (options.leaseSeconds !== undefined) return options.leaseSeconds;
    if (!policyLease || Date.now() - policyLease.at > POLICY_READ_MS) {
      const seconds = deps.policyLeaseSeconds(queue).then(
        (s) => Math.min(MAX_LEASE_SECONDS, Math.max(1, s)),
        () => {
          policyLease = undefined;
          return undefined;
        },
      );
      policyLease = { seconds, at: Date.now() };
    }
    const read = await policyLease.seconds;
    if (read !== undefined) return read;
    return Math.min(MAX_LEASE_SECONDS, Math.round(Math.max(1000, toldMs) / 1000));
  }

  /** Extends the lease every third of its length while the handler runs. */
  function heartbeat(message: QueueMessage<P>, until: AbortSignal): void {
    if (!heartbeatSupported) return;
    // The first beat comes within a third of the lease as the message tells it (the policy may have
    // changed since it was read; a clock skew only makes this beat early), and within 10 s.
    const toldMs = message.leaseExpiresAt - Date.now();
    const firstMs =
      options.leaseSeconds !== undefined
        ? Math.max(250, Math.floor((options.leaseSeconds * 1000) / 3))
        : Math.min(Math.floor(Math.max(750, toldMs) / 3), 10_000);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const beat = async () => {
      timer = undefined;
      if (until.aborted || !heartbeatSupported) return;
      let intervalMs = firstMs;
      try {
        const leaseSeconds = await leaseSecondsOf(toldMs);
        intervalMs = Math.max(250, Math.floor((leaseSeconds * 1000) / 3));
        if (until.aborted) return;
        const { extended } = await deps.extend(message.receipt, leaseSeconds);
        if (until.aborted) return;
        if (!extended) {
          leaseLost.add(message);
          options.onLeaseLost?.({ message, acked: false, afterRetry: false });
          return;
        }
      } catch (err) {
        if (until.aborted) return;
        if (isUnsupported(err)) {
          heartbeatSupported = false;
          return;
        }
        // A failed beat (network, 503) is tried again at the next interval.
        report(err, message);
      }
      timer = setTimeout(() => void beat(), intervalMs);
    };
    timer = setTimeout(() => void beat(), firstMs);
    until.addEventListener("abort", () => timer !== undefined && clearTimeout(timer), { once: true });
  }

  async function handle(message: QueueMessage<P>): Promise<void> {
    const abandon = new AbortController();
    const finished = new AbortController();
    active.set(message, abandon);
    heartbeat(message, AbortSignal.any([finished.signal, abandon.signal]));
    const givenUp = new Promise<"abandoned">((resolve) =>
      abandon.signal.addEventListener("abort", () => resolve("abandoned"), { once: true }),
    );
    let giveBack: { delaySeconds?: number } | undefined;
    const context: HandlerContext = {
      signal: abandon.signal,
      stopping: stopSignal,
      nack(delaySeconds) {
        giveBack = { delaySeconds };
      },
      async extend(leaseSeconds) {
        return (await deps.extend(message.receipt, leaseSeconds)).extended;
      },
    };
    const outcome = await Promise.race([
      (async () => handler(message, context))().then(
        () => ({ ok: true as const }),
        (error: unknown) => ({ ok: false as const, error }),
      ),
      givenUp,
    ]);
    finished.abort();
    // Abandoned at the stop timeout: the shutdown goes on without it; it comes back after its lease.
    if (outcome === "abandoned" || !active.delete(message)) return;
    // A handler that met a 429 with Retry-After (a daily cap spent, a full queue) would meet it again at once:
    // its message comes back when the service said, never sooner than the nack would bring it.
    if (!outcome.ok && !giveBack) giveBack = refusedFor(outcome.error, message);
    // A daily cap: every other message would meet it too, so the worker pauses until it resets.
    const cap = outcome.ok ? undefined : dailyCapOf(outcome.error);
    if (cap) {
      needs.add(cap.allowance);
      caps.note(cap.allowance, cap.until);
      pauseFor(cap);
    }
    try {
      if (!outcome.ok || giveBack) {
        if (!outcome.ok) report(outcome.error, message);
        if (giveBack || nackSupported) {
          try {
            const reason = outcome.ok || !reasonsSupported ? undefined : reasonOf(outcome.error);
            try {
              await deps.nack(message.receipt, giveBack?.delaySeconds, reason);
            } catch (err) {
              // A service older than nack reasons refuses the field: nack without it, and send none again.
              if (reason === undefined || !(err instanceof PlatformError) || !/"reason"/.test(err.message)) throw err;
              reasonsSupported = false;
              await deps.nack(message.receipt, giveBack?.delaySeconds);
            }
          } catch (err) {
            if (isUnsupported(err)) nackSupported = false;
            else report(err, message); // not nacked: it comes back after its lease
          }
        }
        return;
      }
      try {
        const { acked, afterRetry } = await deps.ack(message.receipt);
        // Told once: a heartbeat may already have found the lease lapsed.
        if (!acked && !leaseLost.has(message)) options.onLeaseLost?.({ message, acked: false, afterRetry });
      } catch (err) {
        report(err, message);
      }
    } finally {
      changed();
    }
  }

  /** Waits (after a consume failed) with backoff; false when stopping. */
  async function backOff(failures: number): Promise<boolean> {
    try {
      await sleep(backoff(failures, 500, 30_000), stopSignal);
      return true;
    } catch {
      return false;
    }
  }

  async function slot(): Promise<void> {
    let failures = 0;
    while (!stopSignal.aborted) {
      if (!(await whilePaused())) return;
      let message: QueueMessage<P> | null;
      try {
        message = (await consumeOnce((signal) => deps.consume(queue, consumeOptions, signal)))
          .message as QueueMessage<P> | null;
        failures = 0;
      } catch (err) {
        if (stopSignal.aborted) return;
        if (pausedNow()) continue; // aborted by the pause
        if (err instanceof PlatformError && FATAL.has(err.code)) throw err;
        report(err);
        if (!(await backOff(++failures))) return;
        continue;
      }
      if (message && (stopSignal.aborted || pausedNow())) await giveBack([message]);
      else if (message) await handle(message);
    }
  }

  /** Resolves when a slot is free (or at once when stopping). */
  function freeSlot(): Promise<void> {
    return new Promise((resolve) => {
      const check = () => {
        if (active.size >= concurrency && !stopSignal.aborted) return;
        idle.delete(check);
        stopSignal.removeEventListener("abort", check);
        resolve();
      };
      idle.add(check);
      stopSignal.addEventListener("abort", check, { once: true });
      check();
    });
  }

  /** With batchSize > 1: one loop takes up to min(batchSize, free slots) messages per consume. */
  async function fetcher(): Promise<void> {
    let failures = 0;
    const running = new Set<Promise<void>>();
    try {
      while (!stopSignal.aborted) {
        if (!(await whilePaused())) break;
        await freeSlot();
        if (stopSignal.aborted) break;
        const max = Math.min(batchSize, concurrency - active.size);
        let messages: QueueMessage<P>[];
        try {
          messages = (await consumeOnce((signal) =>
            deps.consumeMany(queue, consumeOptions, max, signal),
          )) as QueueMessage<P>[];
          failures = 0;
        } catch (err) {
          if (stopSignal.aborted) break;
          if (pausedNow()) continue; // aborted by the pause
          if (err instanceof PlatformError && FATAL.has(err.code)) throw err;
          report(err);
          if (!(await backOff(++failures))) break;
          continue;
        }
        if (stopSignal.aborted || pausedNow()) {
          await giveBack(messages);
          if (stopSignal.aborted) break;
          continue;
        }
        for (const m of messages) {
          const p = handle(m).finally(() => running.delete(p));
          running.add(p);
        }
      }
    } finally {
      await Promise.all(running);
    }
  }

  const loops = batchSize > 1 ? [fetcher()] : Array.from({ length: concurrency }, () => slot());
  const done = Promise.allSettled(
    loops.map((l) =>
      l.catch((err: unknown) => {
        // One loop cannot go on, so none can: stop the others gracefully, then fail.
        stop();
        throw err;
      }),
    ),
  ).then((results) => {
    // Every loop has ended, so every handler finished (and was acked) or was abandoned.
    if (deadlineTimer !== undefined) clearTimeout(deadlineTimer);
    unsubscribe();
    const failed = results.find((r): r is PromiseRejectedResult => r.status === "rejected");
    if (failed) {
      report(failed.reason);
      throw failed.reason;
    }
    return { abandoned: [...abandoned] };
  });
  // `done` is also reported through onError, so an app that never awaits it does not crash on it.
  done.catch(() => {});
  return {
    done,
    stop(o: StopOptions = {}) {
      stop(o.timeoutMs);
      return done;
    },
    get running() {
      return active.size;
    },
    get paused() {
      const p = pausedNow();
      return p ? { ...p } : undefined;
    },
    resume() {
      pause = undefined;
      for (const w of [...pauseWaiters]) w();
    },
  };
}
