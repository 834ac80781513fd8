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
  timer: NodeJS.Timeout | undefined;
}

export function createFairGate(options: FairGateOptions): FairGate {
  const cap = Math.max(1, Math.floor(options.capacity * options.maxShare));
  let held = 0;
  let waitingCount = 0;
  const heldBy = new Map<string, number>();
  // Insertion order is the turn: a tenant served goes to the back (deleted and set again).
  const queues = new Map<string, Waiting[]>();

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
      queues.delete(key);
      if (queue.length > 0) queues.set(key, queue);
      waitingCount--;
      clearTimeout(waiter.timer);
      take(key);
      waiter.resolve();
    }
  };

  return {
    acquire(tenant) {
      const key = tenant ?? "";
      // At once when there is room, the app is under its share and has no earlier call waiting: anyone
      // waiting then waits for lack of a place (none is free) or at its own share, never for this one.
      if (held < options.capacity && (heldBy.get(key) ?? 0) < cap && !queues.has(key)) {
        take(key);
        return Promise.resolve();
      }
      return new Promise<void>((resolve, reject) => {
        const waiter: Waiting = { resolve, reject, timer: undefined };
        if (options.timeoutMs !== undefined) {
          waiter.timer = setTimeout(() => {
            const queue = queues.get(key);
            const at = queue?.indexOf(waiter) ?? -1;
            if (!queue || at < 0) return;
            queue.splice(at, 1);
            if (queue.length === 0) queues.delete(key);
            waitingCount--;
            reject(options.timeoutError?.() ?? new Error("timed out waiting for a place"));
          }, options.timeoutMs);
        }
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
