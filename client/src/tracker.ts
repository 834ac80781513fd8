/**
 * Batched event logging (`analytics.track`). Events wait in memory and go
 * out in batches: as soon as `batchSize` are waiting, or `flushIntervalMs`
 * after the first one arrived, whichever comes first, and on `flush()` and
 * `close()`. A batch never holds more than the service takes in one call.
 *
 * Each event's `at` is taken when it is tracked, so buffering does not move
 * it in time. A refused call spends nothing, so one bad event never costs
 * the good ones of its batch: the 400's `details` name the bad events by
 * index (`events[3].type: ...`), those are dropped and the rest sent again.
 * At the daily cap the tracker sends exactly what is left (the last answer's
 * `remainingToday`, or the 429's "N of CAP left today"; halving the batch when
 * neither says) and then drops later batches without a call, instead of
 * spending a refused call per batch, but only for `capRecheckMs` (60 s): then
 * the next batch is sent and the service's answer decides, so a cap raised
 * by an operator is seen within a minute, not at the next UTC midnight (the
 * 429's `Retry-After`). Every batch carries an `Idempotency-Key`, so a batch
 * whose answer was lost is sent again safely (the service answers the first
 * result without storing it twice).
 *
 * A batch that cannot be delivered for longer than the transport's retry
 * budget (30 s of network errors, 502, 503, 504 or 409
 * `idempotency_key_in_use`: the service down, its database failing over) is
 * not dropped: it is kept, with the events behind it, and sent again first,
 * in order, under the same key (its first attempt may have been stored and
 * only the answer lost), `flushIntervalMs` after each failed attempt, even if
 * nothing new is tracked. Kept events count toward `maxBuffer`: past it the
 * oldest go (`buffer_full`; a batch already sent goes whole, as its key is
 * only good for exactly its events). `close()` tries once more and drops what
 * still cannot be delivered (`error`): a closing process cannot wait for ever.
 * Other failures (401, 403, 404, 500...) are dropped (`error`) at once.
 *
 * Drops are reported to `onDrop` once per batch and reason, and counted in
 * `flush()`'s answer; nothing is thrown from a timer.
 */
import { PlatformError } from "./platform-error.ts";
import {
  MAX_EVENTS_PER_CALL,
  type AnalyticsEvent,
  type LogEventsResponse,
  type PropertyValue,
  type TimeInput,
  type TrackOptions,
} from "./types.ts";

export type DropReason =
  /** The app's daily event cap is spent (429 `quota_exceeded`, or the last answer's `remainingToday` was 0). */
  | "daily_cap"
  /** The service refused these events (400: an unregistered type, an undeclared property...). */
  | "rejected"
  /**
   * The service failed (401, 403, 404, 500...); or, on `close()`, it still could not be reached (network
   * errors, 502, 503, 504, 409 `idempotency_key_in_use` after the retries). Before `close()` such a batch
   * is kept and sent again instead.
   */
  | "error"
  /** More than `maxBuffer` events were waiting (those kept for a retry included); the oldest were dropped. */
  | "buffer_full"
  /** Tracked after `close()`. */
  | "closed"
  /** The event carried a property its type does not declare, and `undeclaredProperties` is `"drop-event"`. */
  | "undeclared";

export interface DropInfo {
  reason: DropReason;
  events: AnalyticsEvent[];
  error?: unknown;
}

/** The first time a type's events carried a property it does not declare (see `undeclaredProperties`). */
export interface UndeclaredInfo {
  type: string;
  property: string;
  /** What the tracker does with such events: sends them without the property, or drops them. */
  action: "drop-property" | "drop-event";
}

export interface SentInfo {
  /** Events in the call. */
  events: number;
  recorded: number;
  remainingToday: number;
}

