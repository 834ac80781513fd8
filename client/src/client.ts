/**
 * `createClient`: one object with a typed method for every `/v1` operation,
 * plus the pieces every app would otherwise write by hand: the consume loop
 * (`queues.work`), platform events (`events.on`), batched analytics
 * (`analytics.track`) and cached secrets (`secrets.get`).
 *
 * It needs nothing but the platform's `fetch`, `AbortSignal` and
 * `setTimeout`, so the same code runs on Node 20+, Deno, Bun and edge
 * runtimes.
 */
import { PlatformError } from "./platform-error.ts";
import { createSecretCache, type SecretCacheOptions } from "./secret-cache.ts";
import { createTracker, randomId, toEpochMs, type FlushResult, type Tracker, type TrackerOptions } from "./tracker.ts";
import {
  backoff,
  createTransport,
  sleep,
  type CallOptions,
  type RequestSpec,
  type RetryInfo,
  type RetryOptions,
} from "./transport.ts";
import {
  isUnsupported,
  createDailyCaps,
  startWorker,
  type HandlerContext,
  type MessageHandler,
  type WorkOptions,
  type Worker,
} from "./worker.ts";
import {
  EVENTS_QUEUE,
  type AckResponse,
  type BatchPutMessage,
  type BatchPutResponse,
  type EventFeedResponse,
  type ExtendResponse,
  type JsonCompatible,
  type MessageState,
  type QueueSchedule,
  type ScheduleSpec,
  type NackOptions,
  type PurgeOptions,
  type PurgeResponse,
  type NackResponse,
  type QueuePolicy,
  type QueuePolicyChange,
  type AnalyticsEvent,
  type ConsumeOptions,
  type ConsumeResponse,
  type EmbedRequest,
  type EmbedResponse,
  type EventType,
  type GenerateRequest,
  type GenerateResponse,
  type HealthResponse,
  type JsonValue,
  type ListModelsResponse,
  type ListQueuesResponse,
  type ListSecretsResponse,
  type ListTypesResponse,
  type LogEventsResponse,
  type PlatformEvent,
  type PropertyValue,
  type PutOptions,
  type PutResponse,
  type QueryRequest,
  type QueryResponse,
  type QueueMessage,
  type RegisterTypeRequest,
  type Secret,
  type SecretLink,
  type SecretSetData,
  type SendMailRequest,
  type SendMailResponse,
  type TimeInput,
  type TrackOptions,
  type AggregateRequest,
  type AggregateResponse,
  type FunnelRequest,
  type FunnelResponse,
  type VersionResponse,
} from "./types.ts";

export const URL_ENV = "PLATFORM_ANALYTICS_URL";
export const TOKEN_ENV = "PLATFORM_SERVICE_TOKEN";

export interface ClientOptions {
  /** The service's address. Default: the `PLATFORM_ANALYTICS_URL` environment variable. */
  baseUrl?: string;
  /** The app's service token. Default: the `PLATFORM_SERVICE_TOKEN` environment variable. */
  token?: string;
  /** The `fetch` to use. Default: the platform's `globalThis.fetch`. */
  fetch?: typeof globalThis.fetch;
  /**
   * Aborting it (e.g. at SIGTERM) shuts the client down like `close()`:
   * consuming stops at once, running handlers finish (their own calls keep
   * working) and are acked, analytics are flushed, and only then are the
   * calls still in flight aborted.
   */
  signal?: AbortSignal;
  /** How long a shutdown waits for running handlers before abandoning them (see `close`). Default 30000 ms. */
  shutdownTimeoutMs?: number;
  /** Retry policy of the safe operations (see README, "Retries"). */
  retry?: RetryOptions;
  /** Batching of `analytics.track`. */
  analytics?: TrackerOptions;
  /** Caching of `secrets.get`. */
  secrets?: SecretCacheOptions;
  /** Where errors of background work go (events dispatch, shutdown). Default: `console.error`. */
  onError?: (error: unknown) => void;
}

/** Called with each event; `message` is the `_events` queue message for `delivery: "one-replica"` subscriptions. */
export type EventHandler<D = JsonValue> = (
  event: PlatformEvent<D>,
  message?: QueueMessage<PlatformEvent<D>>,
) => unknown;

export interface EventsOptions {
  /** Lease per event of the one-replica loop. Default: the app's lease. */
  leaseSeconds?: number;
  /** Events handled at the same time by the one-replica loop. Default 1. */
  concurrency?: number;
  /**
   * How long an event of the `_events` queue that no one-replica handler of
   * this process handles waits before it may be delivered again (it is given
   * back, never acked). Default 5 s.
   */
  unhandledDelaySeconds?: number;
}

