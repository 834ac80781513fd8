/**
 * What an instance remembers of a database read for a moment: the service tokens found and the operator
 * tokens (auth.ts), the queue policies (queue-policy.ts). Each is read on nearly every request, and changes
 * seldom; a change made on this instance is told at once (`set`, `clear`), one made elsewhere shows within the
 * lifetime.
 *
 * - A value is served for `lifetimeMs` from when its read began, never longer.
 * - In the last half of that time it is read again in the background, beside the callers, who are served
 *   what is remembered: a key in steady use then never waits for its read (one request in a hundred of an app
 *   making 50 a second did, and on a busy database, or under another app's flood, that wait was among the
 *   app's slowest). What the new read finds replaces the entry only while the entry is still the key's (a
 *   `set` or `clear` meanwhile wins).
 * - Callers that miss together share one read, and a read that fails is not kept (the next caller reads again).
 * - `keeps` decides what is remembered at all: a token not found is not, so an unknown token is read every
 *   time and a refresh that no longer finds one forgets it at once.
 */
export interface RefreshingCacheOptions<V> {
  /** How long a value is served, from when its read began; 0 remembers nothing. */
  lifetimeMs: number;
  read(key: string): Promise<V>;
  /** Whether a value read is remembered; default all. */
  keeps?: (value: V) => boolean;
  clock?: () => number;
  /** The memory is emptied when it reaches this many keys (a bound against a flood of distinct keys). */
  maxEntries?: number;
}

export interface RefreshingCache<V> {
  /** The remembered value, or the read's (shared with the callers that missed with this one). */
  get(key: string): Promise<V>;
  /** The remembered value without waiting; undefined when there is none (or it is still being read). */
  peek(key: string): V | undefined;
  /** Remembers `value` as read now: what this instance just wrote. */
  set(key: string, value: V): void;
  /** Forgets every key: something they depend on changed. */
  clear(): void;
}

interface Entry<V> {
  /** When its read began. */
  at: number;
  read: Promise<V>;
  /** Set once the read has answered and is kept. */
  done: boolean;
  value: V | undefined;
  /** Being read again in the background. */
  refreshing: boolean;
}

export function createRefreshingCache<V>(options: RefreshingCacheOptions<V>): RefreshingCache<V> {
  const { lifetimeMs } = options;
  const keeps = options.keeps ?? (() => true);
  const clock = options.clock ?? Date.now;
  const maxEntries = options.maxEntries ?? 10_000;
  const entries = new Map<string, Entry<V>>();

  const put = (key: string, entry: Entry<V>) => {
    if (entries.size >= maxEntries && !entries.has(key)) entries.clear();
    entries.set(key, entry);
  };
  const answered = (at: number, value: V): Entry<V> => ({
    at,
    read: Promise.resolve(value),
    done: true,
    value,
    refreshing: false,
  });
  const readNow = (key: string, at: number): Promise<V> => {
    const entry: Entry<V> = { at, read: options.read(key), done: false, value: undefined, refreshing: false };
    entry.read.then(
      (value) => {
        if (entries.get(key) !== entry) return;
        if (keeps(value)) Object.assign(entry, { done: true, value });
        else entries.delete(key);
      },
      () => entries.get(key) === entry && entries.delete(key),
    );
    put(key, entry);
    return entry.read;
  };
  /** The fresh entry of `key`, after starting its background read when it is in its last half. */
  const fresh = (key: string): Entry<V> | undefined => {
    const hit = entries.get(key);
    const now = clock();
    if (!hit || now - hit.at >= lifetimeMs) return undefined;
    if (hit.done && !hit.refreshing && now - hit.at >= lifetimeMs / 2) {
      hit.refreshing = true;
      options.read(key).then(
        (value) => {
          if (entries.get(key) !== hit) return;
          if (keeps(value)) put(key, answered(now, value));
          else entries.delete(key);
        },
        // Still served until its time ends; the next caller in its last half tries again.
        () => void (hit.refreshing = false),
      );
    }
    return hit;
  };

  return {
    get(key) {
      if (lifetimeMs <= 0) return options.read(key);
      return fresh(key)?.read ?? readNow(key, clock());
    },
    peek(key) {
      const hit = fresh(key);
      return hit?.done ? hit.value : undefined;
    },
    set(key, value) {
      if (lifetimeMs > 0) put(key, answered(clock(), value));
    },
    clear() {
      entries.clear();
    },
  };
}
