/**
 * Coalesces concurrent calls that can share one SQL statement (puts on one
 * queue, claims on one queue, acks), so that under load one round trip and
 * one commit serve many requests, and with a single caller nothing waits.
 *
 * Calls are grouped by key. A call on an idle key goes at once (after the
 * caller's synchronous work, so calls made together still go together); while
 * `maxInFlight` statements of a key are running, further calls queue and go
 * in the next statement as soon as one finishes (below `maxInFlight`, at the
 * end of the current turn of the event loop). This is what makes a batch grow
 * with the load instead of with a timer: an idle service sends each call at
 * once, with no added latency, and a busy one sends fewer, larger statements.
 *
 * `run` gets the items in arrival order and returns one result per item, in
 * the same order; an error of `run` (the statement failed, nothing of it was
 * committed) rejects every call of that batch. Each caller is answered only
 * when its statement has finished, i.e. after its commit.
 */
export interface BatcherOptions<I, O> {
  /** Runs one batch: same key, at most `maxBatch` items, arrival order; returns a result per item. */
  run: (key: string, items: I[]) => Promise<O[]>;
  /** Largest batch (a statement's row count). */
  maxBatch: number;
  /** Statements of one key running at once. */
  maxInFlight: number;
}

interface Pending<I, O> {
  item: I;
  resolve: (value: O) => void;
  reject: (err: unknown) => void;
}

interface Group<I, O> {
  queued: Pending<I, O>[];
  inFlight: number;
  scheduled: boolean;
}

export interface Batcher<I, O> {
  call(key: string, item: I): Promise<O>;
}

export function createBatcher<I, O>(options: BatcherOptions<I, O>): Batcher<I, O> {
  const groups = new Map<string, Group<I, O>>();

  const flush = (key: string, group: Group<I, O>) => {
    group.scheduled = false;
    while (group.queued.length > 0 && group.inFlight < options.maxInFlight) {
      const batch = group.queued.splice(0, options.maxBatch);
      group.inFlight++;
      options
        .run(
          key,
          batch.map((p) => p.item),
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
          if (group.queued.length > 0) flush(key, group);
          else if (group.inFlight === 0 && !group.scheduled) groups.delete(key);
        });
    }
  };

  return {
    call(key, item) {
      let group = groups.get(key);
      if (!group) groups.set(key, (group = { queued: [], inFlight: 0, scheduled: false }));
      const g = group;
      return new Promise<O>((resolve, reject) => {
        g.queued.push({ item, resolve, reject });
        if (!g.scheduled && g.inFlight < options.maxInFlight) {
          g.scheduled = true;
          // Idle key: go at once (after the caller's synchronous work), for
          // latency. Busy key: wait for the end of this turn of the event
          // loop, so the calls of this turn share the extra statement.
          if (g.inFlight === 0) queueMicrotask(() => flush(key, g));
          else setImmediate(() => flush(key, g));
        }
      });
    },
  };
}