export interface SubscribeOptions {
  /**
   * `"every-replica"` (default): read from the events feed, which consumes
   * nothing; every process of the app sees every event. A handler that throws
   * is reported to `onError`; the event is not delivered again.
   * `"one-replica"`: consume the `_events` queue, so each event is handled by
   * one process only and acked once its handlers succeeded (at-least-once; a
   * failure gives it back). An event of a kind this process has no
   * one-replica handler for is given back, never acked, so give every
   * process that consumes `_events` the same one-replica subscriptions.
   */
  delivery?: "every-replica" | "one-replica";
}

/** What a shutdown did. */
export interface CloseResult {
  /** Messages whose handler was still running at the shutdown timeout: not acked, they come back after their lease. */
  abandoned: QueueMessage<unknown>[];
  /** The last analytics flush. */
  analytics: FlushResult;
}

export interface CloseOptions {
  /** How long running handlers may take to finish. Default: `shutdownTimeoutMs`. */
  timeoutMs?: number;
}

/** Options of calls that change state. */
export interface WriteOptions extends CallOptions {
  /**
   * Sent as the `Idempotency-Key` header (1 to 255 printable ASCII). A repeat
   * within 24 h with the same key and body answers the first result without
   * doing the work or spending allowance again, so the call is retried like a
   * read. Derive it from what makes the work unique (e.g. a job's id) to make
   * a redelivered job's mail safe too. Default: a new random key per call,
   * the same on each of its retries, so a lost answer (a dropped connection, a
   * 503 saying the change may have been made) is retried without doing the
   * work twice. `false` sends none: the call is then never repeated after an
   * answer that does not say whether it was done.
   */
  idempotencyKey?: string | false;
}

export interface WatchOptions {
  /** Called after a `secret.set` event was applied to the cache. */
  onChange?: (name: string, version: number) => void;
}

export interface PlatformClient {
  readonly baseUrl: string;
  /** `GET /health` (public). */
  health(options?: CallOptions): Promise<HealthResponse>;
  /** `GET /version` (public). */
  version(options?: CallOptions): Promise<VersionResponse>;

  analytics: {
    /** `POST /v1/analytics/types`: registers or replaces an event type. */
    registerType(request: RegisterTypeRequest, options?: CallOptions): Promise<EventType>;
    /** `GET /v1/analytics/types`. */
    listTypes(options?: CallOptions): Promise<EventType[]>;
    /** `POST /v1/analytics/events`: logs 1 to 1000 events now (retried only with an `idempotencyKey`). */
    log(events: AnalyticsEvent[], options?: WriteOptions): Promise<LogEventsResponse>;
    /** `POST /v1/analytics/query`: counts events in buckets. */
    query(request: QueryRequest, options?: CallOptions): Promise<QueryResponse>;
    /**
     * `POST /v1/analytics/query` with the extensions: unique users, sums and averages, `where`, two
     * breakdowns and `limit` (always answered in the extended shape: `aggregate` defaults to count).
     */
    aggregate(request: AggregateRequest, options?: CallOptions): Promise<AggregateResponse>;
    /** `POST /v1/analytics/funnel`: the users who did the steps in order within the window. */
    funnel(request: FunnelRequest, options?: CallOptions): Promise<FunnelResponse>;
    /** Buffers one event; it is sent in a batch (see `ClientOptions.analytics`). Never throws for the service's answer. */
    track(type: string, properties?: Record<string, PropertyValue>, at?: TimeInput | TrackOptions): void;
    /**
     * Sets the user of the events tracked from now on (their `distinctId`), or none with `undefined`;
     * `track`'s own `distinctId` overrides it for one event.
     */
    identify(distinctId: string | undefined): void;
    /** Sends every buffered event now; answers what was stored and dropped since the previous flush. */
    flush(): Promise<FlushResult>;
    /** Events buffered and not yet sent. */
    readonly pending: number;
    /** Events that carried an undeclared property, by type and property (see `undeclaredProperties`). */
    readonly undeclared: Record<string, Record<string, number>>;
  };

  mail: {
    /**
     * `POST /v1/mail/send` from the app's own address. Always sent with an
     * `Idempotency-Key` (yours, or a new one per call), so a lost answer is
     * retried without sending the mail twice.
     */
    send(request: SendMailRequest, options?: WriteOptions): Promise<SendMailResponse>;
  };

  inference: {
    /** `GET /v1/inference/models`. */
    models(options?: CallOptions): Promise<ListModelsResponse["models"]>;
    /** `POST /v1/inference/generate` (retried only with an `idempotencyKey`: it spends allowance). */
    generate(request: GenerateRequest, options?: WriteOptions): Promise<GenerateResponse>;
    /** `POST /v1/inference/embed` (retried only with an `idempotencyKey`: it spends allowance). */
    embed(request: EmbedRequest, options?: WriteOptions): Promise<EmbedResponse>;
  };

