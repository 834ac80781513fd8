/**
 * One HTTP call to the service: bearer header, JSON in and out, the error
 * envelope turned into `PlatformError`, and retries only where they are
 * safe. Every operation declares how it may be retried:
 *
 * - `safe`: reads, consume, ack, extend, nack and type registration
 *   (idempotent), and any call sent with an `Idempotency-Key` (the service
 *   answers a repeat with the first answer, without doing the work again).
 *   Retried on network failures, 502, 503 and 504 with capped exponential backoff
 *   and jitter, for up to `budgetMs` (30 s: longer than a restart of the
 *   embedded service, about 11 s); a 429 only when the caller opted in; a 409
 *   `idempotency_key_in_use` (the first call with that key still runs) after
 *   its Retry-After. An error that is the replay of the first call's answer
 *   (`Idempotent-Replayed`: its work may have been done) is not retried.
 * - `refusable`: put and link creation. Repeating one after a lost answer
 *   could do it twice, so only a 429 (which did nothing) is retried, and only
 *   when opted in.
 *
 * Every state-changing call is sent with an Idempotency-Key by default (a new
 * one per call, kept across its retries), which makes it `safe`. A call sent
 * without one (`idempotencyKey: false`) is never repeated after an answer
 * flagged `Outcome-Unknown` (a 503 whose change may have been committed;
 * `PlatformError.outcomeUnknown`), nor is a consume, which would lease a
 * second message.
 * - `spending`: mail send, generate, embed and event logging. They spend the
 *   app's daily allowance and may have done their work before a failure, so
 *   they are never retried automatically.
 */
import { PlatformError, errorFromResponse } from "./platform-error.ts";

export type RetryClass = "safe" | "refusable" | "spending";

export interface RetryInfo {
  /** 1 for the first retry. */
  attempt: number;
  /** How long the client waits before that retry. */
  delayMs: number;
  error: PlatformError;
  method: string;
  path: string;
}

export interface RetryOptions {
  /** Most retries after the first attempt (network errors, 502, 503, 504, and opted-in 429s). Default: no limit but `budgetMs`. */
  retries?: number;
  /**
   * No retry starts later than this after the first attempt, so a call gives
   * up within about this time. Default 30000 ms: longer than a restart of the
   * service (about 11 s embedded), so reads ride one out.
   */
  budgetMs?: number;
  /** First backoff delay; it doubles each time. Default 200 ms. */
  minDelayMs?: number;
  /** Ceiling of a backoff delay. Default 10 s. */
  maxDelayMs?: number;
  /** Also retry a 429 after its `Retry-After` (never for operations that spend allowance). Default false. */
  on429?: boolean;
  /** A 429 asking to wait longer than this (e.g. a daily cap, until midnight) is thrown at once. Default 60 s. */
  maxRetryAfterMs?: number;
  /** Called before each retry (for logs and metrics). */
  onRetry?: (info: RetryInfo) => void;
}

/** Options every operation takes. */
export interface CallOptions {
  /** Aborts the call (and any wait between retries); the call then rejects with the signal's reason. */
  signal?: AbortSignal;
  /** Overrides the client's retry options for this call. */
  retry?: RetryOptions;
}

export interface TransportOptions {
  baseUrl: string;
  token: string;
  fetch: typeof globalThis.fetch;
  signal?: AbortSignal;
  retry?: RetryOptions;
}

export interface RequestSpec {
  method: "GET" | "POST" | "PUT" | "DELETE";
  path: string;
  body?: unknown;
  retry: RetryClass;
  /** Public endpoints (`/health`, `/version`) are called without the token. */
  public?: boolean;
  /** Sent as the `Idempotency-Key` header (the same on every retry): makes the call safe to retry. */
  idempotencyKey?: string;
  /**
   * False for a `safe` call whose repeat is not harmless when its first attempt
   * may have been done (a consume leases a message): after an answer flagged
   * `outcomeUnknown` it is not retried without a key.
   */
  repeatable?: boolean;
}

export interface Transport {
  request<T>(spec: RequestSpec, options?: CallOptions): Promise<T>;
  readonly baseUrl: string;
}

const DEFAULTS = {
  retries: Infinity,
  budgetMs: 30_000,
  minDelayMs: 200,
  maxDelayMs: 10_000,
  on429: false,
  maxRetryAfterMs: 60_000,
};