export interface TrackerOptions {
  /** Events per call, 1 to 1000. Default 100. */
  batchSize?: number;
  /** Longest time an event waits before its batch is sent. Default 5000 ms. */
  flushIntervalMs?: number;
  /**
   * Most events kept waiting, those kept for a retry while the service cannot be reached included; beyond
   * it the oldest are dropped (`buffer_full`). Default 10000.
   */
  maxBuffer?: number;
  /** Called with every call the service took. */
  onSent?: (info: SentInfo) => void;
  /** Called once per batch and reason with the events dropped. Default: one `console.warn` line. */
  onDrop?: (info: DropInfo) => void;
  /**
   * Longest time the tracker trusts that the daily cap is spent (a 429, or
   * `remainingToday` in the last answer) and drops batches without a call.
   * After it the next batch is sent and the service's answer decides: the
   * cap may have been raised since (AdminService.UpdateApp), which the 429's
   * `Retry-After` (seconds to the next UTC midnight) cannot tell. At most one
   * refused call per interval. Default 60000 ms.
   */
  capRecheckMs?: number;
  /**
   * What to do with an event carrying a property its type does not declare, which the service refuses
   * whole. `"drop-property"` (the default) sends the event without that property: the event itself
   * (its count, its user, its place in a funnel) is still true and worth keeping, and only the one
   * value is lost, where dropping the whole event lost every count it was part of. `"drop-event"` drops
   * it (`onDrop` reason `undeclared`), for apps that would rather have no event than an incomplete one.
   * Either way each type and property is reported once, loudly (`onUndeclared`), and counted (`undeclared`).
   */
  undeclaredProperties?: "drop-property" | "drop-event";
  /**
   * Called once per type and property, the first time events carry it undeclared. Default: one
   * `console.error` line saying what is dropped and how to declare it.
   */
  onUndeclared?: (info: UndeclaredInfo) => void;
}

/**
 * What was stored and dropped since the previous `flush()` answered (or since the start). Events kept
 * for a retry (the service could not be reached) are neither: they are still `pending`.
 */
export interface FlushResult {
  /** Events the service stored. */
  recorded: number;
  /** Events dropped, whatever the reason (see `onDrop`). */
  dropped: number;
}

export interface Tracker {
  /** `at` is when (default now), or `{ at?, distinctId? }`: when and who. */
  track(type: string, properties?: Record<string, PropertyValue>, at?: TimeInput | TrackOptions): void;
  /** The `distinctId` of the events tracked from now on (`undefined`: none); a track's own overrides it. */
  identify(distinctId: string | undefined): void;
  /**
   * Sends what is waiting, in order, and answers once it is sent or the service could not be reached
   * (after the transport's retries): then the batch that failed and everything after it stay waiting
   * (`pending`) and are sent again `flushIntervalMs` later.
   */
  flush(): Promise<FlushResult>;
  /**
   * Flushes what is waiting (one more attempt, the transport's retries included) and stops: what still
   * cannot be delivered is dropped (`error`), and later `track` calls are dropped (`closed`).
   */
  close(): Promise<FlushResult>;
  /** Events waiting to be sent, those kept for a retry included. */
  readonly pending: number;
  /**
   * How many events carried each undeclared property, by type and property (`{ signup: { plan: 3 } }`),
   * since the start: sent without it (`drop-property`) or dropped (`drop-event`).
   */
  readonly undeclared: Record<string, Record<string, number>>;
}

/** Sends one batch; `key` is its idempotency key, the same for every retry of the same events. */
export type LogFn = (events: AnalyticsEvent[], key: string) => Promise<LogEventsResponse>;

/** Events to send in one call, and the idempotency key they were already sent under, if any. */
interface Piece {
  events: AnalyticsEvent[];
  /** Reused only for exactly these events: a piece cut or split sends its parts under new keys. */
  key?: string;
}

/**
 * A failure that says nothing about the events: the service or the way to it is down (no answer, 502,
 * 503, 504), or the first call under the key still runs (409). The piece is kept and sent again under its
 * key. A replayed error is the key's stored answer: the same key would get it again for ever.
 */