  queues: {
    /** `GET /v1/queues`: every queue with something on it. */
    list(options?: CallOptions): Promise<ListQueuesResponse["queues"]>;
    /**
     * `POST /v1/queues/{queue}`: puts one message. `P` is any JSON-compatible
     * type (interfaces too), the one `work<P>` gets back. Retried like a read
     * with an `idempotencyKey`; else only a 429, when `retry.on429`.
     */
    put<P = JsonValue>(
      queue: string,
      payload: P & JsonCompatible<P>,
      options?: PutOptions & CallOptions,
    ): Promise<PutResponse>;
    /** `POST /v1/queues/{queue}/batch`: puts 1 to 1000 messages, all or nothing. */
    putBatch<P = JsonValue>(
      queue: string,
      messages: BatchPutMessage<P & JsonCompatible<P>>[],
      options?: WriteOptions,
    ): Promise<BatchPutResponse>;
    /** `POST /v1/queues/{queue}/consume`: one leased message, or null after the wait. */
    consume<P = JsonValue>(queue: string, options?: ConsumeOptions & CallOptions): Promise<QueueMessage<P> | null>;
    /** `POST /v1/queues/{queue}/consume` with `{ max }` (1 to 100): the leased messages, maybe none after the wait. */
    consumeBatch<P = JsonValue>(
      queue: string,
      options: ConsumeOptions & CallOptions & { max: number },
    ): Promise<QueueMessage<P>[]>;
    /** `POST /v1/queues/_ack`: true if acked, false if the lease had lapsed (not an error). */
    ack(receipt: string, options?: CallOptions): Promise<boolean>;
    /** `POST /v1/queues/_extend`: sets the lease to end `leaseSeconds` from now; false if it had lapsed. */
    extend(receipt: string, leaseSeconds: number, options?: CallOptions): Promise<ExtendResponse>;
    /**
     * `POST /v1/queues/_nack`: gives a leased message back now, or after
     * `delaySeconds` (default: the queue policy's retry delay and backoff);
     * the delivery still counts toward the policy's max deliveries.
     */
    nack(receipt: string, options?: NackOptions & CallOptions): Promise<boolean>;
    /**
     * `POST /v1/queues/{queue}/purge`: deletes the waiting (and delayed) messages, the leased ones too with
     * `includeLeased`; dead letters stay. Safe to repeat.
     */
    purge(queue: string, options?: PurgeOptions & CallOptions): Promise<number>;
    /**
     * `GET /v1/queues/{queue}/messages/{id}`: where a message is (waiting, delayed, leased, dead), or null
     * once it was acked, purged or expired.
     */
    message(queue: string, id: string, options?: CallOptions): Promise<MessageState | null>;
    /** `GET /v1/queues/{queue}/policy`: max deliveries, dead letters, retry delay and backoff, lease, dedup window. */
    policy(queue: string, options?: CallOptions): Promise<QueuePolicy>;
    /** `PUT /v1/queues/{queue}/policy`: the fields given replace those fields; answers the whole policy. */
    setPolicy(queue: string, change: QueuePolicyChange, options?: CallOptions): Promise<QueuePolicy>;
    /** `PUT /v1/queues/{queue}/schedules/{name}`: creates or replaces a schedule; each tick puts one message. */
    schedule(queue: string, name: string, spec: ScheduleSpec, options?: CallOptions): Promise<QueueSchedule>;
    /** `GET /v1/queues/{queue}/schedules`: the queue's schedules, each with its next run. */
    schedules(queue: string, options?: CallOptions): Promise<QueueSchedule[]>;
    /** `DELETE /v1/queues/{queue}/schedules/{name}`: false when there was none. */
    unschedule(queue: string, name: string, options?: CallOptions): Promise<boolean>;
    /** Runs `handler` for every message of `queue` until stopped; see `WorkOptions`. */
    work<P = JsonValue>(queue: string, handler: MessageHandler<P>, options?: WorkOptions<P>): Worker<P>;
  };

  events: {
    /**
     * Calls `handler` for every platform event of `kind` (`"*"`: every kind).
     * By default from the events feed, which every replica reads on its own
     * and which consumes nothing; with `delivery: "one-replica"` from the
     * `_events` queue, one process per event (see `SubscribeOptions`). One
     * loop of each per client, started by the first subscription and stopped
     * after the last one leaves. Returns the unsubscribe.
     */
    on<D = JsonValue>(kind: string, handler: EventHandler<D>, options?: SubscribeOptions): () => void;
    /** Resolves once the feed loop reads from a cursor: every event after this moment reaches the feed handlers. */
    ready(): Promise<void>;
    /** Options of the one-replica loop; takes effect when it next starts. */
    configure(options: EventsOptions): void;
    /** Stops the events loops (after the running handlers) and drops every subscription. */
    stop(): Promise<void>;
  };

