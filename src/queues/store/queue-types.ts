/** The values the queue store takes and gives: messages, puts, policies, claim rules and dead letters. */

/** A message as a claim leased it. */
export interface StoredMessage {
  id: string;
  queue: string;
  payload: string;
  enqueuedAt: Date;
  expiresAt: Date;
  leaseExpiresAt: Date;
  deliveries: number;
  /** The message's leases in all its lives, this one included: the receipt's nonce. */
  claims: number;
  /** Set by a claim: `visible_at` before it, so a lease never handed out can be undone (`release`). */
  visibleBefore?: Date;
  /** Set by a claim: the put's `traceparent`, when the put was traced. */
  traceParent?: string;
  /** The ordered group it was put in, when it was. */
  groupKey?: string;
}

/** One UTC hour of a queue's activity (migration 0019). */
export interface QueueActivityHour {
  /** The start of the hour. */
  at: Date;
  puts: number;
  acks: number;
}

/** One queue of an app's listing. */
export interface QueueStats {
  name: string;
  depth: number;
  inFlight: number;
  oldestAt: Date | null;
  deadLetters: number;
}

/** One put (`putSerialized`, `putHere`; `putDroppingOldest` without `depthBelow`). */
export interface PutInput {
  appId: string;
  queue: string;
  payload: string;
  delaySeconds: number;
  ttlSeconds: number;
  /** 0 to 9, higher first among visible messages; 0 when absent. */
  priority?: number;
  /** The ordered group (docs/queues.md "Ordered groups"): delivered one at a time in put order within it. */
  groupKey?: string;
  /** Insert only while fewer than this many messages wait. */
  depthBelow: number;
  /** `instance|app|queue|visibleAtMs`, or undefined to send no notification. */
  notify: string | undefined;
  /** The put's `traceparent`, stored with the message (only when tracing is on). */
  traceParent?: string;
}

/** A message put. */
export interface PutDone {
  id: string;
  expiresAt: Date;
}

/** A put's answer: the message, or (refused by the depth limit) how many waited. */
export type PutResult = ({ inserted: true } & PutDone) | { inserted: false; depth: number };

/** One put of a batch (`putMany`): all of one app's queue. */
export interface PutItem {
  payload: string;
  delaySeconds: number;
  ttlSeconds: number;
  /** 0 to 9, higher first among visible messages; 0 when absent. */
  priority?: number;
  /** The ordered group, as `PutInput.groupKey`. */
  groupKey?: string;
  /** `instance|app|queue|visibleAtMs`, or undefined to send no notification. */
  notify: string | undefined;
  /** `putAll` only: a put of this key within the dedup window adds nothing (the first one's message answers). */
  dedupKey?: string;
  /** `putMany` only: the put's `traceparent`, stored with the message (only when tracing is on). */
  traceParent?: string;
}

/** One answer of `putAll`: the message put, or the first of its dedup key. */
export interface PutAllMessage {
  id: string;
  expiresAt: Date;
  deduplicated: boolean;
}

/** A queue policy as stored: null is "the default". */
export interface StoredPolicy {
  maxDeliveries: number | null;
  deadLetterQueue: string | null;
  retryDelaySeconds: number | null;
  retryBackoff: number | null;
  maxRetryDelaySeconds: number | null;
  retryJitter: number | null;
  leaseSeconds: number | null;
  dedupWindowSeconds: number | null;
  maxDeliveriesPerSecond: number | null;
}

/** A waiting message as a peek reads it, without leasing it. */
/** A page of a peek: `limit` waiting messages of one app's queue, after `after` (a peeked message's `position`) when given, payloads cut after `maxChars`. */
export interface PeekPage {
  appId: string;
  queue: string;
  limit: number;
  maxChars: number;
  after?: string;
}

export interface PeekedMessage {
  id: string;
  /** The payload's JSON text, cut after the asked length plus one (so a cut can be told). */
  payload: string;
  sizeBytes: number;
  enqueuedAt: Date;
  expiresAt: Date;
  deliveries: number;
  /** Where the message lies in the line (`visible_at|enqueued_at|id`, UTC to the microsecond): a peek continues after it. */
  position: string;
}

/** `ClaimRule.deadLetterQueue` for "dead messages are deleted". A reserved name: no queue of an app can have it. */
export const DROP_DEAD_LETTERS = "_drop";

/** The queue policy as a claim applies it (see `queue-policy.ts`). */
export interface ClaimRule {
  /** A lapsed message with this many deliveries dies instead of being leased; 0 is unlimited. */
  maxDeliveries: number;
  /** Where the dead go: null, the queue's dead-letter list; `DROP_DEAD_LETTERS`; or a queue of the app. */
  deadLetterQueue: string | null;
  /** The NOTIFY payload for a put on `deadLetterQueue` (a queue), to wake its consumers. */
  deadLetterNotify?: string;
  /** A dead letter (or a message moved to the dead-letter queue) is kept this long. */
  ttlSeconds: number;
  /**
   * After the n-th delivery lapses, the message is held back `min(maxDelay, delay * backoff^(n-1))` seconds,
   * less a random share of up to `jitter` of that (0: exactly that).
   */
  retry: { delaySeconds: number; backoff: number; maxDelaySeconds: number; jitter: number };
}

/** A dead letter as listed. */
export interface DeadLetter {
  /** Its place in the order of deaths: the listing's page key. */
  seq: string;
  id: string;
  /** The payload's JSON text, cut after the asked length plus one (so a cut can be told). */
  payload: string;
  sizeBytes: number;
  enqueuedAt: Date;
  deliveries: number;
  diedAt: Date;
  expiresAt: Date;
  /** Why its last delivery failed; null when none was recorded. */
  failureReason: string | null;
  /** The ordered group it was in; null when none. */
  groupKey: string | null;
}

/** Where a message of a queue is (`GET /v1/queues/{queue}/messages/{id}`). */
export interface MessageState {
  status: "waiting" | "delayed" | "leased" | "dead";
  id: string;
  queue: string;
  enqueuedAt: Date;
  expiresAt: Date;
  deliveries: number;
  /** Delayed: when it becomes visible. */
  visibleAt: Date | null;
  /** Leased: when the lease lapses. */
  leaseExpiresAt: Date | null;
  failureReason: string | null;
  /** Dead: when it died. */
  diedAt: Date | null;
  /** The ordered group the message is (or was) in; null when none. */
  groupKey: string | null;
}

/** Which dead letters of one app's queue: all of them, or those of these ids. */
export type DeadLetterSelection = { all: true } | { ids: string[] };

/** One consumer's share of a claim: its message, or when the line's next one becomes visible (null: none waits). */
export type ClaimResult = { message: StoredMessage } | { message?: undefined; nextVisibleAt: Date | null };
