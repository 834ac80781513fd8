/**
 * The request and response shapes of the `/v1` API (docs/api.md): the base fields, the
 * documented extensions (put `delaySeconds`/`ttlSeconds`, consume
 * `waitSeconds`/`leaseSeconds`, query `timezone`) and the shapes the service
 * documents beyond the base fields (queue listing entry,
 * consumed message, secrets listing entry, platform events). Kept by hand
 * (not generated) so that the package has no dependency and reads like the
 * documentation.
 */

/** Any JSON value: what a queue payload or event data may be. */
export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };

/**
 * What a value of type `T` must be to travel as JSON: `T` itself when it is
 * made of strings, numbers, booleans, null, arrays and plain objects
 * (interfaces included, unlike {@link JsonValue}, whose index signature an
 * interface does not have), `never` where it holds a function, a symbol, a
 * bigint or a `Date`-like class instance with methods... so `queues.put<P>`
 * takes any `P` that `work<P>` will get back.
 */
export type JsonCompatible<T> = T extends string | number | boolean | null
  ? T
  : T extends bigint | symbol | ((...args: never[]) => unknown)
    ? never
    : T extends readonly (infer U)[]
      ? readonly JsonCompatible<U>[]
      : T extends object
        ? {
            [K in keyof T]: K extends string
              ? JsonCompatible<T[K]> | (undefined extends T[K] ? undefined : never)
              : never;
          }
        : T extends undefined
          ? undefined
          : never;

/** Epoch milliseconds (an integer) or an ISO 8601 date-time ending in `Z`. */
export type TimeInput = number | string | Date;

// ---- Meta ----------------------------------------------------------------

export interface HealthResponse {
  status: "ok";
}

export interface VersionResponse {
  name: string;
  version: string;
}

// ---- Analytics -----------------------------------------------------------

/** The declared kind of an event property. */
export type PropertyKind = "string" | "number" | "boolean";

/** A property value as logged; it is stored as a string. */
export type PropertyValue = string | number | boolean;

export interface RegisterTypeRequest {
  /** Name pattern `^[a-z][a-z0-9_.-]{0,62}$`. */
  name: string;
  /** Property name (name pattern) to its kind. Registering again replaces the declared properties. */
  properties?: Record<string, PropertyKind>;
}

export interface EventType {
  name: string;
  properties: Record<string, PropertyKind>;
  /** Epoch ms. */
  createdAt: number;
  /** Epoch ms. */
  updatedAt: number;
}

export interface ListTypesResponse {
  types: EventType[];
}

export interface AnalyticsEvent {
  /** A registered event type. */
  type: string;
  /** When it happened; left out means now. At most 24 h in the future. */
  at?: TimeInput;
  /** Only properties the type declares, with values of the declared kind. */
  properties?: Record<string, PropertyValue>;
  /** Who did it (a user id, 1 to 200 characters): what unique users and funnels count. */
  distinctId?: string;
}

/** The third argument of `analytics.track`: when, and who (overriding the tracker's `identify`). */
export interface TrackOptions {
  at?: TimeInput;
  /** This event's user; `null` sends it without one even after `identify`. */
  distinctId?: string | null;
}

export interface LogEventsRequest {
  /** 1 to {@link MAX_EVENTS_PER_CALL} events. */
  events: AnalyticsEvent[];
}

export interface LogEventsResponse {
  recorded: number;
  remainingToday: number;
}

export type Interval = "hour" | "day" | "week" | "month";

export interface QueryRequest {
  type: string;
  /** Start, inclusive. */
  since: TimeInput;
  /** End, exclusive; left out means now. */
  until?: TimeInput;
  /** Default `day`. At most 1000 buckets between `since` and `until`. */
  interval?: Interval;
  /** A property the type declared; buckets are split by its value. */
  groupBy?: string;
  /** Extension: an IANA zone (e.g. `Europe/Paris`) for day, week and month buckets; default UTC. */
  timezone?: string;
}

