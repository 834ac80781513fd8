/**
 * A gate of `capacity` places shared by apps, which serves waiting apps in
 * turn (round robin), not in arrival order, and never lets one app hold more
 * than `maxShare` of the places. One app's flood then queues behind itself:
 * another app's call waits for at most one call of each app waiting before
 * it, not for the flood; and the places the flooding app cannot take stay
 * free for the others even when its own calls are stuck (a lock, a slow
 * statement), so they never wait for its calls to end. Work of no app (`undefined`:
 * housekeeping, a statement shared by several apps) is a tenant of its own,
 * served in turn like an app.
 *
 * Used in front of the database pool (`database/pg-pool.ts`) and the
 * analytics ingest.
 */
export interface FairGate {
  /** Resolves when `tenant` may go; rejects with `timeoutError()` after `timeoutMs`. Call `release` once after. */
  acquire(tenant: string | undefined): Promise<void>;
  release(tenant: string | undefined): void;
  /** Places held now, per tenant ("" for no tenant), and callers waiting (metrics and tests). */
  stats(): { held: number; waiting: number; heldBy: Map<string, number> };
}

export interface FairGateOptions {
  capacity: number;
  /** The part of `capacity` one tenant may hold (0 to 1); at least one place. */
  maxShare: number;
  /** How long a caller may wait; undefined: no bound. */
  timeoutMs?: number;
  timeoutError?: () => Error;
}

interface Waiting {
  resolve: () => void;
  reject: (err: Error) => void;
  /** When it began to wait (`performance.now()`, which no change of the wall clock moves), for the sweep that ends waits past `timeoutMs`. */
  since: number;
}

/** The one resolved promise an acquire that goes at once returns (nothing to allocate per call). */
const AT_ONCE = Promise.resolve();

export function createFairGate(options: FairGateOptions): FairGate {
  const cap = Math.max(1, Math.floor(options.capacity * options.maxShare));
  let held = 0;
  let waitingCount = 0;
  const heldBy = new Map<string, number>();
  // Insertion order is the turn: a tenant served goes to the back (deleted and set again).
  const queues = new Map<string, Waiting[]>();
  // One sweep for every waiter, not a timer each: when a pool is busy most statements wait a moment, and a
  // timer made and cleared per wait was a measurable part of a light request's cost. A wait therefore ends
  // between `timeoutMs` and `timeoutMs` plus one sweep period after it began. The sweep runs only while
  // someone waits.
  const { timeoutMs } = options;
  const sweepEveryMs = timeoutMs === undefined ? 0 : Math.max(10, Math.min(250, timeoutMs / 10));
  let sweep: NodeJS.Timeout | undefined;
  const sweepNow = () => {
    const now = performance.now();
    for (const [key, queue] of queues) {
      // Each tenant's waiters are in arrival order: the expired ones are at its front.
      let expired = 0;
      while (expired < queue.length && now - queue[expired].since >= timeoutMs!) expired++;
      if (expired === 0) continue;
      const gone = queue.splice(0, expired);
      if (queue.length === 0) queues.delete(key);
      waitingCount -= expired;
      for (const waiter of gone) waiter.reject(options.timeoutError?.() ?? new Error("timed out waiting for a place"));
    }
    stopSweepWhenIdle();
  };
  const stopSweepWhenIdle = () => {
    if (waitingCount === 0 && sweep !== undefined) {
      clearInterval(sweep);
      sweep = undefined;
    }
  };

  const take = (key: string) => {
    held++;
    heldBy.set(key, (heldBy.get(key) ?? 0) + 1);
  };

  /** The next tenant in turn that is under its cap, if any. */
  const next = (): string | undefined => {
    for (const key of queues.keys()) if ((heldBy.get(key) ?? 0) < cap) return key;
    return undefined;
  };

  const dispatch = () => {
    while (held < options.capacity && queues.size > 0) {
      const key = next();
      if (key === undefined) return;
      const queue = queues.get(key)!;
      const waiter = queue.shift()!;
      // The tenant served goes to the back of the turn (when it is the only one waiting, it is there already:
      // deleting and setting it again on every release only filled the map with deleted entries).
      if (queue.length === 0) queues.delete(key);
      else if (queues.size > 1) {
        queues.delete(key);
        queues.set(key, queue);
      }
      waitingCount--;
      take(key);
      waiter.resolve();
    }
    stopSweepWhenIdle();
  };

  return {
    acquire(tenant) {
      const key = tenant ?? "";
      // At once when there is room, the app is under its share and has no earlier call waiting: anyone
      // waiting then waits for lack of a place (none is free) or at its own share, never for this one.
      if (held < options.capacity && (heldBy.get(key) ?? 0) < cap && !queues.has(key)) {
        take(key);
        return AT_ONCE;
      }
      return new Promise<void>((resolve, reject) => {
        const waiter: Waiting = { resolve, reject, since: timeoutMs === undefined ? 0 : performance.now() };
        if (timeoutMs !== undefined) sweep ??= setInterval(sweepNow, sweepEveryMs);
        let queue = queues.get(key);
        if (!queue) queues.set(key, (queue = []));
        queue.push(waiter);
        waitingCount++;
      });
    },
    release(tenant) {
      const key = tenant ?? "";
      const n = heldBy.get(key) ?? 0;
      if (n <= 1) heldBy.delete(key);
      else heldBy.set(key, n - 1);
      held--;
      dispatch();
    },
    stats: () => ({ held, waiting: waitingCount, heldBy: new Map(heldBy) }),
  };
}
