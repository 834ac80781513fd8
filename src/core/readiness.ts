/**
 * Readiness (`GET /ready`): 200 only when the platform database, the
 * analytics store and the configured providers answer. `/health` stays
 * liveness (the process answers), so a load balancer stops sending traffic
 * to an instance that cannot serve it without a process manager restarting
 * an instance that is merely waiting for its database.
 */

/**
 * A dependency that answers but cannot serve (a database that is read-only):
 * its `reason` is what `/ready` reports for it, instead of `unreachable`.
 */
export class NotReadyError extends Error {
  override readonly name = "NotReadyError";
  readonly reason: string;
  constructor(reason: string) {
    super(reason);
    this.reason = reason;
  }
}

/** One dependency: resolves when it answers, throws (with a short reason) when it does not. */
export type ReadinessCheck = (signal: AbortSignal) => Promise<void>;

export interface ReadinessReport {
  ready: boolean;
  /** `ok`, or why not, per dependency; never a host name, key or token. */
  checks: Record<string, string>;
}

/** `{ [name]: ping }`, or nothing when the dependency has no ping (it lives in the platform database or in-process). */
export function readinessOf(name: string, ping: ReadinessCheck | undefined): Record<string, ReadinessCheck> {
  return ping ? { [name]: ping } : {};
}

/** How long one check may take before it counts as not answering. */
const READINESS_TIMEOUT_MS = 2000;

export async function checkReadiness(
  checks: Record<string, ReadinessCheck>,
  timeoutMs = READINESS_TIMEOUT_MS,
): Promise<ReadinessReport> {
  const entries = await Promise.all(
    Object.entries(checks).map(async ([name, check]): Promise<[string, string]> => {
      const signal = AbortSignal.timeout(timeoutMs);
      try {
        await Promise.race([
          check(signal),
          new Promise<never>((_, reject) =>
            signal.addEventListener("abort", () => reject(new Error("timeout")), { once: true }),
          ),
        ]);
        return [name, "ok"];
      } catch (err) {
        return [name, signal.aborted ? "no answer" : err instanceof NotReadyError ? err.reason : "unreachable"];
      }
    }),
  );
  return { ready: entries.every(([, state]) => state === "ok"), checks: Object.fromEntries(entries) };
}

/**
 * `checkReadiness` of `checks()`, one run at a time: calls made while a run is
 * under way share its report. `/ready` needs no token, so a burst of it would
 * otherwise send as many pings to the database (and calls to the providers)
 * as requests, slowing every app's work.
 */
export function sharedReadiness(checks: () => Record<string, ReadinessCheck>): () => Promise<ReadinessReport> {
  let running: Promise<ReadinessReport> | undefined;
  return () =>
    (running ??= checkReadiness(checks()).finally(() => {
      running = undefined;
    }));
}
