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
   * A connection was made, or a statement (`statement`) sent at `sentAt` (epoch
   * ms) answered: an outage, if there was one, is over. A statement sent before
   * the outage began, or within `OUTAGE_SETTLE_MS` after, proves nothing (it
   * may answer while the server is going down). When the outage is a read-only
   * server (a failover), only a write answering ends it: reads, and new
   * connections, answer on a standby too.
   */
  succeeded(sentAt?: number, statement?: string): void;
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
/**
 * SQLSTATEs of a failover: a server that is not (or no longer) the primary.
 * 25006 (`read_only_sql_transaction`) is a write reaching a standby, which
 * happens while a proxy in front of the database (HAProxy, a VIP, DNS)
 * already sends new connections to the standby and it is not promoted yet;
 * 57P01-57P03 are the server ending the connection (an administrator, a
 * crash, a start). The connection is then of no further use: see `isFailover`.
 */
const FAILOVER_STATES = new Set(["25006", "57P01", "57P02", "57P03"]);
/**
 * A standby cancelling a statement that conflicts with the WAL it replays:
 * PostgreSQL reports it as 40001 (or 40P01 for a buffer deadlock), the codes
 * of a serialisation failure, so only the message tells it apart. It is the
 * server's state, not the request's fault, and not a conflict to report 409.
 */
const RECOVERY_CONFLICT = "conflict with recovery";

/** Whether `e` is a recovery-conflict cancel of a standby (see `RECOVERY_CONFLICT`). */
function isRecoveryConflict(e: Error): boolean {
  const code = (e as { code?: unknown }).code;
  return (code === "40001" || code === "40P01") && e.message.includes(RECOVERY_CONFLICT);
}

/**
 * Is `err` (or what caused it) a statement refused because its connection
 * reached a server that is not the primary, or that ended the connection? An
 * outage (answered 503 like `isDatabaseUnreachable`), and the connection must
 * be discarded, not given back to the pool: after a failover it still leads
 * to the standby (read-only) or to a server going away.
 */
export function isFailover(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string" && (FAILOVER_STATES.has(code) || code.startsWith("08"))) return true;
    if (isRecoveryConflict(e)) return true;
  }
  return false;
}
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
      (NETWORK_CODES.has(code) ||
        SERVER_STATES.has(code) ||
        FAILOVER_STATES.has(code) ||
        code === STATEMENT_TIMEOUT ||
        code.startsWith("08"))
    )
      return true;
    if (isRecoveryConflict(e)) return true;
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

/**
 * A statement that writes (or locks rows to write them): one answering proves the server takes writes
 * again. A read-only server refuses each of these with 25006, `SELECT ... FOR UPDATE` included.
 */
const WRITES = /\b(INSERT|UPDATE|DELETE|MERGE)\b/i;

/** Whether `err` is a server that is read-only: a write refused (25006), or a standby's recovery conflict. */
function isReadOnly(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    if ((e as { code?: unknown }).code === "25006" || isRecoveryConflict(e)) return true;
  }
  return false;
}

export function createDatabaseHealth(log?: HealthLog): DatabaseHealth {
  let downSince: number | undefined;
  /** The outage includes a read-only server: only a write answering ends it. */
  let readOnly = false;
  return {
    failed(err) {
      if (!isDatabaseUnreachable(err)) return false;
      if (isReadOnly(err)) readOnly = true;
      if (downSince === undefined) {
        downSince = Date.now();
        log?.warn(
          { err: err instanceof Error ? err.message || (err as NodeJS.ErrnoException).code : String(err) },
          "database unreachable: answering 503 until it is back",
        );
      }
      return true;
    },
    succeeded(sentAt, statement) {
      if (downSince === undefined || (sentAt !== undefined && sentAt <= downSince + OUTAGE_SETTLE_MS)) return;
      if (readOnly && (statement === undefined || !WRITES.test(statement))) return;
      log?.info({ outageMs: Date.now() - downSince }, "database reachable again");
      downSince = undefined;
      readOnly = false;
    },
    get reachable() {
      return downSince === undefined;
    },
  };
}
