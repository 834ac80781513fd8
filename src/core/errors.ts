/**
 * The one error type of the service, with the closed set of codes of
 * docs/api.md#errors. Facilities throw `PlatformError`; the REST layer and the Connect
 * interceptor each map it once, so a status or a code is never chosen twice.
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { ErrorDetailSchema } from "../../gen/platform/meta/v1/error_pb.js";
import type { Logger } from "pino";
import { isDatabaseUnreachable, mayHaveCommitted, type DatabaseHealth } from "./database/health.ts";

/** The hint of a 503 while the database is unreachable: a restart or a failover takes seconds. */
export const DATABASE_RETRY_AFTER_SECONDS = 2;

export type ErrorCode =
  | "invalid_argument"
  | "unauthenticated"
  | "app_stopped"
  | "permission_denied"
  | "not_found"
  | "secret_not_set"
  | "conflict"
  | "failed_precondition"
  | "payload_too_large"
  | "quota_exceeded"
  | "queue_full"
  | "too_many_links"
  /** The app's request rate or concurrency limit (docs/api.md#rate-limits); retry after `Retry-After`. */
  | "rate_limited"
  | "idempotency_key_in_use"
  | "idempotency_key_reused"
  | "not_configured"
  | "upstream_error"
  | "unavailable"
  | "internal"
  /** Connect and gRPC only: the call's deadline (`connect-timeout-ms`, `grpc-timeout`) passed first. */
  | "deadline_exceeded"
  /** Connect and gRPC only: no such service or method on this server. */
  | "unimplemented";

/**
 * The one table of codes: each code's HTTP status and Connect code. `bare`
 * marks the code a Connect code stands for when a `ConnectError` carries no
 * ErrorDetail of ours (the protocol layer's, another server's): one per
 * Connect code, the generic one (`failed_precondition`, not `secret_not_set`).
 */
const mapping: Record<ErrorCode, { status: number; connect: Code; bare?: true }> = {
  invalid_argument: { status: 400, connect: Code.InvalidArgument, bare: true },
  unauthenticated: { status: 401, connect: Code.Unauthenticated, bare: true },
  app_stopped: { status: 403, connect: Code.PermissionDenied },
  permission_denied: { status: 403, connect: Code.PermissionDenied, bare: true },
  not_found: { status: 404, connect: Code.NotFound, bare: true },
  secret_not_set: { status: 409, connect: Code.FailedPrecondition },
  // A write made on a stale view of a record (the admin API's `expected_revision`).
  conflict: { status: 409, connect: Code.Aborted, bare: true },
  // An operation refused until the caller confirms what it would destroy.
  failed_precondition: { status: 409, connect: Code.FailedPrecondition, bare: true },
  payload_too_large: { status: 413, connect: Code.ResourceExhausted },
  quota_exceeded: { status: 429, connect: Code.ResourceExhausted, bare: true },
  queue_full: { status: 429, connect: Code.ResourceExhausted },
  too_many_links: { status: 429, connect: Code.ResourceExhausted },
  rate_limited: { status: 429, connect: Code.ResourceExhausted },
  idempotency_key_in_use: { status: 409, connect: Code.Aborted },
  idempotency_key_reused: { status: 422, connect: Code.InvalidArgument },
  not_configured: { status: 501, connect: Code.Unimplemented, bare: true },
  upstream_error: { status: 502, connect: Code.Unavailable, bare: true },
  unavailable: { status: 503, connect: Code.Unavailable },
  internal: { status: 500, connect: Code.Internal },
  deadline_exceeded: { status: 504, connect: Code.DeadlineExceeded, bare: true },
  unimplemented: { status: 501, connect: Code.Unimplemented },
};

/** Every code, in the order of the error table (the app client keeps a copy; a test ties the two). */
export const ERROR_CODES = Object.keys(mapping) as readonly ErrorCode[];

/** The code of a bare Connect code: the entry of `mapping` marked `bare` for it. */
const codeByConnect = new Map<Code, ErrorCode>(
  ERROR_CODES.filter((code) => mapping[code].bare).map((code) => [mapping[code].connect, code]),
);

