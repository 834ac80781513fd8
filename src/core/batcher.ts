/**
 * Coalesces concurrent calls that can share one SQL statement (puts on one
 * queue, claims on one queue, acks), so that under load one round trip and
 * one commit serve many requests, and with a single caller nothing waits.
 *
 * Calls are grouped by key. A call goes at the end of the current turn of the
 * event loop (`setImmediate`: after the I/O callbacks of this turn), so the
 * requests read in one turn, from any connections, share one statement; while
 * `maxInFlight` statements of a key are running, further calls queue and go
 * in the next statement as soon as one finishes. This is what makes a batch
 * grow with the load instead of with a timer: an idle service sends each call
 * within the turn it arrived in, with no timer, and a busy one sends fewer,
 * larger statements.
 *
 * Why the end of the turn and not at once (a microtask) for an idle key: at
 * once, the first request of a turn went alone and the rest waited for its
 * statement, so batches stayed small whenever a statement ran short of the
 * next turn. On two cores, REST put -> consume -> ack went from 0.82 to 0.67
 * statements per message on one instance (+15% messages/s) and from 1.83 to
 * 1.20 on three (+40%), in `bench/queues.ts` terms.
 *
 * A quiet key (`quietMs`: no call for that long) is the exception: its call
 * goes at once (a microtask, so calls made together still share it). Nothing
 * of that key is coming to share the statement, and the end of the turn is
 * only a wait behind whatever else the turn holds: under another app's flood,
 * the hundreds of requests read in that turn (bench:fairness: app B's claims
 * and acks, a few a second, waited up to 10 to 25 ms there). Sent at once, the
 * statement runs in the database while the event loop works through the rest.
 *
 * Apps take turns: each app's calls (the app of the work, `tenant.ts`) wait
 * in a line of their own, and a batch takes one call from each waiting app in
 * turn (round robin), not the first `maxBatch` in arrival order; so one app's
 * flood of acks on a shared key costs another app's ack at most a place in
 * the next statement. A batch of one app's calls runs as that app's work (its
 * share of the database pool), one of several apps' as no app's.
 *
 * `run` gets the items in that order and returns one result per item, in
 * the same order; an error of `run` (the statement failed, nothing of it was
 * committed) rejects every call of that batch. Each caller is answered only
 * when its statement has finished, i.e. after its commit.
 */
import { currentTenant, runAsNoTenant, runAsTenant } from "./tenant.ts";

export interface BatcherOptions<I, O> {
  /** Runs one batch: same key, at most `maxBatch` items, arrival order; returns a result per item. */
  run: (key: string, items: I[]) => Promise<O[]>;
  /** Largest batch (a statement's row count). */
  maxBatch: number;
  /** Statements of one key running at once. */
  maxInFlight: number;
  /**
   * A call on a key that had no call for this long (ms) goes at once (at the end of the current task, a
   * microtask), not at the end of the turn; undefined: never. See "A quiet key" above.
   */
  quietMs?: number;
}

interface Pending<I, O> {
  item: I;
  resolve: (value: O) => void;
  reject: (err: unknown) => void;
}

interface Group<I, O> {
  /** Each app's calls, in arrival order; the map's order is the apps' turn ("" for work of no app). */
  queued: Map<string, Pending<I, O>[]>;
  size: number;
  inFlight: number;
  scheduled: boolean;
}

export interface Batcher<I, O> {
  /** `tenant`: the app the call is for; default the current work's (`currentTenant`). */
  call(key: string, item: I, tenant?: string): Promise<O>;
}

/** Up to `max` calls of `group`, one from each app in turn; an app served goes to the back of the turn. */
function takeBatch<I, O>(group: Group<I, O>, max: number): { batch: Pending<I, O>[]; tenant: string | undefined } {
  const batch: Pending<I, O>[] = [];
  let tenant: string | undefined;
  let mixed = false;
  while (batch.length < max && group.size > 0) {
    const [key, line] = group.queued.entries().next().value as [string, Pending<I, O>[]];
    batch.push(line.shift()!);
    group.size--;
    group.queued.delete(key);
    if (line.length > 0) group.queued.set(key, line);
    if (batch.length === 1) tenant = key;
    else if (key !== tenant) mixed = true;
  }
  return { batch, tenant: mixed || tenant === "" ? undefined : tenant };
}

export function createBatcher<I, O>(options: BatcherOptions<I, O>): Batcher<I, O> {
  const groups = new Map<string, Group<I, O>>();
  /** When each key was last called, oldest first (for `quietMs`); keys quiet for longer are dropped. */
  const lastCall = new Map<string, number>();
  const quietMs = options.quietMs;
  /** Whether `key` was quiet for `quietMs` until now; notes this call. */
  const wasQuiet = (key: string): boolean => {
    const now = performance.now();
    const last = lastCall.get(key);
    lastCall.delete(key);
    lastCall.set(key, now);
    if (lastCall.size > 256)
      for (const [k, at] of lastCall) {
        if (now - at <= quietMs!) break;
        lastCall.delete(k);
      }
    return last === undefined || now - last > quietMs!;
  };

  const flush = (key: string, group: Group<I, O>) => {
    group.scheduled = false;
    while (group.size > 0 && group.inFlight < options.maxInFlight) {
      const { batch, tenant } = takeBatch(group, options.maxBatch);
      group.inFlight++;
      const items = batch.map((p) => p.item);
      (tenant === undefined
        ? runAsNoTenant(() => options.run(key, items))
        : runAsTenant(tenant, () => options.run(key, items))
      )
        .then(
          (results) => {
            for (let i = 0; i < batch.length; i++) batch[i].resolve(results[i]);
          },
          (err: unknown) => {
            for (const p of batch) p.reject(err);
          },
        )
        .finally(() => {
          group.inFlight--;
          if (group.size > 0) flush(key, group);
          else if (group.inFlight === 0 && !group.scheduled) groups.delete(key);
        });
    }
  };

  return {
    call(key, item, tenant = currentTenant()) {
      const quiet = quietMs !== undefined && wasQuiet(key);
      let group = groups.get(key);
      if (!group) groups.set(key, (group = { queued: new Map(), size: 0, inFlight: 0, scheduled: false }));
      const g = group;
      const app = tenant ?? "";
      return new Promise<O>((resolve, reject) => {
        let line = g.queued.get(app);
        if (!line) g.queued.set(app, (line = []));
        line.push({ item, resolve, reject });
        g.size++;
        if (!g.scheduled && g.inFlight < options.maxInFlight) {
          g.scheduled = true;
          // A quiet key: at once. Otherwise the end of this turn: the calls of this turn share the statement.
          if (quiet) queueMicrotask(() => flush(key, g));
          else setImmediate(() => flush(key, g));
        }
      });
    },
  };
}