export interface QueryBucket {
  /** Epoch ms at the start of the bucket. */
  at: number;
  /** The groupBy property's value; null without groupBy (or for events without that property). */
  group: string | null;
  count: number;
}

export interface QueryResponse {
  type: string;
  interval: Interval;
  since: number;
  until: number;
  groupBy: string | null;
  buckets: QueryBucket[];
  total: number;
}

/** A condition of `where` (extension): `value` of the property's declared kind; a list for `in`; a boolean for `exists`. */
export type Condition =
  | { property: string; op: "eq" | "neq"; value: PropertyValue }
  | { property: string; op: "in"; value: PropertyValue[] }
  | { property: string; op: "contains"; value: string }
  | { property: string; op: "gt" | "gte" | "lt" | "lte"; value: number }
  | { property: string; op: "exists"; value?: boolean };

export type AggregateName = "count" | "unique" | "sum" | "avg" | "min" | "max";

/** `analytics.aggregate`: a query with the extensions (docs/analytics.md "Aggregations, filters and breakdowns"). */
export interface AggregateRequest extends Omit<QueryRequest, "groupBy"> {
  /** Default `count`. */
  aggregate?: AggregateName;
  /** `unique`: a property (distinct values) or `distinctId` (default); sum/avg/min/max: a number property. */
  of?: string;
  /** Up to 10 conditions on declared properties or `distinctId`, all of which must hold. */
  where?: Condition[];
  /** One property, or a list of at most two. */
  groupBy?: string | [string] | [string, string];
  /** Most groups answered (1 to 500; default 50 with a list); the rest are folded into buckets marked `other`. */
  limit?: number;
}

export interface AggregateBucket {
  at: number;
  /** With `groupBy` a property (or none). */
  group?: string | null;
  /** With `groupBy` a list: each property's value. */
  groups?: (string | null)[];
  /** Events counted. */
  count: number;
  /** The aggregate over the bucket. */
  value: number;
  /** The groups beyond `limit`, folded together. */
  other: boolean;
}

export interface AggregateResponse {
  type: string;
  interval: Interval;
  since: number;
  until: number;
  groupBy: string | string[] | null;
  aggregate: AggregateName;
  of: string | null;
  limit: number | null;
  buckets: AggregateBucket[];
  /** The aggregate over the whole range (unique over the range, not a sum); null for avg/min/max of no event. */
  total: number | null;
  /** Events counted. */
  count: number;
  /** Groups folded into the buckets marked `other`. */
  otherGroups: number;
}

/** `analytics.funnel` (extension): users who did the steps in order within a window. */
export interface FunnelRequest {
  /** 2 to 8 steps: a registered type, and conditions its events meet. */
  steps: { type: string; where?: Condition[] }[];
  /** First steps in [since, until) start a conversion. */
  since: TimeInput;
  until?: TimeInput;
  /** From the first step to the last; default 604800 (7 days), at most 90 days. */
  windowSeconds?: number;
  /** A property of the first step's type. */
  breakdown?: string;
  /** Most groups (1 to 500, default 50); the rest are folded into one marked `other`. */
  limit?: number;
}

export interface FunnelStepResult {
  type: string;
  /** Distinct users (distinctIds) who reached the step in order within the window. */
  users: number;
  conversionFromFirst: number;
  conversionFromPrevious: number;
  /** Null for the first step and for a step nobody reached. */
  medianSecondsFromPrevious: number | null;
}

export interface FunnelResponse {
  steps: FunnelStepResult[];
  since: number;
  until: number;
  windowSeconds: number;
  breakdown: string | null;
  groups: { group: string | null; other: boolean; steps: FunnelStepResult[] }[];
  otherGroups: number;
}

// ---- Mail ----------------------------------------------------------------

export interface SendMailRequest {
  to: string;
  /** 1 to 200 characters, no line breaks. */
  subject: string;
  /** 1 to 100000 characters. */
  text: string;
}

