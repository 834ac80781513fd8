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
import { createTracker, toEpochMs, type FlushResult, type Tracker, type TrackerOptions } from "./tracker.ts";
import { anySignal, createTransport, type CallOptions, type RequestSpec, type RetryOptions } from "./transport.ts";
import { startWorker, type MessageHandler, type WorkOptions, type Worker } from "./worker.ts";
import {
  EVENTS_QUEUE,
  type AckResponse,
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
   * Aborting it shuts the client down like `close()`: calls in flight are
   * aborted, workers stop (after their running handlers), and waiting
   * analytics events are flushed.
   */
  signal?: AbortSignal;
  /** Retry policy of the safe operations (see README, "Retries"). */
  retry?: RetryOptions;
  /** Batching of `analytics.track`. */
  analytics?: TrackerOptions;
  /** Caching of `secrets.get`. */
  secrets?: SecretCacheOptions;
  /** Where errors of background work go (events dispatch, shutdown). Default: `console.error`. */
  onError?: (error: unknown) => void;
}

export type EventHandler<D = JsonValue> = (event: PlatformEvent<D>, message: QueueMessage<PlatformEvent<D>>) => unknown;

export interface EventsOptions {
  /** Lease per event. Default: the app's lease. */
  leaseSeconds?: number;
  /** Events handled at the same time. Default 1. */
  concurrency?: number;
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
    /** `POST /v1/analytics/events`: logs 1 to 1000 events now (never retried: it spends allowance). */
    log(events: AnalyticsEvent[], options?: CallOptions): Promise<LogEventsResponse>;
    /** `POST /v1/analytics/query`: counts events in buckets. */
    query(request: QueryRequest, options?: CallOptions): Promise<QueryResponse>;
    /** Buffers one event; it is sent in a batch (see `ClientOptions.analytics`). Never throws for the service's answer. */
    track(type: string, properties?: Record<string, PropertyValue>, at?: TimeInput): void;
    /** Sends every buffered event now. */
    flush(): Promise<FlushResult>;
    /** Events buffered and not yet sent. */
    readonly pending: number;
  };

  mail: {
    /** `POST /v1/mail/send` from the app's own address (never retried: it spends allowance). */
    send(request: SendMailRequest, options?: CallOptions): Promise<SendMailResponse>;
  };

  inference: {
    /** `GET /v1/inference/models`. */
    models(options?: CallOptions): Promise<ListModelsResponse["models"]>;
    /** `POST /v1/inference/generate` (never retried: it spends allowance). */
    generate(request: GenerateRequest, options?: CallOptions): Promise<GenerateResponse>;
    /** `POST /v1/inference/embed` (never retried: it spends allowance). */
    embed(request: EmbedRequest, options?: CallOptions): Promise<EmbedResponse>;
  };

  queues: {
    /** `GET /v1/queues`: every queue with something on it. */
    list(options?: CallOptions): Promise<ListQueuesResponse["queues"]>;
    /** `POST /v1/queues/{queue}`: puts one message (a 429 is retried only when `retry.on429`). */
    put(queue: string, payload: JsonValue, options?: PutOptions & CallOptions): Promise<PutResponse>;
    /** `POST /v1/queues/{queue}/consume`: one leased message, or null after the wait. */
    consume<P = JsonValue>(queue: string, options?: ConsumeOptions & CallOptions): Promise<QueueMessage<P> | null>;
    /** `POST /v1/queues/_ack`: true if acked, false if the lease had lapsed (not an error). */
    ack(receipt: string, options?: CallOptions): Promise<boolean>;
    /** Runs `handler` for every message of `queue` until stopped; see `WorkOptions`. */
    work<P = JsonValue>(queue: string, handler: MessageHandler<P>, options?: WorkOptions<P>): Worker;
  };

  events: {
    /**
     * Calls `handler` for every platform event of `kind` (`"*"`: every kind),
     * consuming the `_events` queue: one loop per client, started by the first
     * subscription and stopped after the last one leaves. An event is acked
     * once every handler of its kind has succeeded; if one throws, the event
     * comes back after its lease (all its handlers run again). Events of a kind
     * nobody subscribed to are acked and dropped. Returns the unsubscribe.
     */
    on<D = JsonValue>(kind: string, handler: EventHandler<D>): () => void;
    /** Options of the events loop; takes effect when it next starts. */
    configure(options: EventsOptions): void;
    /** Stops the events loop (after the running handlers) and drops every subscription. */
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
    /** `POST /v1/secrets/{name}/link`: a one-time link that sets this secret (a 429 is retried only when `retry.on429`). */
    createLink(name: string, options?: CallOptions): Promise<SecretLink>;
    /** Refreshes cached secrets as soon as a `secret.set` platform event arrives (consumes `_events`). Returns the unsubscribe. */
    watch(options?: WatchOptions): () => void;
  };

  /**
   * Shuts down gracefully: stops workers and the events loop (waiting for
   * running handlers and acking what they finished), flushes analytics.
   * Idempotent; also runs when the client's `signal` aborts.
   */
  close(): Promise<void>;
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

  // Aborted by close() or the caller's signal: ends every loop and every call in flight.
  const lifetime = new AbortController();
  const clientSignal = anySignal(lifetime.signal, options.signal)!;
  const transport = createTransport({ baseUrl, token, fetch: fetchImpl, signal: clientSignal, retry: options.retry });
  // Calls that finish work while the client shuts down (acks of finished handlers, the last analytics flush).
  const detached = createTransport({ baseUrl, token, fetch: fetchImpl, retry: options.retry });
  const call = <T>(spec: RequestSpec, o?: CallOptions) =>
    transport.request<T>(spec, o ? { signal: o.signal, retry: o.retry } : undefined);

  const consume = (queue: string, o: ConsumeOptions & CallOptions = {}) => {
    const body: ConsumeOptions = {};
    if (o.waitSeconds !== undefined) body.waitSeconds = o.waitSeconds;
    if (o.leaseSeconds !== undefined) body.leaseSeconds = o.leaseSeconds;
    return call<ConsumeResponse>({ method: "POST", path: `/v1/queues/${enc(queue)}/consume`, body, retry: "safe" }, o);
  };
  const ackDetached = (receipt: string) =>
    detached.request<AckResponse>({ method: "POST", path: "/v1/queues/_ack", body: { receipt }, retry: "safe" });
  const listSecrets = (o?: CallOptions) =>
    call<ListSecretsResponse>({ method: "GET", path: "/v1/secrets", retry: "safe" }, o);
  const readSecret = (name: string) => call<Secret>({ method: "GET", path: `/v1/secrets/${enc(name)}`, retry: "safe" });
  const logEvents = (events: AnalyticsEvent[], o?: CallOptions) =>
    call<LogEventsResponse>(
      { method: "POST", path: "/v1/analytics/events", body: { events: events.map(wireEvent) }, retry: "spending" },
      o,
    );

  const secretCache = createSecretCache(() => listSecrets(), readSecret, options.secrets);
  // The tracker's batches outlive the client's signal: the flush on shutdown must still go out.
  const tracker: Tracker = createTracker(
    (events) =>
      detached.request<LogEventsResponse>({
        method: "POST",
        path: "/v1/analytics/events",
        body: { events: events.map(wireEvent) },
        retry: "spending",
      }),
    options.analytics,
  );
  const workers = new Set<Worker>();
  const workerDeps = {
    consume: (queue: string, o: ConsumeOptions, signal: AbortSignal) => consume(queue, { ...o, signal }),
    ack: ackDetached,
    clientSignal,
  };

  function work<P>(queue: string, handler: MessageHandler<P>, o?: WorkOptions<P>): Worker {
    const worker = startWorker(workerDeps, queue, handler, o);
    workers.add(worker);
    void worker.done.then(
      () => workers.delete(worker),
      () => workers.delete(worker),
    );
    return worker;
  }

  // ---- platform events: one loop on _events, dispatching by kind ----
  const subscriptions = new Map<string, Set<EventHandler<never>>>();
  let eventsOptions: EventsOptions = {};
  let eventsWorker: Worker | undefined;

  async function dispatch(message: QueueMessage<PlatformEvent>): Promise<void> {
    const event = message.payload;
    if (!event || typeof event !== "object" || typeof event.kind !== "string") return; // not an event: nothing can handle it
    if (event.kind === "secret.set") {
      const data = event.data as unknown as SecretSetData | null;
      if (data && typeof data.name === "string" && typeof data.version === "number")
        await secretCache.refresh(data.name, data.version);
    }
    const handlers = [...(subscriptions.get(event.kind) ?? []), ...(subscriptions.get("*") ?? [])];
    await Promise.all(handlers.map(async (h) => h(event as never, message as never)));
  }

  function startEvents(): void {
    if (eventsWorker || clientSignal.aborted) return;
    const worker = work<PlatformEvent>(EVENTS_QUEUE, dispatch, {
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

  /** Stops the loop; a subscription made while it winds down starts a new one at once. */
  function stopEvents(): Promise<void> {
    const worker = eventsWorker;
    eventsWorker = undefined;
    return worker ? worker.stop() : Promise.resolve();
  }

  function stopEventsIfIdle(): void {
    let count = 0;
    for (const set of subscriptions.values()) count += set.size;
    if (count === 0) void stopEvents();
  }

  function on<D>(kind: string, handler: EventHandler<D>): () => void {
    let set = subscriptions.get(kind);
    if (!set) subscriptions.set(kind, (set = new Set()));
    const h = handler as EventHandler<never>;
    set.add(h);
    startEvents();
    let subscribed = true;
    return () => {
      if (!subscribed) return;
      subscribed = false;
      set.delete(h);
      stopEventsIfIdle();
    };
  }

  let closing: Promise<void> | undefined;
  function close(): Promise<void> {
    closing ??= (async () => {
      lifetime.abort(new DOMException("the client is closing", "AbortError"));
      const results = await Promise.allSettled([...[...workers].map((w) => w.done), tracker.close()]);
      for (const r of results) if (r.status === "rejected") onError(r.reason);
    })();
    return closing;
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
      log: logEvents,
      query: (request, o) => {
        const body: Record<string, unknown> = { ...request, since: toEpochMs(request.since) };
        if (request.until !== undefined) body.until = toEpochMs(request.until);
        return call<QueryResponse>({ method: "POST", path: "/v1/analytics/query", body, retry: "safe" }, o);
      },
      track: (...args: Parameters<typeof tracker.track>) => tracker.track(...args),
      flush: (...args: Parameters<typeof tracker.flush>) => tracker.flush(...args),
      get pending() {
        return tracker.pending;
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
          },
          o,
        ),
    },

    inference: {
      models: async (o) =>
        (await call<ListModelsResponse>({ method: "GET", path: "/v1/inference/models", retry: "safe" }, o)).models,
      generate: (request, o) =>
        call<GenerateResponse>({ method: "POST", path: "/v1/inference/generate", body: request, retry: "spending" }, o),
      embed: (request, o) =>
        call<EmbedResponse>({ method: "POST", path: "/v1/inference/embed", body: request, retry: "spending" }, o),
    },

    queues: {
      list: async (o) =>
        (await call<ListQueuesResponse>({ method: "GET", path: "/v1/queues", retry: "safe" }, o)).queues,
      put: (queue, payload, o = {}) => {
        const body: Record<string, unknown> = { payload };
        if (o.delaySeconds !== undefined) body.delaySeconds = o.delaySeconds;
        if (o.ttlSeconds !== undefined) body.ttlSeconds = o.ttlSeconds;
        return call<PutResponse>({ method: "POST", path: `/v1/queues/${enc(queue)}`, body, retry: "refusable" }, o);
      },
      consume: async <P>(queue: string, o?: ConsumeOptions & CallOptions) =>
        (await consume(queue, o)).message as QueueMessage<P> | null,
      ack: async (receipt, o) =>
        (await call<AckResponse>({ method: "POST", path: "/v1/queues/_ack", body: { receipt }, retry: "safe" }, o))
          .acked,
      work,
    },

    events: {
      on,
      configure(o) {
        eventsOptions = { ...o };
      },
      async stop() {
        subscriptions.clear();
        await stopEvents();
      },
    },

    secrets: {
      list: async (o) => (await listSecrets(o)).secrets,
      get: (name, o) => secretCache.get(name, o?.fresh),
      createLink: (name, o) =>
        call<SecretLink>({ method: "POST", path: `/v1/secrets/${enc(name)}/link`, retry: "refusable" }, o),
      watch(o = {}) {
        return on<SecretSetData>("secret.set", (event) => {
          // The dispatcher has already refreshed the cache for this event.
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
  return out;
}

export { PlatformError };