function unreachable(error: unknown): boolean {
  if (!(error instanceof PlatformError) || error.replayed) return false;
  // The app is past its rate limit: nothing was stored, and the batch fits again in a moment.
  if (error.code === "idempotency_key_in_use" || error.code === "rate_limited") return true;
  return error.status === 0 || error.status === 502 || error.status === 503 || error.status === 504;
}

/** `events[12].type: ...` → 12. */
const BAD_INDEX = /^events\[(\d+)\]/;
/** `events[3].properties.plan: is not declared by type "signup"` → 3, `plan` (JSON-escaped, as the service quotes it). */
const UNDECLARED = /^events\[(\d+)\]\.properties\.(.*): is not declared by type "/;

/** The property name of an UNDECLARED message, or undefined when it cannot be read back (cut short). */
function propertyName(escaped: string): string | undefined {
  try {
    return JSON.parse(`"${escaped}"`) as string;
  } catch {
    return undefined;
  }
}
/** The quota 429's detail: `events: 40 of 5000 left today, 100 needed`. */
const LEFT_TODAY = /(\d+) of \d+ left today/;

/** The UTC day of an instant: remainingToday is only good for the day it was said on. */
const utcDay = (ms: number) => Math.floor(ms / 86_400_000);

export function createTracker(log: LogFn, options: TrackerOptions = {}): Tracker {
  const batchSize = options.batchSize ?? 100;
  if (!Number.isInteger(batchSize) || batchSize < 1 || batchSize > MAX_EVENTS_PER_CALL) {
    throw new RangeError(
      `analytics.batchSize must be an integer from 1 to ${MAX_EVENTS_PER_CALL} (the service's maximum per call)`,
    );
  }
  const flushIntervalMs = options.flushIntervalMs ?? 5000;
  const maxBuffer = Math.max(batchSize, options.maxBuffer ?? 10_000);
  const capRecheckMs = options.capRecheckMs ?? 60_000;
  const onDrop =
    options.onDrop ??
    ((info: DropInfo) => {
      // Reported once per type and property, loudly, by onUndeclared; not again for every batch.
      if (info.reason === "undeclared") return;
      const why = info.error instanceof Error ? `: ${info.error.message}` : "";
      console.warn(`analytics: dropped ${info.events.length} events (${info.reason})${why}`);
    });
  const undeclaredMode = options.undeclaredProperties ?? "drop-property";
  if (undeclaredMode !== "drop-property" && undeclaredMode !== "drop-event")
    throw new RangeError('analytics.undeclaredProperties must be "drop-property" or "drop-event"');
  const onUndeclared =
    options.onUndeclared ??
    ((info: UndeclaredInfo) => {
      const what =
        info.action === "drop-property"
          ? `its events are sent without it`
          : `its events are dropped (undeclaredProperties: "drop-event")`;
      console.error(
        `analytics: event type ${JSON.stringify(info.type)} does not declare property ${JSON.stringify(info.property)}: ${what}; declare it (POST /v1/analytics/types) to keep it. Reported once; counted in analytics.undeclared.`,
      );
    });
  const undeclared: Record<string, Record<string, number>> = Object.create(null) as Record<
    string,
    Record<string, number>
  >;
  /** Counts one event carrying an undeclared property; the first of its type and property is reported. */
  function noteUndeclared(type: string, property: string): void {
    const counts = (undeclared[type] ??= Object.create(null) as Record<string, number>);
    const first = counts[property] === undefined;
    counts[property] = (counts[property] ?? 0) + 1;
    if (!first) return;
    try {
      onUndeclared({ type, property, action: undeclaredMode });
    } catch {
      // as in report()
    }
  }
  const buffer: AnalyticsEvent[] = [];
  /**
   * Pieces that could not be delivered (the service unreachable after the transport's retries), in
   * order, ahead of `buffer`: sent again first, each under its key, by the next drain.
   */
  const kept: Piece[] = [];
  /** Events in `kept`. */
  let keptCount = 0;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let closed: Promise<FlushResult> | undefined;
  /** Set by `close()`: a piece that cannot be delivered is then dropped, not kept. */
  let closing = false;
  /** Dropped from a full buffer since the last report: reported together, not one line per event. */
  let overflow: AnalyticsEvent[] = [];
  /**
   * What the service last said is left today (on which UTC day, and when), to
   * fill the cap exactly. Trusted for `capRecheckMs` only: an operator may
   * raise the cap meanwhile, and a stale 0 would drop what could be stored.
   */
  let remaining: { count: number; day: number; at: number } | undefined;
  /**
   * While the daily cap is spent: nothing is sent before this instant (epoch
   * ms). At most `capRecheckMs` ahead, not the 429's `Retry-After`, which
   * counts to midnight and knows nothing of a raised cap.
   */
  let cappedUntil = 0;
  /** Counts since the previous flush() answer. */
  const totals: FlushResult = { recorded: 0, dropped: 0 };
  let draining: Promise<void> | undefined;
  let batchNumber = 0;
  const session = randomId();
  /** The user set by `identify`, given to every event tracked without its own. */
  let identity: string | undefined;

  function report(info: DropInfo): void {
    if (info.events.length === 0) return;
    totals.dropped += info.events.length;
    try {
      onDrop(info);
    } catch {
      // A failing callback must not break the tracker (it runs from timers).
    }
  }

  function reportOverflow(): void {
    const events = overflow;
    overflow = [];
    report({ reason: "buffer_full", events });
  }

  function sent(events: number, res: LogEventsResponse): void {
    totals.recorded += res.recorded;
    const now = Date.now();
    remaining = { count: res.remainingToday, day: utcDay(now), at: now };
    try {
      options.onSent?.({ events, recorded: res.recorded, remainingToday: res.remainingToday });
    } catch {
      // as in report()
    }
  }

  /**
   * Sends one batch, dropping only what cannot be stored; never rejects.
   * Each piece sent gets its own idempotency key, reused by the transport's
   * retries of that piece, and by later sends of the same piece (`batch.key`).
   * Answers what could not be delivered (the service unreachable): the piece
   * that failed, under its key, and the rest of the batch, in order.
   */
  async function send(batch: Piece): Promise<{ left: Piece[]; error?: unknown }> {
    const id = `${session}-${++batchNumber}`;
    let piece = 0;
    const capDrops: AnalyticsEvent[] = [];
    let capError: unknown;
    const rejected: AnalyticsEvent[] = [];
    let rejectError: unknown;
    const undeclaredDrops: AnalyticsEvent[] = [];
    let undeclaredError: unknown;
    let undelivered: Piece[] = [];
    let unreachableError: unknown;
    // Pieces still to send, in order.
    const todo: Piece[] = [batch];
    while (todo.length > 0) {
      let { events, key } = todo.shift()!;
      const now = Date.now();
      if (now < cappedUntil) {
        capDrops.push(...events);
        continue;
      }
      if (
        remaining &&
        remaining.day === utcDay(now) &&
        now - remaining.at < capRecheckMs &&
        remaining.count < events.length &&
        // A piece already sent may have been stored (its answer lost): cut, its rest would go under a new
        // key and be stored twice. It goes whole under its key, and the service's answer decides.
        (key === undefined || remaining.count === 0)
      ) {
        // Fill what is left exactly; the rest cannot be stored today.
        capDrops.push(...events.slice(remaining.count));
        events = events.slice(0, remaining.count);
        if (events.length === 0) continue;
      }
      key ??= `${id}.${++piece}`;
      try {
        sent(events.length, await log(events, key));
      } catch (error) {
        if (error instanceof PlatformError && error.code === "quota_exceeded") {
          capError = error;
          // The cap state counts from the answer, like `remaining` after a 200.
          const at = Date.now();
          const until = at + Math.min((error.retryAfter ?? 60) * 1000, capRecheckMs);
          const left = Number(LEFT_TODAY.exec(error.details.join("\n"))?.[1] ?? NaN);
          if (Number.isFinite(left) && left < events.length) {
            remaining = { count: left, day: utcDay(at), at };
            if (left === 0) {
              cappedUntil = until;
              capDrops.push(...events);
            } else todo.unshift({ events: events.slice(0, left) }, { events: events.slice(left) });
          } else if (events.length > 1) {
            // The service did not say how much is left: halve until what fits is found.
            const half = Math.ceil(events.length / 2);
            todo.unshift({ events: events.slice(0, half) }, { events: events.slice(half) });
          } else {
            cappedUntil = until;
            capDrops.push(...events);
          }
          continue;
        }
        if (error instanceof PlatformError && error.status === 400) {
          const bad = new Set<number>();
          /** Events to send again without an undeclared property (`drop-property`), by index. */
          const strip = new Map<number, string>();
          const undeclaredEvents = new Set<number>();
          for (const d of error.details) {
            const u = UNDECLARED.exec(d);
            const i = Number(u?.[1] ?? BAD_INDEX.exec(d)?.[1] ?? NaN);
            if (!(i < events.length)) continue;
            const property = u ? propertyName(u[2]) : undefined;
            if (property !== undefined && Object.hasOwn(events[i].properties ?? {}, property)) {
              noteUndeclared(events[i].type, property);
              if (undeclaredMode === "drop-property") strip.set(i, property);
              else undeclaredEvents.add(i);
            } else bad.add(i);
          }
          if (bad.size > 0) rejectError = error;
          if (undeclaredEvents.size > 0) undeclaredError = error;
          if (bad.size === 0 && strip.size === 0 && undeclaredEvents.size === 0) {
            // Not about single events (e.g. the batch itself): nothing of it can be stored.
            rejectError = error;
            rejected.push(...events);
            continue;
          }
          const good: AnalyticsEvent[] = [];
          events.forEach((e, i) => {
            if (bad.has(i)) rejected.push(e);
            else if (undeclaredEvents.has(i)) undeclaredDrops.push(e);
            else if (strip.has(i)) {
              // A copy without the property: the service names one problem per event, so a second
              // undeclared property is named by the next answer.
              const properties = { ...e.properties };
              delete properties[strip.get(i)!];
              good.push({ ...e, properties });
            } else good.push(e);
          });
          // The service names at most 20 issues per answer: the next try names the next ones.
          if (good.length > 0) todo.unshift({ events: good });
          continue;
        }
        if (unreachable(error)) {
          // Nothing is wrong with the events: this piece (under the key it was sent with) and the rest
          // wait for the service, before anything newer.
          undelivered = [{ events, key }, ...todo];
          unreachableError = error;
          break;
        }
        report({
          reason: error instanceof PlatformError && error.status === 429 ? "daily_cap" : "error",
          events,
          error,
        });
      }
    }
    report({ reason: "rejected", events: rejected, error: rejectError });
    report({ reason: "undeclared", events: undeclaredDrops, error: undeclaredError });
    report({ reason: "daily_cap", events: capDrops, error: capError });
    return { left: undelivered, error: unreachableError };
  }

  /** The events beyond `maxBuffer` go to `overflow`, the oldest first (those kept for a retry). */
  function trim(): void {
    let excess = keptCount + buffer.length - maxBuffer;
    while (excess > 0 && kept.length > 0) {
      const first = kept[0];
      // A piece already sent goes whole: its key is good only for exactly its events.
      if (first.key !== undefined || first.events.length <= excess) {
        kept.shift();
        overflow.push(...first.events);
        keptCount -= first.events.length;
        excess -= first.events.length;
      } else {
        overflow.push(...first.events.splice(0, excess));
        keptCount -= excess;
        excess = 0;
      }
    }
    if (excess > 0) overflow.push(...buffer.splice(0, excess));
  }

  /** Sends what is waiting `flushIntervalMs` from now (the first event's wait, or the next retry). */
  function schedule(): void {
    if (timer !== undefined) return;
    timer = setTimeout(() => {
      timer = undefined;
      void drain();
    }, flushIntervalMs);
  }

  /**
   * One loop at a time sends batches (in order: those kept first) until
   * nothing is waiting, or until the service cannot be reached: then what is
   * left is kept and the loop is tried again `flushIntervalMs` later; when
   * closing, it is dropped instead.
   */
  function drain(): Promise<void> {
    if (overflow.length > 0 && !draining) reportOverflow();
    // Nothing to send: the loop below would end (and clear `draining`) before being stored.
    if (kept.length === 0 && buffer.length === 0) return draining ?? Promise.resolve();
    draining ??= (async () => {
      try {
        while (kept.length > 0 || buffer.length > 0) {
          let batch: Piece;
          if (kept.length > 0) {
            batch = kept.shift()!;
            keptCount -= batch.events.length;
          } else batch = { events: buffer.splice(0, batchSize) };
          const { left, error } = await send(batch);
          if (left.length > 0) {
            if (closing) {
              // A closing process cannot wait for the service: what is still waiting goes.
              const events = left.flatMap((p) => p.events);
              for (const p of kept) events.push(...p.events);
              events.push(...buffer.splice(0));
              kept.length = 0;
              keptCount = 0;
              report({ reason: "error", events, error });
            } else {
              kept.unshift(...left);
              for (const p of left) keptCount += p.events.length;
              trim();
            }
            if (overflow.length > 0) reportOverflow();
            break;
          }
          if (overflow.length > 0) reportOverflow();
        }
      } finally {
        draining = undefined;
        // The service could not be reached: try again later, even if nothing new is tracked.
        if (kept.length > 0 && !closing) schedule();
      }
    })();
    return draining;
  }

  async function flush(): Promise<FlushResult> {
    if (timer !== undefined) {
      clearTimeout(timer);
      timer = undefined;
    }
    await drain();
    if (overflow.length > 0) reportOverflow();
    const result = { ...totals };
    totals.recorded = 0;
    totals.dropped = 0;
    return result;
  }

  return {
    track(type, properties, third) {
      const options: TrackOptions = isTrackOptions(third) ? third : { at: third };
      const event: AnalyticsEvent = { type, at: toEpochMs(options.at ?? Date.now()) };
      const who = options.distinctId === undefined ? identity : (options.distinctId ?? undefined);
      if (who !== undefined) event.distinctId = who;
      // A copy: the batch leaves later, and the caller may change its object meanwhile (values are scalars).
      if (properties && Object.keys(properties).length > 0) event.properties = { ...properties };
      if (closing) return report({ reason: "closed", events: [event] });
      buffer.push(event);
      if (keptCount + buffer.length > maxBuffer) trim();
      // While batches are kept (the service unreachable), the retry timer sends: not every new batch.
      if (kept.length === 0 && buffer.length >= batchSize) void drain();
      else schedule();
    },
    identify(distinctId) {
      identity = distinctId;
    },
    flush,
    close() {
      // Set first: a loop running now drops what it cannot deliver instead of keeping it.
      closing = true;
      closed ??= flush();
      return closed;
    },
    get pending() {
      return keptCount + buffer.length;
    },
    get undeclared() {
      return structuredClone({ ...undeclared });
    },
  };
}

/** `{ at?, distinctId? }` rather than a time (a number, a string or a Date). */
function isTrackOptions(x: TimeInput | TrackOptions | undefined): x is TrackOptions {
  return typeof x === "object" && x !== null && !(x instanceof Date);
}

/** A random id (idempotency keys of this process's batches), from the platform's crypto where there is one. */
export function randomId(): string {
  const c = (globalThis as { crypto?: { randomUUID?: () => string } }).crypto;
  if (c?.randomUUID) return c.randomUUID();
  return `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}${Math.random().toString(36).slice(2)}`;
}

/** The service takes epoch ms or ISO strings ending in `Z`; a Date becomes epoch ms. */
export function toEpochMs(at: TimeInput): number | string {
  return at instanceof Date ? at.getTime() : at;
}