export interface SendMailResponse {
  sent: true;
  /** The app's platform-assigned sender address. */
  from: string;
  remainingToday: number;
}

// ---- Inference -----------------------------------------------------------

export type ModelName = "platform/fast" | "platform/embed" | (string & {});

export interface Model {
  name: ModelName;
  kind: "generate" | "embed";
  tokensPerDay: number;
  remainingToday: number;
}

export interface ListModelsResponse {
  models: Model[];
}

export interface ChatMessage {
  role: "system" | "user" | "assistant";
  content: string;
}

interface GenerateCommon {
  /** Default `platform/fast`. */
  model?: ModelName;
  /** Ceiling on the answer's length (default 1024, clamped to 4096). */
  maxTokens?: number;
  /** 0 to 2, default 0.7. */
  temperature?: number;
}

/** Exactly one of `prompt` and `messages`. */
export type GenerateRequest =
  | (GenerateCommon & { prompt: string; messages?: never })
  | (GenerateCommon & { messages: ChatMessage[]; prompt?: never });

export interface GenerateResponse {
  text: string;
  model: string;
  /** `length`: the answer hit maxTokens and is cut off. */
  finishReason: "stop" | "length" | "other";
  usage: { inputTokens: number; outputTokens: number };
  remainingToday: number;
}

export interface EmbedRequest {
  /** Default `platform/embed`. */
  model?: ModelName;
  /** One string or 1 to 96 strings. */
  input: string | string[];
}

export interface EmbedResponse {
  /** One vector per input, in the order sent. */
  embeddings: number[][];
  model: string;
  /** Length of each vector; read it, it changes when the model behind the name does. */
  dimensions: number;
  usage: { tokens: number };
  remainingToday: number;
}

// ---- Queues --------------------------------------------------------------

export interface QueueInfo {
  name: string;
  /** Waiting messages (not leased). */
  depth: number;
  /** Leased messages not yet acknowledged. */
  inFlight: number;
  maxDepth: number;
  /** Epoch ms of the oldest waiting message, or null. */
  oldestAt: number | null;
  /**
   * Messages that reached the app's `maxDeliveries` and wait for the operator
   * (replay or purge); not counted in `depth`. Optional: an addition to the
   * base listing entry (docs/queues.md#dead-letters).
   */
  deadLetters?: number;
}

export interface ListQueuesResponse {
  queues: QueueInfo[];
}

export interface PutOptions {
  /** Extension: the message becomes visible this many seconds after the put. */
  delaySeconds?: number;
  /** Extension: lifetime in seconds (default and maximum: the app's message lifetime, 4 days). */
  ttlSeconds?: number;
  /**
   * Extension: 1 to 128 characters. A put whose `dedupKey` was used on this
   * queue within the queue's dedup window (default 5 minutes) adds nothing and
   * answers the first message's id with `deduplicated: true`.
   */
  dedupKey?: string;
  /**
   * Extension: 0 to 9 (default 0). Among the queue's visible messages, higher priorities are delivered
   * first; within one, the oldest first.
   */
  priority?: number;
  /**
   * Extension: the message's ordered group, 1 to 128 characters without control characters. A group's
   * messages are delivered one at a time in put order: the next is not visible while one before it is
   * leased, held back for a retry or delayed; a dead letter releases the group. Other groups and
   * ungrouped messages flow on; within a group put order wins over `priority`.
   */
  groupKey?: string;
  /**
   * The `Idempotency-Key` header (1 to 255 printable ASCII): a repeat within
   * 24 h with the same key and body returns the first answer. With one, a put
   * is retried like a read (see README, "Retries"). Default: a new random key
   * per call, kept across its retries; `false` sends none.
   */
  idempotencyKey?: string | false;
}

export interface PutResponse {
  id: string;
  queue: string;
  /** Epoch ms when the message is dropped if nobody has consumed it. */
  expiresAt: number;
  /** True when a put with the same `dedupKey` came first: nothing was added and `id` is the first message's. */
  deduplicated?: boolean;
}