export interface PlatformErrorOptions {
  /** Human-readable specifics, e.g. which field and why. Never secrets or values. */
  details?: string[];
  /** Seconds until a retry may succeed; required for 429s (sent as `Retry-After`). */
  retryAfterSeconds?: number;
  /** The underlying error, for the log only; it never reaches the caller. */
  cause?: unknown;
  /**
   * The work may have been done although this error is answered: a provider
   * that failed or went silent after the request reached it (SES may have
   * taken the mail). Under an Idempotency-Key this error is the key's answer,
   * replayed to a repeat, instead of letting the repeat do the work again.
   */
  outcomeUnknown?: boolean;
  /**
   * A 503 whose request's change may have been committed (the database did not
   * answer a statement it was sent). Sent as the `Outcome-Unknown: true` header
   * (REST, and Connect/gRPC metadata), so a client does not repeat a change
   * without its Idempotency-Key. Unlike `outcomeUnknown`, not stored as a
   * key's answer: a repeat under the key finds the first run's answer, or runs.
   */
  mayHaveCommitted?: boolean;
}

/** The `details` line of an answer whose change may have been made (see `PlatformErrorOptions.mayHaveCommitted`). */
const OUTCOME_UNKNOWN_DETAIL = "outcome: unknown, the change may have been committed";

/** The header that flags it, on REST answers and Connect/gRPC errors. */
export const OUTCOME_UNKNOWN_HEADER = "outcome-unknown";

export class PlatformError extends Error {
  override readonly name = "PlatformError";
  readonly code: ErrorCode;
  readonly details: string[] | undefined;
  readonly retryAfterSeconds: number | undefined;
  readonly outcomeUnknown: boolean;
  readonly mayHaveCommitted: boolean;

  constructor(code: ErrorCode, message: string, options: PlatformErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.details = options.details;
    this.retryAfterSeconds = options.retryAfterSeconds;
    this.outcomeUnknown = options.outcomeUnknown ?? false;
    this.mayHaveCommitted = options.mayHaveCommitted ?? false;
  }

  get status(): number {
    return mapping[this.code].status;
  }
}

/** The HTTP status of a code (used by the OpenAPI document, so it lists what the router sends). */
export function statusOf(code: ErrorCode): number {
  return mapping[code].status;
}

/** Whether `code` is the generic one its Connect code stands for (the app client reads a bare status the same way). */
export function isBareCode(code: ErrorCode): boolean {
  return mapping[code].bare === true;
}

/** A 400 whose message names the field and the rule, e.g. `invalidArgument("subject", "must be 1 to 200 characters")`. */
export function invalidArgument(field: string, rule: string): PlatformError {
  return new PlatformError("invalid_argument", `${field}: ${rule}`, { details: [`${field}: ${rule}`] });
}

/** Whether `err`, or what caused it, is a PostgreSQL error whose SQLSTATE passes `test`. */
function hasSqlState(err: unknown, test: (state: string) => boolean): boolean {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string" && test(code)) return true;
  }
  return false;
}

/**
 * PostgreSQL's transaction rollbacks (class 40: a deadlock, a serialisation
 * failure): the whole transaction was undone, so the caller may simply retry.
 * Lock orders are chosen so none is expected; should one happen anyway, it is
 * a 409 `conflict` to retry, not a 500.
 */
const isTransactionAborted = (err: unknown) => hasSqlState(err, (s) => s === "40P01" || s === "40001");

/**
 * A row that names its app refused because the app is gone (23503, a foreign
 * key violation, on a table's `app_id` constraint): the app was deleted while
 * the request ran, after it was authenticated. A new request would be refused
 * 401, and so is this one, instead of a 500.
 */
function isAppGone(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    const { code, constraint } = e as { code?: unknown; constraint?: unknown };
    if (code === "23503" && typeof constraint === "string" && constraint.endsWith("app_id_fkey")) return true;
  }
  return false;
}

/**
 * PostgreSQL's data exceptions (class 22: a number or a time out of range, a
 * NUL character in text): a value the database cannot take, which came from
 * the request, so a 400, not a 500.
 */
