/**
 * Batched event logging (`analytics.track`). Events wait in memory and go
 * out in batches: as soon as `batchSize` are waiting, or `flushIntervalMs`
 * after the first one arrived, whichever comes first, and on `flush()` and
 * `close()`. A batch never holds more than the service takes in one call.
 *
 * Each event's `at` is taken when it is tracked, so buffering does not move
 * it in time. Logging spends the daily allowance, so a failed batch is never
 * retried: it is reported to `onDrop` (with the reason, e.g. `daily_cap`),
 * never thrown from a timer.
 */
import { PlatformError } from "./platform-error.ts";
import {
  MAX_EVENTS_PER_CALL,
  type AnalyticsEvent,
  type LogEventsResponse,
  type PropertyValue,
  type TimeInput,
} from "./types.ts";

export type DropReason =
  /** The app's daily event cap is spent (429 `quota_exceeded`). */
  | "daily_cap"
  /** The service refused the batch (400: an unregistered type, an undeclared property...). */
  | "rejected"
  /** Anything else: the service could not be reached, or failed (the batch may or may not have been stored). */
  | "error"
  /** More than `maxBuffer` events were waiting; the oldest were dropped. */
  | "buffer_full"
  /** Tracked after `close()`. */
  | "closed";

export interface DropInfo {
  reason: DropReason;
  events: AnalyticsEvent[];
  error?: unknown;
}

export interface SentInfo {
  /** Events in the batch. */
  events: number;
  recorded: number;
  remainingToday: number;
}

export interface TrackerOptions {
  /** Events per call, 1 to 1000. Default 100. */
  batchSize?: number;
  /** Longest time an event waits before its batch is sent. Default 5000 ms. */
  flushIntervalMs?: number;
  /** Most events kept waiting; beyond it the oldest are dropped (`buffer_full`). Default 10000. */
  maxBuffer?: number;
  /** Called with every batch the service took. */
  onSent?: (info: SentInfo) => void;
  /** Called with every batch that was dropped. Default: a `console.warn` line. */
  onDrop?: (info: DropInfo) => void;
}

/** What was sent and dropped while a flush waited (batches already under way included). */
export interface FlushResult {
  /** Events the service stored. */
  recorded: number;
  /** Events dropped (see `onDrop` for why). */
  dropped: number;
}

export interface Tracker {
  track(type: string, properties?: Record<string, PropertyValue>, at?: TimeInput): void;
  flush(): Promise<FlushResult>;
  /** Flushes what is waiting and stops; later `track` calls are dropped (`closed`). */
  close(): Promise<FlushResult>;
  /** Events waiting to be sent. */
  readonly pending: number;
}

export function createTracker(
  log: (events: AnalyticsEvent[]) => Promise<LogEventsResponse>,
  options: TrackerOptions = {},
): Tracker {
  const batchSize = options.batchSize ?? 100;
  if (!Number.isInteger(batchSize) || batchSize < 1 || batchSize > MAX_EVENTS_PER_CALL) {
    throw new RangeError(
      `analytics.batchSize must be an integer from 1 to ${MAX_EVENTS_PER_CALL} (the service's maximum per call)`,
    );
  }
  const flushIntervalMs = options.flushIntervalMs ?? 5000;
  const maxBuffer = Math.max(batchSize, options.maxBuffer ?? 10_000);
  const onDrop =
    options.onDrop ??
    ((info: DropInfo) =>
      console.warn(`analytics: dropped ${info.events.length} events (${info.reason})`, info.error ?? ""));
  const buffer: AnalyticsEvent[] = [];
  let timer: ReturnType<typeof setTimeout> | undefined;
  let closed: Promise<FlushResult> | undefined;

  function report(info: DropInfo): void {
    try {
      onDrop(info);
    } catch {
      // A failing callback must not break the tracker (it runs from timers).
    }
  }

  const totals: FlushResult = { recorded: 0, dropped: 0 };
  let draining: Promise<void> | undefined;

  /** Sends one batch; never rejects (a refused batch goes to onDrop). */
  async function send(batch: AnalyticsEvent[]): Promise<void> {
    try {
      const res = await log(batch);
      totals.recorded += res.recorded;
      try {
        options.onSent?.({ events: batch.length, recorded: res.recorded, remainingToday: res.remainingToday });
      } catch {
        // as in report()
      }
    } catch (error) {
      totals.dropped += batch.length;
      const reason: DropReason =
        error instanceof PlatformError && error.code === "quota_exceeded"
          ? "daily_cap"
          : error instanceof PlatformError && error.status >= 400 && error.status < 500
            ? "rejected"
            : "error";
      report({ reason, events: batch, error });
    }
  }

  /** One loop at a time sends batches (in order) until nothing is waiting. */
  function drain(): Promise<void> {
    // Nothing to send: the loop below would end (and clear `draining`) before being stored.
    if (buffer.length === 0) return draining ?? Promise.resolve();
    draining ??= (async () => {
      try {
        while (buffer.length > 0) await send(buffer.splice(0, batchSize));
      } finally {
        draining = undefined;
      }
    })();
    return draining;
  }

  async function flush(): Promise<FlushResult> {
    if (timer !== undefined) {
      clearTimeout(timer);
      timer = undefined;
    }
    const before = { ...totals };
    await drain();
    return { recorded: totals.recorded - before.recorded, dropped: totals.dropped - before.dropped };
  }

  return {
    track(type, properties, at) {
      const event: AnalyticsEvent = { type, at: toEpochMs(at ?? Date.now()) };
      if (properties && Object.keys(properties).length > 0) event.properties = properties;
      if (closed) return report({ reason: "closed", events: [event] });
      buffer.push(event);
      if (buffer.length > maxBuffer)
        report({ reason: "buffer_full", events: buffer.splice(0, buffer.length - maxBuffer) });
      if (buffer.length >= batchSize) {
        void drain();
      } else if (timer === undefined) {
        timer = setTimeout(() => void flush(), flushIntervalMs);
      }
    },
    flush,
    close() {
      closed ??= flush();
      return closed;
    },
    get pending() {
      return buffer.length;
    },
  };
}

/** The service takes epoch ms or ISO strings ending in `Z`; a Date becomes epoch ms. */
export function toEpochMs(at: TimeInput): number | string {
  return at instanceof Date ? at.getTime() : at;
}