/** One message of a batch put. */
export interface BatchPutMessage<P = JsonValue> {
  payload: P;
  delaySeconds?: number;
  ttlSeconds?: number;
  dedupKey?: string;
  /** 0 to 9, as `PutOptions.priority`. */
  priority?: number;
  /** The ordered group, as `PutOptions.groupKey`. */
  groupKey?: string;
}

export interface BatchPutResponse {
  queue: string;
  /** One per message sent, in order. */
  messages: { id: string; expiresAt: number; deduplicated: boolean }[];
}

export interface ExtendResponse {
  /** False when the receipt no longer holds the lease (it lapsed, or the message was acked). */
  extended: boolean;
  /** Epoch ms of the new lease's end; null when not extended. */
  leaseExpiresAt: number | null;
}

export interface NackResponse {
  /** False when the receipt no longer held the lease. */
  nacked: boolean;
}

export interface NackOptions {
  /** 0 to 43200 s before the message may be delivered again. Default: the queue policy's retry delay and backoff. */
  delaySeconds?: number;
  /** Why the delivery failed, up to 1,000 characters: kept on the message and shown on its dead letter. */
  reason?: string;
}

export interface PurgeOptions {
  /** Also delete the leased messages (their receipts then ack false). Default false: waiting (and delayed) only. */
  includeLeased?: boolean;
}

export interface PurgeResponse {
  /** Messages deleted. */
  purged: number;
}

/** A schedule to set (`PUT /v1/queues/{queue}/schedules/{name}`): each tick of `cron` puts one message. */
export interface ScheduleSpec {
  /** Five fields, or six with seconds first; ticks at least 1 s apart. */
  cron: string;
  /** An IANA time zone such as `Europe/Berlin`; `UTC` by default. */
  timezone?: string;
  payload: JsonValue;
  /** Epoch ms: no tick before. */
  startAt?: number;
  /** Epoch ms: no tick after. */
  endAt?: number;
  /** After downtime: `none` (default) skips the missed ticks, `one` puts one message for them. */
  catchUp?: "none" | "one";
}

/** A queue's schedule as the service answers it. */
export interface QueueSchedule {
  queue: string;
  name: string;
  cron: string;
  timezone: string;
  payload: JsonValue;
  startAt: number | null;
  endAt: number | null;
  catchUp: "none" | "one";
  /** Epoch ms of the next tick; null once past `endAt`. */
  nextRunAt: number | null;
  lastRunAt: number | null;
  /** Ticks put. */
  fired: number;
  /** Ticks not put because the queue was at its depth cap. */
  skippedFull: number;
  /** Ticks that passed while the app was stopped or no instance ran. */
  missed: number;
}

/** Where a message is (`GET /v1/queues/{queue}/messages/{id}`). */
export interface MessageState {
  id: string;
  queue: string;
  /** `waiting`: visible now; `delayed`: at `visibleAt`; `leased`: until `leaseExpiresAt`; `dead`: a dead letter. */
  status: "waiting" | "delayed" | "leased" | "dead";
  enqueuedAt: number;
  /** When it is dropped (a dead letter: deleted) unless consumed (replayed) first. */
  expiresAt: number;
  deliveries: number;
  visibleAt: number | null;
  leaseExpiresAt: number | null;
  /** Why its last delivery failed: a nack's `reason`, or `lease expired`; null when none failed. */
  failureReason: string | null;
  diedAt: number | null;
  /** The ordered group it is (or, dead, was) in; null when none. */
  groupKey: string | null;
}