  secrets: {
    /** `GET /v1/secrets`: names and status, never values. */
    list(options?: CallOptions): Promise<ListSecretsResponse["secrets"]>;
    /**
     * `GET /v1/secrets/{name}`, cached in memory: refreshed when the listing's
     * `version` changes (checked after `secrets.maxAgeMs`) or when a
     * `secret.set` event arrives. `fresh: true` skips the cache.
     */
    get(name: string, options?: { fresh?: boolean }): Promise<Secret>;
    /**
     * `POST /v1/secrets/{name}/link`: a one-time link that sets this secret.
     * Retried like a read with an `idempotencyKey` (a repeat answers the same
     * link); else only a 429, when `retry.on429`.
     */
    createLink(name: string, options?: WriteOptions): Promise<SecretLink>;
    /**
     * Refreshes cached secrets as soon as a `secret.set` platform event
     * arrives, read from the events feed, so every replica learns of it (and
     * no `_events` message is consumed). Returns the unsubscribe.
     */
    watch(options?: WatchOptions): () => void;
  };

  /**
   * Shuts down safely, in this order: workers and the events loops stop
   * consuming; running handlers finish (their own calls keep working) and
   * are acked, for up to `timeoutMs` (`shutdownTimeoutMs`), after which the
   * ones still running are abandoned (their `context.signal` aborts; they are
   * named in the answer and reported to `onError`); analytics are flushed;
   * then the calls still in flight are aborted. Idempotent (later calls get
   * the same answer); also runs when the client's `signal` aborts.
   */
  close(options?: CloseOptions): Promise<CloseResult>;
}

/** The environment, where there is one (`process.env` on Node and Bun, `Deno.env` on Deno). */
function env(name: string): string | undefined {
  const g = globalThis as {
    process?: { env?: Record<string, string | undefined> };
    Deno?: { env?: { get(name: string): string | undefined } };
  };
  try {
    const fromProcess = g.process?.env?.[name];
    if (fromProcess !== undefined) return fromProcess;
    return g.Deno?.env?.get(name);
  } catch {
    // Deno without --allow-env, or a sandbox: no environment.
    return undefined;
  }
}

const enc = encodeURIComponent;

/** The Idempotency-Key a state-changing call sends: the caller's, none when `false`, else a new one (kept across its retries). */
const keyOf = (key: string | false | undefined): string | undefined =>
  key === false ? undefined : (key ?? randomId());