const isDataException = (err: unknown) => hasSqlState(err, (s) => /^22[0-9A-Z]{3}$/.test(s));

/**
 * Turns anything thrown into a PlatformError. Errors that are not ours become
 * `internal` with a fixed message: their text may carry internals (SQL,
 * hostnames, values) and is only ever logged.
 */
export function toPlatformError(err: unknown): PlatformError {
  if (err instanceof PlatformError) return err;
  if (isDatabaseUnreachable(err)) {
    if (mayHaveCommitted(err))
      return new PlatformError(
        "unavailable",
        "the database stopped answering during this request: a change it makes may have been made; repeat it only with the same Idempotency-Key, or check first",
        {
          details: [OUTCOME_UNKNOWN_DETAIL],
          retryAfterSeconds: DATABASE_RETRY_AFTER_SECONDS,
          mayHaveCommitted: true,
          cause: err,
        },
      );
    return new PlatformError("unavailable", "the database cannot be reached right now; retry shortly", {
      retryAfterSeconds: DATABASE_RETRY_AFTER_SECONDS,
      cause: err,
    });
  }
  if (isTransactionAborted(err)) {
    return new PlatformError("conflict", "the change met a concurrent one and was not made; retry it", { cause: err });
  }
  if (isAppGone(err)) return new PlatformError("unauthenticated", "the app was deleted", { cause: err });
  if (isDataException(err)) {
    // The edge's checks name the field of every such value they know of; this is the net under them.
    return new PlatformError(
      "invalid_argument",
      "a value is out of the range the database can store, or holds a character it cannot store (NUL)",
      { cause: err },
    );
  }
  if (err instanceof ConnectError) {
    const fromDetail = err.findDetails(ErrorDetailSchema)[0];
    const code = (fromDetail?.code as ErrorCode | undefined) ?? codeByConnect.get(err.code);
    if (code && code in mapping) {
      return new PlatformError(code, err.rawMessage, {
        details: fromDetail?.details.length ? fromDetail.details : undefined,
        retryAfterSeconds: fromDetail?.retryAfterSeconds,
        cause: err,
      });
    }
  }
  return new PlatformError("internal", "internal error", { cause: err });
}

/**
 * What answering an error does besides the answer, written once for REST
 * (`http/error-handler.ts`) and Connect (`http/connect-interceptor.ts`): a
 * fault of ours is logged with its internals (the answer never carries them),
 * and a database that cannot be reached is reported to `health`, which warns
 * once per outage rather than once per request.
 */
export function noteAnswered(
  err: PlatformError,
  logged: { original: unknown; logger: Pick<Logger, "error">; bindings?: Record<string, unknown> },
  health: Pick<DatabaseHealth, "failed">,
): void {
  if (err.code === "internal") logged.logger.error({ err: logged.original, ...logged.bindings }, "unexpected error");
  else if (err.code === "unavailable") health.failed(err.cause);
}

/** The REST error envelope of docs/api.md#errors. */
export function toEnvelope(err: PlatformError): { error: { code: string; message: string; details?: string[] } } {
  return {
    error: {
      code: err.code,
      message: err.message,
      ...(err.details && err.details.length > 0 ? { details: err.details } : {}),
    },
  };
}

/** The same error for Connect and gRPC clients, with our string code in an `ErrorDetail`. */
export function toConnectError(err: PlatformError): ConnectError {
  const detail = create(ErrorDetailSchema, {
    code: err.code,
    details: err.details ?? [],
    retryAfterSeconds: err.retryAfterSeconds,
  });
  const metadata = new Headers();
  if (err.retryAfterSeconds !== undefined) metadata.set("retry-after", String(err.retryAfterSeconds));
  if (err.mayHaveCommitted || err.outcomeUnknown) metadata.set(OUTCOME_UNKNOWN_HEADER, "true");
  return new ConnectError(err.message, mapping[err.code].connect, metadata, [
    { desc: ErrorDetailSchema, value: detail },
  ]);
}
