/**
 * Whether the platform database can be reached right now. While it cannot,
 * every request that needs it is answered 503 `unavailable` with
 * `Retry-After` (not 500: nothing is wrong with the request or the service),
 * and the log gets one warning when the outage begins and one line when a
 * connection succeeds again, instead of a stack trace per request.
 */
export interface HealthLog {
  warn(fields: object, message: string): void;
  info(fields: object, message: string): void;
}

export interface DatabaseHealth {
  /**
   * True when `err` is the database being unreachable (then the outage is
   * reported, once); false for any other error, which the caller handles.
   */
  failed(err: unknown): boolean;
  /**
   * A connection was made, or a statement sent at `sentAt` (epoch ms) answered:
   * an outage, if there was one, is over. A statement sent before the outage
   * began, or within `OUTAGE_SETTLE_MS` after, proves nothing (it may answer
   * while the server is going down).
   */
  succeeded(sentAt?: number): void;
  readonly reachable: boolean;
}

/**
 * A statement the database did not answer within its bound (see `pg-pool.ts`):
 * for the caller, the database is as unreachable as when it refuses connections.
 */
export class DatabaseNoAnswerError extends Error {
  override readonly name = "DatabaseNoAnswerError";
  constructor(boundMs: number) {
    super(`the database did not answer a statement within ${boundMs} ms`);
  }
}

/**
 * Whether `err` (or an error it was made from) is a statement the database did
 * not answer: it may have run and committed all the same, so what it did must
 * be counted as done (a reservation kept, never given back).
 */
export function isNoAnswer(err: unknown): boolean {
  for (let e = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    if (e instanceof DatabaseNoAnswerError) return true;
  }
  return false;
}

/** Failures to get a connection at all: no statement was sent, so nothing can have been committed. */
const NOT_SENT_CODES = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "57P03",
  "53300",
]);
const NOT_SENT_MESSAGES = [
  "timeout exceeded when trying to connect",
  "connection error and is not queryable",
  "Client was closed and is not queryable",
];

/**
 * Whether the database failure `err` may have left a change committed: a
 * statement sent and not answered (no answer in time, the connection cut
 * while it ran), as opposed to a connection that could not be had (nothing
 * was sent). Such a failure is answered 503 saying so (`errors.ts`), so a
 * caller does not repeat a change that was made.
 */
export function mayHaveCommitted(err: unknown): boolean {
  if (isNoAnswer(err)) return true;
  if (!isDatabaseUnreachable(err)) return false;
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string" && NOT_SENT_CODES.has(code)) return false;
    if (NOT_SENT_MESSAGES.some((m) => e instanceof Error && e.message.includes(m))) return false;
  }
  return true;
}

/** Network errors of a connection, and the server refusing or ending connections. */
const NETWORK_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "EPIPE",
  "ETIMEDOUT",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ECONNABORTED",
]);
/** SQLSTATEs of a server that is shutting down, starting up, crashed, or full (class 08: connection exceptions). */
const SERVER_STATES = new Set(["57P01", "57P02", "57P03", "53300"]);
/** `query_canceled`: only the server's own `statement_timeout` cancels statements of this service (`pg-pool.ts`). */
const STATEMENT_TIMEOUT = "57014";
const DRIVER_MESSAGES = [
  "Connection terminated",
  "connection error and is not queryable",
  "timeout exceeded when trying to connect",
  "Client was closed and is not queryable",
];

/**
 * Is `err` (or what caused it) the database being unreachable or not
 * answering in time, rather than a statement's fault? The one test of it:
 * `toPlatformError` answers such an error 503 `unavailable` with
 * `Retry-After`, whichever store or path met it.
 */
export function isDatabaseUnreachable(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    if (e instanceof AggregateError && e.errors.some((inner) => isDatabaseUnreachable(inner))) return true;
    if (e instanceof DatabaseNoAnswerError) return true;
    const code = (e as { code?: unknown }).code;
    if (
      typeof code === "string" &&
      (NETWORK_CODES.has(code) || SERVER_STATES.has(code) || code === STATEMENT_TIMEOUT || code.startsWith("08"))
    )
      return true;
    if (DRIVER_MESSAGES.some((m) => e instanceof Error && e.message.includes(m))) return true;
  }
  return false;
}

/**
 * How long after the first failure a statement's answer still proves nothing:
 * a server going down ends its connections one by one, so a statement sent
 * just after another connection failed may be answered all the same, and the
 * outage then looked over and began again (two warnings for one outage).
 */
const OUTAGE_SETTLE_MS = 1000;

export function createDatabaseHealth(log?: HealthLog): DatabaseHealth {
  let downSince: number | undefined;
  return {
    failed(err) {
      if (!isDatabaseUnreachable(err)) return false;
      if (downSince === undefined) {
        downSince = Date.now();
        log?.warn(
          { err: err instanceof Error ? err.message || (err as NodeJS.ErrnoException).code : String(err) },
          "database unreachable: answering 503 until it is back",
        );
      }
      return true;
    },
    succeeded(sentAt) {
      if (downSince === undefined || (sentAt !== undefined && sentAt <= downSince + OUTAGE_SETTLE_MS)) return;
      log?.info({ outageMs: Date.now() - downSince }, "database reachable again");
      downSince = undefined;
    },
    get reachable() {
      return downSince === undefined;
    },
  };
}