/** A queue's retry policy, owned by the app (bounded by the operator's limits). */
export interface QueuePolicy {
  queue: string;
  /** Deliveries before a message is dead-lettered or dropped; 0 = unlimited. */
  maxDeliveries: number;
  /** Where messages past maxDeliveries go: null the queue's dead-letter list, `_drop` deleted, a name that queue of the app. */
  deadLetterQueue: string | null;
  /** Hold before a nacked or lapsed message is delivered again (the first retry). */
  retryDelaySeconds: number;
  /** Each further retry's hold is the previous one times this. */
  retryBackoff: number;
  maxRetryDelaySeconds: number;
  /** 0 to 1: each hold is drawn from [hold × (1 − retryJitter), hold] (default 0.5, or 0 when `retryDelaySeconds` is set). */
  retryJitter: number;
  /** The lease when a consume names none. */
  leaseSeconds: number;
  /** How long a put's `dedupKey` keeps a second message with that key off the queue. */
  dedupWindowSeconds: number;
  /**
   * At most this many of the queue's messages handed out a second, across all consumers and instances; a consume
   * beyond it waits (up to its `waitSeconds`) instead of failing. 0 = no limit (a change of 0 or null removes it).
   */
  maxDeliveriesPerSecond: number;
}

/** A change of policy: the fields given replace those fields (`deadLetterQueue: null` sets the list back). */
export type QueuePolicyChange = Partial<Omit<QueuePolicy, "queue" | "maxDeliveriesPerSecond">> & {
  maxDeliveriesPerSecond?: number | null;
};

export interface ConsumeOptions {
  /** Extension: how long to wait for a message, 0 to 25 seconds (default 25). */
  waitSeconds?: number;
  /** Extension: how long the lease lasts, 1 to 43200 seconds (default: the app's lease, 30 s). */
  leaseSeconds?: number;
}

/** A leased message. Ack it with its `receipt` once the work is done. */
export interface QueueMessage<P = JsonValue> {
  id: string;
  queue: string;
  payload: P;
  /** Opaque, new on every delivery; only the current lease's receipt acks. */
  receipt: string;
  enqueuedAt: number;
  expiresAt: number;
  /** Epoch ms when the lease lapses and the message goes back on the queue. */
  leaseExpiresAt: number;
  /** Deliveries including this one (2 or more: an earlier lease lapsed). */
  deliveries: number;
  /** Extension: the ordered group it was put in (`PutOptions.groupKey`); absent when none. */
  groupKey?: string;
}

export interface ConsumeResponse<P = JsonValue> {
  message: QueueMessage<P> | null;
}

export interface AckResponse {
  /** False when the lease had already lapsed and the message went back on the queue (not an error). */
  acked: boolean;
}

/** A platform event as delivered on the `_events` queue (and, with a `cursor`, on the events feed). */
export interface PlatformEvent<D = JsonValue> {
  /** e.g. `secret.set`. */
  kind: string;
  /** Epoch ms. */
  at: number;
  data: D;
  /** Where this event sits in the events feed (absent on events taken from the `_events` queue). */
  cursor?: string;
}

/** `GET /v1/queues/_events/feed`: the events after a cursor, for every reader alike. */
export interface EventFeedResponse {
  events: (PlatformEvent & { cursor: string })[];
  /** Where to continue from. */
  cursor: string;
}

/** Data of the `secret.set` platform event. */
export interface SecretSetData {
  name: string;
  version: number;
}

// ---- Secrets -------------------------------------------------------------

export interface SecretInfo {
  name: string;
  set: boolean;
  /** Null while unset. */
  version: number | null;
  /** Epoch ms, null while unset. */
  setAt: number | null;
}

export interface ListSecretsResponse {
  secrets: SecretInfo[];
}

export interface Secret {
  name: string;
  value: string;
  version: number;
  setAt: number;
}

export interface SecretLink {
  /** Hand it to whoever holds the credential: it sets this secret once and never shows the value. */
  url: string;
  name: string;
  expiresAt: number;
}

/** The service's maximum number of events in one log call. */
export const MAX_EVENTS_PER_CALL = 1000;

/** The reserved queue on which the platform delivers its own events. */
export const EVENTS_QUEUE = "_events";
