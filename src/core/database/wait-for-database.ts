/**
 * Waiting at start for a PostgreSQL that cannot be reached yet. In a compose
 * file or a Kubernetes rollout the service and its database start together,
 * and a database that is still starting (or a standby not yet promoted) is
 * not a fault: the start tries again with backoff, logging each wait, until
 * `DATABASE_WAIT_SECONDS` have passed; then it fails with one line. Any
 * other error (a wrong password, a missing database) fails at once: waiting
 * would not mend it.
 */
import type { Db } from "./database.ts";
import { isDatabaseUnreachable } from "./health.ts";
import { pingDatabase } from "./ping.ts";
import { NotReadyError } from "../readiness.ts";

interface WaitLog {
  warn(fields: object, message: string): void;
}

export interface WaitOptions {
  /** The longest wait in all, from the first attempt; 0 means one attempt. */
  waitSeconds: number;
  /** What the log and the final error name: the host and the database, never the user or the password. */
  target: { host: string; database: string };
  log: WaitLog;
  /** Given up on (the process is stopping): the wait rejects with the signal's reason. */
  signal?: AbortSignal;
}

/** The first pause between attempts, doubled after each up to `MAX_PAUSE_MS`. */
const FIRST_PAUSE_MS = 250;
const MAX_PAUSE_MS = 5000;
/** How long one attempt may take before it counts as no answer. */
const ATTEMPT_TIMEOUT_MS = 5000;

/** Where a connection string leads, without its credentials: `host:port` and the database's name. */
export function databaseTarget(connectionString: string): { host: string; database: string } {
  const url = new URL(connectionString);
  return {
    host: url.port ? `${url.hostname}:${url.port}` : url.hostname,
    database: url.pathname.slice(1) || "postgres",
  };
}

/** Why an attempt failed, in a few words: an error code or the driver's message, never a connection string. */
function reasonOf(err: unknown): string {
  if (err instanceof NotReadyError) return err.reason;
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string") return code;
    if (e instanceof AggregateError && e.errors[0] instanceof Error) return reasonOf(e.errors[0]);
  }
  return err instanceof Error ? err.message : String(err);
}

/** Resolves once `db` answers and takes writes; rejects with one line when the wait is over. */
export async function waitForDatabase(db: Db, options: WaitOptions): Promise<void> {
  const { target, log, signal } = options;
  const deadline = Date.now() + options.waitSeconds * 1000;
  let pause = FIRST_PAUSE_MS;
  for (let attempt = 1; ; attempt++) {
    signal?.throwIfAborted();
    try {
      await pingDatabase(db, AbortSignal.timeout(ATTEMPT_TIMEOUT_MS));
      return;
    } catch (err) {
      // A read-only server is a standby not promoted yet (or a primary being failed over): worth the wait too.
      if (!(err instanceof NotReadyError) && !isDatabaseUnreachable(err)) throw err;
      const reason = reasonOf(err);
      const left = deadline - Date.now();
      if (left <= 0) {
        throw new Error(
          `database: ${target.host}/${target.database} not reachable within ${options.waitSeconds} s ` +
            `(DATABASE_WAIT_SECONDS): ${reason}`,
          { cause: err },
        );
      }
      const retryInMs = Math.min(pause, left);
      log.warn({ ...target, attempt, reason, retryInMs }, "waiting for the database");
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(resolve, retryInMs);
        signal?.addEventListener(
          "abort",
          () => {
            clearTimeout(timer);
            reject(signal.reason as Error);
          },
          { once: true },
        );
      });
      pause = Math.min(pause * 2, MAX_PAUSE_MS);
    }
  }
}