export function createClient(options: ClientOptions = {}): PlatformClient {
  const baseUrl = options.baseUrl ?? env(URL_ENV);
  const token = options.token ?? env(TOKEN_ENV);
  if (!baseUrl)
    throw new Error(`platform client: no service address: pass baseUrl or set the ${URL_ENV} environment variable`);
  if (!token)
    throw new Error(`platform client: no service token: pass token or set the ${TOKEN_ENV} environment variable`);
  try {
    new URL(baseUrl);
  } catch {
    throw new Error(`platform client: the service address is not a URL (baseUrl / ${URL_ENV})`);
  }
  const fetchImpl = options.fetch ?? globalThis.fetch?.bind(globalThis);
  if (typeof fetchImpl !== "function")
    throw new Error("platform client: this runtime has no fetch; pass one as options.fetch");
  const onError = options.onError ?? ((error: unknown) => console.error("platform client:", error));

  // Aborted at the very end of a shutdown: ends the calls still in flight (abandoned handlers' calls).
  const lifetime = new AbortController();
  // Aborted as a shutdown starts: workers and the events loops stop consuming.
  const closing = new AbortController();
  const shutdownTimeoutMs = options.shutdownTimeoutMs ?? 30_000;
  const transport = createTransport({
    baseUrl,
    token,
    fetch: fetchImpl,
    signal: lifetime.signal,
    retry: options.retry,
  });
  const call = <T>(spec: RequestSpec, o?: CallOptions) =>
    transport.request<T>(spec, o ? { signal: o.signal, retry: o.retry } : undefined);

  const consume = (queue: string, o: ConsumeOptions & CallOptions & { max?: number } = {}) => {
    const body: ConsumeOptions & { max?: number } = {};
    if (o.waitSeconds !== undefined) body.waitSeconds = o.waitSeconds;
    if (o.leaseSeconds !== undefined) body.leaseSeconds = o.leaseSeconds;
    if (o.max !== undefined) body.max = o.max;
    return call<ConsumeResponse & { messages?: QueueMessage[] }>(
      // A consume leases: repeated after an answer that may have been made, it could strand a message.
      { method: "POST", path: `/v1/queues/${enc(queue)}/consume`, body, retry: "safe", repeatable: false },
      o,
    );
  };
  const ack = (receipt: string, o?: CallOptions) =>
    call<AckResponse>({ method: "POST", path: "/v1/queues/_ack", body: { receipt }, retry: "safe" }, o);
  const extend = (receipt: string, leaseSeconds: number, o?: CallOptions) =>
    call<ExtendResponse>(
      { method: "POST", path: "/v1/queues/_extend", body: { receipt, leaseSeconds }, retry: "safe" },
      o,
    );
  const policy = (queue: string, o?: CallOptions) =>
    call<QueuePolicy>({ method: "GET", path: `/v1/queues/${enc(queue)}/policy`, retry: "safe" }, o);
  const nack = (receipt: string, o: NackOptions & CallOptions = {}) => {
    const body: { receipt: string; delaySeconds?: number; reason?: string } = { receipt };
    if (o.delaySeconds !== undefined) body.delaySeconds = o.delaySeconds;
    if (o.reason !== undefined) body.reason = o.reason;
    return call<NackResponse>({ method: "POST", path: "/v1/queues/_nack", body, retry: "safe" }, o);
  };
  const listSecrets = (o?: CallOptions) =>
    call<ListSecretsResponse>({ method: "GET", path: "/v1/secrets", retry: "safe" }, o);
  const readSecret = (name: string) => call<Secret>({ method: "GET", path: `/v1/secrets/${enc(name)}`, retry: "safe" });
  const logEvents = (events: AnalyticsEvent[], o?: WriteOptions) =>
    call<LogEventsResponse>(
      {
        method: "POST",
        path: "/v1/analytics/events",
        body: { events: events.map(wireEvent) },
        retry: "spending",
        idempotencyKey: keyOf(o?.idempotencyKey),
      },
      o,
    );

  const secretCache = createSecretCache(() => listSecrets(), readSecret, options.secrets);
  // Each batch has its own idempotency key, so the transport may retry it like a read.
  const tracker: Tracker = createTracker(
    (events, key) => logEvents(events, { idempotencyKey: key }),
    options.analytics,
  );
  const workers = new Set<Worker<never>>();
  const workerDeps = {
    consume: (queue: string, o: ConsumeOptions, signal: AbortSignal) => consume(queue, { ...o, signal }),
    consumeMany: async (queue: string, o: ConsumeOptions, max: number, signal: AbortSignal) =>
      (await consume(queue, { ...o, max, signal })).messages ?? [],
    // Whether an attempt's answer was lost before the one that answered (so "false" may mean "acked before").
    ack: async (receipt: string) => {
      let afterRetry = false;
      const onRetry = (info: RetryInfo) => {
        afterRetry = true;
        options.retry?.onRetry?.(info);
      };
      // Merged over the client's retry options by the transport, field by field.
      const { acked } = await ack(receipt, { retry: { onRetry } });
      return { acked, afterRetry };
    },
    extend: (receipt: string, leaseSeconds: number) => extend(receipt, leaseSeconds),
    nack: (receipt: string, delaySeconds?: number, reason?: string) => nack(receipt, { delaySeconds, reason }),
    policyLeaseSeconds: async (queue: string) => (await policy(queue)).leaseSeconds,
    closing: closing.signal,
    // One per client: a daily cap met by one worker pauses the others that need that allowance.
    caps: createDailyCaps(),
  };

  function work<P>(queue: string, handler: MessageHandler<P>, o?: WorkOptions<P>): Worker<P> {
    const worker = startWorker(workerDeps, queue, handler, o);
    const w = worker as unknown as Worker<never>;
    workers.add(w);
    void worker.done.then(
      () => workers.delete(w),
      () => workers.delete(w),
    );
    return worker;
  }

  // ---- platform events ----
  // "every-replica" subscriptions read the feed; "one-replica" ones consume the _events queue.
  const feedSubscriptions = new Map<string, Set<EventHandler<never>>>();
  const queueSubscriptions = new Map<string, Set<EventHandler<never>>>();
  let eventsOptions: EventsOptions = {};
  let eventsWorker: Worker<PlatformEvent> | undefined;

  const handlersOf = (subs: Map<string, Set<EventHandler<never>>>, kind: string) => [
    ...(subs.get(kind) ?? []),
    ...(subs.get("*") ?? []),
  ];
  const count = (subs: Map<string, Set<EventHandler<never>>>) => {
    let n = 0;
    for (const set of subs.values()) n += set.size;
    return n;
  };

  async function applyToCache(event: PlatformEvent): Promise<void> {
    if (event.kind !== "secret.set") return;
    const data = event.data as unknown as SecretSetData | null;
    if (data && typeof data.name === "string" && typeof data.version === "number")
      await secretCache.refresh(data.name, data.version);
  }

  async function dispatchQueued(message: QueueMessage<PlatformEvent>, context: HandlerContext): Promise<void> {
    const event = message.payload;
    if (!event || typeof event !== "object" || typeof event.kind !== "string") return; // not an event: nothing can handle it
    const handlers = handlersOf(queueSubscriptions, event.kind);
    if (handlers.length === 0) {
      // Another process may handle this kind: give it back rather than ack it.
      context.nack(eventsOptions.unhandledDelaySeconds ?? 5);
      return;
    }
    await applyToCache(event);
    await Promise.all(handlers.map(async (h) => h(event as never, message as never)));
  }

  function startQueueLoop(): void {
    if (eventsWorker || closing.signal.aborted) return;
    const worker = work<PlatformEvent>(EVENTS_QUEUE, dispatchQueued, {
      concurrency: eventsOptions.concurrency,
      leaseSeconds: eventsOptions.leaseSeconds,
      onError: (error, message) =>
        onError(
          message
            ? new Error(`event ${message.payload?.kind ?? "?"} (${message.id}) failed; it will come back`, {
                cause: error,
              })
            : error,
        ),
    });
    eventsWorker = worker;
    void worker.done.finally(() => {
      if (eventsWorker === worker) eventsWorker = undefined;
    });
  }

  function stopQueueLoop(): Promise<unknown> {
    const worker = eventsWorker;
    eventsWorker = undefined;
    return worker ? worker.stop() : Promise.resolve();
  }

  // The feed loop: long-polls GET /v1/queues/_events/feed from its cursor.
  let feed: { stop: AbortController; done: Promise<void>; ready: Promise<void> } | undefined;

  async function dispatchFed(event: PlatformEvent): Promise<void> {
    try {
      await applyToCache(event);
    } catch (err) {
      onError(err);
    }
    await Promise.all(
      handlersOf(feedSubscriptions, event.kind).map(async (h) => {
        try {
          await h(event as never);
        } catch (err) {
          onError(new Error(`event handler of ${event.kind} failed`, { cause: err }));
        }
      }),
    );
  }

  function startFeed(): void {
    if (feed || closing.signal.aborted) return;
    const stop = new AbortController();
    const signal = AbortSignal.any([stop.signal, closing.signal]);
    let markReady!: () => void;
    const ready = new Promise<void>((resolve) => (markReady = resolve));
    const done = (async () => {
      let cursor: string | undefined;
      let failures = 0;
      while (!signal.aborted) {
        // The first read (from "now") answers at once with the cursor to continue from.
        const query = cursor === undefined ? "waitSeconds=0" : `after=${enc(cursor)}&waitSeconds=25`;
        let page: EventFeedResponse;
        try {
          page = await call<EventFeedResponse>(
            { method: "GET", path: `/v1/queues/${EVENTS_QUEUE}/feed?${query}`, retry: "safe" },
            { signal },
          );
          failures = 0;
        } catch (err) {
          if (signal.aborted) break;
          if (isUnsupported(err)) {
            onError(
              new Error(
                "platform events: this service has no events feed (GET /v1/queues/_events/feed); " +
                  "every-replica subscriptions get no events, and cached secrets refresh after secrets.maxAgeMs",
                { cause: err },
              ),
            );
            break;
          }
          onError(err);
          try {
            await sleep(backoff(++failures, 500, 30_000), signal);
          } catch {
            break;
          }
          continue;
        }
        cursor = page.cursor;
        markReady();
        for (const event of page.events) await dispatchFed(event);
      }
      markReady();
    })();
    feed = { stop, done, ready };
    void done.finally(() => {
      if (feed?.done === done) feed = undefined;
    });
  }

  function stopFeed(): Promise<void> {
    const f = feed;
    feed = undefined;
    f?.stop.abort();
    return f ? f.done : Promise.resolve();
  }

  function on<D>(kind: string, handler: EventHandler<D>, o: SubscribeOptions = {}): () => void {
    const oneReplica = o.delivery === "one-replica";
    const subs = oneReplica ? queueSubscriptions : feedSubscriptions;
    let set = subs.get(kind);
    if (!set) subs.set(kind, (set = new Set()));
    const h = handler as EventHandler<never>;
    set.add(h);
    if (oneReplica) startQueueLoop();
    else startFeed();
    let subscribed = true;
    return () => {
      if (!subscribed) return;
      subscribed = false;
      set.delete(h);
      if (count(subs) > 0) return;
      if (oneReplica) void stopQueueLoop();
      else void stopFeed();
    };
  }

  let closed: Promise<CloseResult> | undefined;
  function close(o: CloseOptions = {}): Promise<CloseResult> {
    closed ??= (async () => {
      const timeoutMs = o.timeoutMs ?? shutdownTimeoutMs;
      // 1. Stop consuming (every worker and the events loops), with one deadline for the running handlers.
      closing.abort(new DOMException("the client is closing", "AbortError"));
      const stopping = [...workers].map((w) => w.stop({ timeoutMs }));
      const settled = await Promise.allSettled([...stopping, stopFeed()]);
      const abandoned: QueueMessage<unknown>[] = [];
      for (const r of settled) {
        if (r.status === "fulfilled") abandoned.push(...((r.value as { abandoned?: QueueMessage[] })?.abandoned ?? []));
      }
      // 2. The handlers' acks went out as each finished; flush what they tracked.
      let analytics: FlushResult = { recorded: 0, dropped: 0 };
      try {
        analytics = await tracker.close();
      } catch (err) {
        onError(err);
      }
      // 3. Only now end the calls still in flight (those of abandoned handlers).
      lifetime.abort(new DOMException("the client is closed", "AbortError"));
      return { abandoned, analytics };
    })();
    return closed;
  }
  if (options.signal) {
    if (options.signal.aborted) void close();
    else options.signal.addEventListener("abort", () => void close(), { once: true });
  }

  return {
    baseUrl: transport.baseUrl,
    health: (o) => call<HealthResponse>({ method: "GET", path: "/health", retry: "safe", public: true }, o),
    version: (o) => call<VersionResponse>({ method: "GET", path: "/version", retry: "safe", public: true }, o),

    analytics: {
      registerType: (request, o) =>
        call<EventType>(
          {
            method: "POST",
            path: "/v1/analytics/types",
            body: { name: request.name, properties: request.properties ?? {} },
            retry: "safe",
          },
          o,
        ),
      listTypes: async (o) =>
        (await call<ListTypesResponse>({ method: "GET", path: "/v1/analytics/types", retry: "safe" }, o)).types,
      log: (events, o) => logEvents(events, o),
      query: (request, o) => {
        const body: Record<string, unknown> = { ...request, since: toEpochMs(request.since) };
        if (request.until !== undefined) body.until = toEpochMs(request.until);
        return call<QueryResponse>({ method: "POST", path: "/v1/analytics/query", body, retry: "safe" }, o);
      },
      aggregate: (request, o) => {
        const body: Record<string, unknown> = {
          ...request,
          aggregate: request.aggregate ?? "count",
          since: toEpochMs(request.since),
        };
        if (request.until !== undefined) body.until = toEpochMs(request.until);
        return call<AggregateResponse>({ method: "POST", path: "/v1/analytics/query", body, retry: "safe" }, o);
      },
      funnel: (request, o) => {
        const body: Record<string, unknown> = { ...request, since: toEpochMs(request.since) };
        if (request.until !== undefined) body.until = toEpochMs(request.until);
        return call<FunnelResponse>({ method: "POST", path: "/v1/analytics/funnel", body, retry: "safe" }, o);
      },
      track: (...args: Parameters<typeof tracker.track>) => tracker.track(...args),
      identify: (distinctId) => tracker.identify(distinctId),
      flush: (...args: Parameters<typeof tracker.flush>) => tracker.flush(...args),
      get pending() {
        return tracker.pending;
      },
      get undeclared() {
        return tracker.undeclared;
      },
    },

    mail: {
      send: (request, o) =>
        call<SendMailResponse>(
          {
            method: "POST",
            path: "/v1/mail/send",
            body: { to: request.to, subject: request.subject, text: request.text },
            retry: "spending",
            // One key per logical send, the same on every retry: a lost answer never sends twice.
            idempotencyKey: keyOf(o?.idempotencyKey),
          },
          o,
        ),
    },

    inference: {
      models: async (o) =>
        (await call<ListModelsResponse>({ method: "GET", path: "/v1/inference/models", retry: "safe" }, o)).models,
      generate: (request, o) =>
        call<GenerateResponse>(
          {
            method: "POST",
            path: "/v1/inference/generate",
            body: request,
            retry: "spending",
            idempotencyKey: keyOf(o?.idempotencyKey),
          },
          o,
        ),
      embed: (request, o) =>
        call<EmbedResponse>(
          {
            method: "POST",
            path: "/v1/inference/embed",
            body: request,
            retry: "spending",
            idempotencyKey: keyOf(o?.idempotencyKey),
          },
          o,
        ),
    },

    queues: {
      list: async (o) =>
        (await call<ListQueuesResponse>({ method: "GET", path: "/v1/queues", retry: "safe" }, o)).queues,
      put: (queue, payload, o = {}) => {
        const body: Record<string, unknown> = { payload };
        if (o.delaySeconds !== undefined) body.delaySeconds = o.delaySeconds;
        if (o.ttlSeconds !== undefined) body.ttlSeconds = o.ttlSeconds;
        if (o.dedupKey !== undefined) body.dedupKey = o.dedupKey;
        if (o.priority !== undefined) body.priority = o.priority;
        if (o.groupKey !== undefined) body.groupKey = o.groupKey;
        return call<PutResponse>(
          {
            method: "POST",
            path: `/v1/queues/${enc(queue)}`,
            body,
            retry: "refusable",
            idempotencyKey: keyOf(o.idempotencyKey),
          },
          o,
        );
      },
      putBatch: (queue, messages, o) =>
        call<BatchPutResponse>(
          {
            method: "POST",
            path: `/v1/queues/${enc(queue)}/batch`,
            body: { messages },
            retry: "refusable",
            idempotencyKey: keyOf(o?.idempotencyKey),
          },
          o,
        ),
      consume: async <P>(queue: string, o?: ConsumeOptions & CallOptions) =>
        (await consume(queue, o)).message as QueueMessage<P> | null,
      consumeBatch: async <P>(queue: string, o: ConsumeOptions & CallOptions & { max: number }) =>
        ((await consume(queue, o)).messages ?? []) as QueueMessage<P>[],
      ack: async (receipt, o) => (await ack(receipt, o)).acked,
      extend: (receipt, leaseSeconds, o) => extend(receipt, leaseSeconds, o),
      nack: async (receipt, o) => (await nack(receipt, o)).nacked,
      purge: async (queue, o = {}) =>
        (
          await call<PurgeResponse>(
            {
              method: "POST",
              path: `/v1/queues/${enc(queue)}/purge`,
              body: o.includeLeased === undefined ? {} : { includeLeased: o.includeLeased },
              retry: "safe",
            },
            o,
          )
        ).purged,
      message: async (queue, id, o) => {
        try {
          return await call<MessageState>(
            { method: "GET", path: `/v1/queues/${enc(queue)}/messages/${enc(id)}`, retry: "safe" },
            o,
          );
        } catch (err) {
          if (err instanceof PlatformError && err.code === "not_found") return null;
          throw err;
        }
      },
      policy: (queue, o) => policy(queue, o),
      setPolicy: (queue, change, o) =>
        call<QueuePolicy>({ method: "PUT", path: `/v1/queues/${enc(queue)}/policy`, body: change, retry: "safe" }, o),
      schedule: (queue, name, spec, o) =>
        call<QueueSchedule>(
          { method: "PUT", path: `/v1/queues/${enc(queue)}/schedules/${enc(name)}`, body: spec, retry: "safe" },
          o,
        ),
      schedules: async (queue, o) =>
        (
          await call<{ schedules: QueueSchedule[] }>(
            { method: "GET", path: `/v1/queues/${enc(queue)}/schedules`, retry: "safe" },
            o,
          )
        ).schedules,
      unschedule: async (queue, name, o) => {
        try {
          await call({ method: "DELETE", path: `/v1/queues/${enc(queue)}/schedules/${enc(name)}`, retry: "safe" }, o);
          return true;
        } catch (err) {
          if (err instanceof PlatformError && err.code === "not_found") return false;
          throw err;
        }
      },
      work,
    },

    events: {
      on,
      async ready() {
        await feed?.ready;
      },
      configure(o) {
        eventsOptions = { ...o };
      },
      async stop() {
        feedSubscriptions.clear();
        queueSubscriptions.clear();
        await Promise.all([stopQueueLoop(), stopFeed()]);
      },
    },

    secrets: {
      list: async (o) => (await listSecrets(o)).secrets,
      get: (name, o) => secretCache.get(name, o?.fresh),
      createLink: (name, o) =>
        call<SecretLink>(
          {
            method: "POST",
            path: `/v1/secrets/${enc(name)}/link`,
            retry: "refusable",
            idempotencyKey: keyOf(o?.idempotencyKey),
          },
          o,
        ),
      watch(o = {}) {
        return on<SecretSetData>("secret.set", (event) => {
          // The feed loop has already refreshed the cache for this event.
          o.onChange?.(event.data.name, event.data.version);
        });
      },
    },

    close,
  };
}

/** An event as the service takes it (a Date `at` becomes epoch ms). */
function wireEvent(e: AnalyticsEvent): AnalyticsEvent {
  const out: AnalyticsEvent = { type: e.type };
  if (e.at !== undefined) out.at = toEpochMs(e.at);
  if (e.properties !== undefined) out.properties = e.properties;
  if (e.distinctId !== undefined) out.distinctId = e.distinctId;
  return out;
}

export { PlatformError };
