/**
 * The consume → work → ack loop (`queues.work`). Each of `concurrency` slots
 * long-polls for one message, runs the handler, and acks only after the
 * handler has succeeded, so a message is never acked while its handler runs.
 * A handler that throws leaves the message unacked: its lease lapses and the
 * service hands it out again (at-least-once). An ack that answers
 * `acked: false` means the lease lapsed before the work finished (the message
 * may be worked twice); it goes to `onLeaseLost`.
 *
 * Stopping (the signal, `stop()`, or the client's close) aborts the waiting
 * consumes at once, starts no new one, waits for the running handlers, and
 * acks what they finished; the acks are sent even though the worker is
 * stopping, because dropping them would make finished work come back.
 */
import { PlatformError } from "./platform-error.ts";
import { backoff, sleep } from "./transport.ts";
import type { AckResponse, ConsumeOptions, ConsumeResponse, JsonValue, QueueMessage } from "./types.ts";

export interface HandlerContext {
  /** Aborts when the worker stops: a long handler may end early (throwing lets the lease lapse). */
  signal: AbortSignal;
}

export type MessageHandler<P = JsonValue> = (message: QueueMessage<P>, context: HandlerContext) => unknown;

export interface LeaseLost<P = JsonValue> {
  message: QueueMessage<P>;
  /** Always false: the ack came after the lease had lapsed, so the message went back on the queue. */
  acked: false;
}

export interface WorkOptions<P = JsonValue> {
  /** Messages worked at the same time. Default 1. */
  concurrency?: number;
  /** Lease per message (1 to 43200 s); longer than the longest handler. Default: the app's lease (30 s). */
  leaseSeconds?: number;
  /** Long-poll wait per consume (0 to 25 s). Default 25. */
  waitSeconds?: number;
  /** Stops the worker gracefully when aborted. */
  signal?: AbortSignal;
  /** A handler outlived its lease: the late ack answered `acked: false`. */
  onLeaseLost?: (info: LeaseLost<P>) => void;
  /**
   * A handler threw (the message will come back after its lease), an ack
   * failed, or consuming failed for a while (the worker keeps trying).
   * Default: `console.error`.
   */
  onError?: (error: unknown, message?: QueueMessage<P>) => void;
}

export interface Worker {
  /**
   * Settles when the worker has stopped and every running handler has
   * finished and been acked; rejects when the worker cannot go on (bad queue
   * name, token refused).
   */
  readonly done: Promise<void>;
  /** Stops gracefully; resolves like `done`. */
  stop(): Promise<void>;
  /** Handlers running right now. */
  readonly running: number;
}

export interface WorkerDeps {
  consume(queue: string, options: ConsumeOptions, signal: AbortSignal): Promise<ConsumeResponse>;
  /** Must not be tied to the worker's signal: finished work is acked while stopping. */
  ack(receipt: string): Promise<AckResponse>;
  /** The client's own signal (close / abort). */
  clientSignal: AbortSignal;
}

/** Errors after which consuming again cannot succeed: the worker stops and `done` rejects. */
const FATAL = new Set(["invalid_argument", "unauthenticated", "permission_denied", "not_found", "not_configured"]);

export function startWorker<P = JsonValue>(
  deps: WorkerDeps,
  queue: string,
  handler: MessageHandler<P>,
  options: WorkOptions<P> = {},
): Worker {
  const concurrency = options.concurrency ?? 1;
  if (!Number.isInteger(concurrency) || concurrency < 1)
    throw new RangeError("work: concurrency must be an integer of at least 1");
  const stopper = new AbortController();
  const stopSignal = stopper.signal;
  const stop = () => stopper.abort(new DOMException("the worker is stopping", "AbortError"));
  for (const s of [options.signal, deps.clientSignal]) {
    if (!s) continue;
    if (s.aborted) stop();
    else s.addEventListener("abort", stop, { once: true });
  }
  const onError = options.onError ?? ((error: unknown) => console.error(`queue worker ${queue}:`, error));
  const consumeOptions: ConsumeOptions = { waitSeconds: options.waitSeconds, leaseSeconds: options.leaseSeconds };
  let running = 0;

  async function handle(message: QueueMessage<P>): Promise<void> {
    running++;
    try {
      await handler(message, { signal: stopSignal });
    } catch (err) {
      // Not acked: the lease lapses and the message comes back.
      onError(err, message);
      return;
    } finally {
      running--;
    }
    try {
      const { acked } = await deps.ack(message.receipt);
      if (!acked) options.onLeaseLost?.({ message, acked: false });
    } catch (err) {
      onError(err, message);
    }
  }

  async function slot(): Promise<void> {
    let failures = 0;
    while (!stopSignal.aborted) {
      let message: QueueMessage<P> | null;
      try {
        message = (await deps.consume(queue, consumeOptions, stopSignal)).message as QueueMessage<P> | null;
        failures = 0;
      } catch (err) {
        if (stopSignal.aborted) return;
        if (err instanceof PlatformError && FATAL.has(err.code)) throw err;
        onError(err);
        try {
          await sleep(backoff(++failures, 500, 30_000), stopSignal);
        } catch {
          return;
        }
        continue;
      }
      if (message) await handle(message);
    }
  }

  const slots = Array.from({ length: concurrency }, () =>
    slot().catch((err: unknown) => {
      // One slot cannot go on, so none can: stop the others gracefully, then fail.
      stop();
      throw err;
    }),
  );
  const done = Promise.allSettled(slots).then((results) => {
    const failed = results.find((r): r is PromiseRejectedResult => r.status === "rejected");
    if (failed) {
      onError(failed.reason);
      throw failed.reason;
    }
  });
  // `done` is also reported through onError, so an app that never awaits it does not crash on it.
  done.catch(() => {});
  return {
    done,
    stop() {
      stop();
      return done;
    },
    get running() {
      return running;
    },
  };
}
