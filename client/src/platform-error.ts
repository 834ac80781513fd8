/**
 * The one error the client throws for a failed call, whatever the operation:
 * a non-2xx answer of the service (with the envelope's `code`, `message` and
 * `details`), or a network failure (status 0, code `unavailable`). Callers
 * branch on `code`, which is the closed set of the service's error codes, so
 * `queue_full` can be told from `quota_exceeded` without parsing messages.
 */

/** The service's error codes (one per row of its error table). */
export type ErrorCode =
  | "invalid_argument"
  | "unauthenticated"
  | "app_stopped"
  | "permission_denied"
  | "not_found"
  | "secret_not_set"
  | "payload_too_large"
  | "quota_exceeded"
  | "queue_full"
  | "too_many_links"
  | "rate_limited"
  | "idempotency_key_reused"
  | "idempotency_key_in_use"
  | "conflict"
  | "failed_precondition"
  | "deadline_exceeded"
  | "unimplemented"
  | "not_configured"
  | "upstream_error"
  | "unavailable"
  | "internal";

export const ERROR_CODES: readonly ErrorCode[] = [
  "invalid_argument",
  "unauthenticated",
  "app_stopped",
  "permission_denied",
  "not_found",
  "secret_not_set",
  "payload_too_large",
  "quota_exceeded",
  "queue_full",
  "too_many_links",
  "rate_limited",
  "idempotency_key_reused",
  "idempotency_key_in_use",
  "conflict",
  "failed_precondition",
  "deadline_exceeded",
  "unimplemented",
  "not_configured",
  "upstream_error",
  "unavailable",
  "internal",
];

/**
 * The code a bare status stands for, when an answer carries no envelope (e.g. a proxy's HTML page): the
 * service's own reading, the generic code of that status (test/core/error-codes.test.ts ties them).
 */
const CODE_OF_STATUS: Record<number, ErrorCode> = {
  400: "invalid_argument",
  401: "unauthenticated",
  403: "permission_denied",
  404: "not_found",
  409: "failed_precondition",
  413: "payload_too_large",
  422: "idempotency_key_reused",
  429: "quota_exceeded",
  501: "not_configured",
  502: "upstream_error",
  503: "unavailable",
  504: "deadline_exceeded",
};

export interface PlatformErrorInit {
  status: number;
  code: ErrorCode;
  message: string;
  details?: string[];
  retryAfter?: number;
  requestId?: string;
  replayed?: boolean;
  outcomeUnknown?: boolean;
  cause?: unknown;
}

export class PlatformError extends Error {
  override readonly name = "PlatformError";
  /** HTTP status; 0 when no answer arrived (network failure). */
  readonly status: number;
  readonly code: ErrorCode;
  /** Human-readable specifics, e.g. which field and why. */
  readonly details: string[];
  /** Seconds to wait before trying again (`Retry-After`), when the service said. */
  readonly retryAfter: number | undefined;
  /** The `x-request-id` of the answer: quote it when asking the platform's operators. */
  readonly requestId: string | undefined;
  /**
   * The service answered a repeat of an Idempotency-Key with the first call's
   * error (`Idempotent-Replayed`): the work may have been done (the mail
   * provider failed after taking the mail), and retrying with that key gets
   * the same answer. Deciding to send again is the caller's, with a new key.
   */
  readonly replayed: boolean;
  /**
   * The service could not tell whether the call's change was made (`Outcome-Unknown: true`: a 503 after
   * the database stopped answering mid-request, or a provider that failed after taking the work). The
   * client never repeats such a call without its Idempotency-Key; check before sending it again.
   */
  readonly outcomeUnknown: boolean;

  constructor(init: PlatformErrorInit) {
    super(init.message, init.cause === undefined ? undefined : { cause: init.cause });
    this.status = init.status;
    this.code = init.code;
    this.details = init.details ?? [];
    this.retryAfter = init.retryAfter;
    this.requestId = init.requestId;
    this.replayed = init.replayed ?? false;
    this.outcomeUnknown = init.outcomeUnknown ?? false;
  }
}

/** A `Retry-After` header in seconds (delta-seconds or an HTTP date), or undefined. */
export function parseRetryAfter(header: string | null, now = Date.now()): number | undefined {
  if (header === null || header.trim() === "") return undefined;
  const trimmed = header.trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed);
  const date = Date.parse(trimmed);
  if (Number.isNaN(date)) return undefined;
  return Math.max(0, Math.ceil((date - now) / 1000));
}

/** Builds the error of a non-2xx response from its status, headers and body text. */
export function errorFromResponse(status: number, headers: Headers, text: string): PlatformError {
  let code: ErrorCode | undefined;
  let message: string | undefined;
  let details: string[] | undefined;
  try {
    const body = JSON.parse(text) as { error?: { code?: unknown; message?: unknown; details?: unknown } };
    const e = body?.error;
    if (e && typeof e === "object") {
      if (typeof e.code === "string" && (ERROR_CODES as readonly string[]).includes(e.code)) code = e.code as ErrorCode;
      if (typeof e.message === "string") message = e.message;
      if (Array.isArray(e.details)) details = e.details.filter((d): d is string => typeof d === "string");
    }
  } catch {
    // Not JSON (a proxy or load balancer answered): the status says what happened.
  }
  code ??= CODE_OF_STATUS[status] ?? (status >= 500 ? "internal" : "invalid_argument");
  return new PlatformError({
    status,
    code,
    message: message ?? `HTTP ${status}`,
    details,
    retryAfter: parseRetryAfter(headers.get("retry-after")),
    requestId: headers.get("x-request-id") ?? undefined,
    replayed: headers.get("idempotent-replayed") === "true",
    outcomeUnknown: headers.get("outcome-unknown") === "true",
  });
}