export function createTransport(options: TransportOptions): Transport {
  const baseUrl = options.baseUrl.replace(/\/+$/, "");

  async function once<T>(spec: RequestSpec, signal: AbortSignal | undefined): Promise<T> {
    const headers: Record<string, string> = { accept: "application/json" };
    if (!spec.public) headers.authorization = `Bearer ${options.token}`;
    if (spec.idempotencyKey !== undefined) headers["idempotency-key"] = spec.idempotencyKey;
    let body: string | undefined;
    if (spec.body !== undefined) {
      body = JSON.stringify(spec.body);
      headers["content-type"] = "application/json";
    }
    let response: Response;
    let text: string;
    try {
      response = await options.fetch(baseUrl + spec.path, { method: spec.method, headers, body, signal });
      text = await response.text();
    } catch (err) {
      if (signal?.aborted) throw signal.reason;
      throw new PlatformError({
        status: 0,
        code: "unavailable",
        message: `${spec.method} ${spec.path}: the service could not be reached (${describe(err)})`,
        cause: err,
      });
    }
    if (!response.ok) throw errorFromResponse(response.status, response.headers, text);
    try {
      return JSON.parse(text) as T;
    } catch (err) {
      throw new PlatformError({
        status: response.status,
        code: "internal",
        message: `${spec.method} ${spec.path}: the answer is not JSON`,
        requestId: response.headers.get("x-request-id") ?? undefined,
        cause: err,
      });
    }
  }

  return {
    baseUrl,
    async request<T>(spec: RequestSpec, call: CallOptions = {}): Promise<T> {
      const retry = { ...DEFAULTS, ...options.retry, ...call.retry };
      const signal = anySignal(options.signal, call.signal);
      const kind: RetryClass = spec.idempotencyKey !== undefined ? "safe" : spec.retry;
      const started = Date.now();
      for (let attempt = 1; ; attempt++) {
        signal?.throwIfAborted();
        try {
          return await once<T>(spec, signal);
        } catch (err) {
          if (!(err instanceof PlatformError) || attempt > retry.retries) throw err;
          // An answer that says the change may have been made: a keyless call that changes state is not repeated.
          if (err.outcomeUnknown && spec.idempotencyKey === undefined && (kind !== "safe" || spec.repeatable === false))
            throw err;
          const delayMs = retryDelay(kind, err, attempt, retry);
          if (delayMs === undefined || Date.now() + delayMs - started > retry.budgetMs) throw err;
          retry.onRetry?.({ attempt, delayMs, error: err, method: spec.method, path: spec.path });
          await sleep(delayMs, signal);
        }
      }
    },
  };
}

/** How long to wait before retrying after `error`, or undefined when it must not be retried. */
function retryDelay(
  kind: RetryClass,
  error: PlatformError,
  attempt: number,
  retry: Required<Omit<RetryOptions, "onRetry">>,
): number | undefined {
  if (kind === "spending") return undefined;
  if (error.status === 429) {
    if (!retry.on429) return undefined;
    const ms = (error.retryAfter ?? 1) * 1000;
    return ms > retry.maxRetryAfterMs ? undefined : ms;
  }
  if (kind !== "safe") return undefined;
  // A stored answer (the first call's error, kept because its work may have been done): the same every time.
  if (error.replayed) return undefined;
  // The first call with this idempotency key is still running: its answer will be replayed.
  if (error.code === "idempotency_key_in_use") return Math.min((error.retryAfter ?? 1) * 1000, retry.maxDelayMs);
  // Network failures, and the statuses of a service (or a balancer in front of it) that is failing or
  // restarting: 502, 503, and 504 (the balancer gave up waiting; with a key the repeat waits for the first).
  if (error.status !== 0 && error.status !== 502 && error.status !== 503 && error.status !== 504) return undefined;
  // A 503 that says when the service will be back is believed (within the cap).
  if (error.retryAfter !== undefined) return Math.min(error.retryAfter * 1000, retry.maxDelayMs);
  return backoff(attempt, retry.minDelayMs, retry.maxDelayMs);
}

/** Capped exponential backoff with jitter: a random delay in [d/2, d], d = min(max, min * 2^(attempt-1)). */
export function backoff(attempt: number, minDelayMs: number, maxDelayMs: number): number {
  const d = Math.min(maxDelayMs, minDelayMs * 2 ** (attempt - 1));
  return Math.round(d / 2 + Math.random() * (d / 2));
}

/** The signal's reason as an Error (a reason given as something else is wrapped). */
function abortReason(signal: AbortSignal): Error {
  const reason: unknown = signal.reason;
  return reason instanceof Error ? reason : new DOMException("The operation was aborted", "AbortError");
}

/** Resolves after `ms`, or rejects with the signal's reason as soon as it aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(abortReason(signal));
    const onAbort = () => {
      clearTimeout(timer);
      reject(abortReason(signal!));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** One signal that aborts when any of the given ones does. */
export function anySignal(...signals: (AbortSignal | undefined)[]): AbortSignal | undefined {
  const present = signals.filter((s): s is AbortSignal => s !== undefined);
  if (present.length <= 1) return present[0];
  if (typeof AbortSignal.any === "function") return AbortSignal.any(present);
  const controller = new AbortController();
  for (const s of present) {
    if (s.aborted) {
      controller.abort(s.reason);
      break;
    }
    s.addEventListener("abort", () => controller.abort(s.reason), { once: true });
  }
  return controller.signal;
}

function describe(err: unknown): string {
  if (err instanceof Error) {
    const cause = (err as { cause?: unknown }).cause;
    const code = cause && typeof cause === "object" && "code" in cause ? String(cause.code) : undefined;
    return code ? `${err.message}: ${code}` : err.message;
  }
  return String(err);
}
