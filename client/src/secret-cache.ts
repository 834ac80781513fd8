/**
 * The in-memory cache behind `secrets.get`. The service does not push
 * changes, and docs/api.md suggests polling the listing and comparing `version`:
 * a cached value is served as is for `maxAgeMs`; after that one listing call
 * (shared by every name and by concurrent callers) tells whether its version
 * changed, and only a changed secret is read again. A `secret.set` platform
 * event (when the client watches `_events`) refreshes a cached secret at once.
 * Values live only in this process's memory, never in logs or errors.
 */
import type { ListSecretsResponse, Secret } from "./types.ts";

export interface SecretCacheOptions {
  /** How long a cached value is served without asking the listing. Default 30000 ms; 0 asks every time. */
  maxAgeMs?: number;
}

export interface SecretCache {
  get(name: string, fresh?: boolean): Promise<Secret>;
  /**
   * A `secret.set` event: reads the secret again if it is cached with another
   * version, or being read (that read may answer the old value). Returns true
   * when it did.
   */
  refresh(name: string, version: number): Promise<boolean>;
  /** Forgets one secret, or all. */
  clear(name?: string): void;
}

interface Entry {
  secret: Secret;
  checkedAt: number;
}

export function createSecretCache(
  list: () => Promise<ListSecretsResponse>,
  read: (name: string) => Promise<Secret>,
  options: SecretCacheOptions = {},
): SecretCache {
  const maxAgeMs = options.maxAgeMs ?? 30_000;
  const entries = new Map<string, Entry>();
  const reading = new Map<string, Promise<Secret>>();
  /**
   * Bumped by a `secret.set` event: a read that started before it may answer
   * the value the event replaced, so its answer is not cached (and the event
   * starts a read of its own instead of joining it).
   */
  const generations = new Map<string, number>();
  let listing: Promise<ListSecretsResponse> | undefined;

  /** Reads `name` and caches it; joins a read under way unless `own`. */
  function readInto(name: string, own = false): Promise<Secret> {
    const running = own ? undefined : reading.get(name);
    if (running) return running;
    const generation = generations.get(name) ?? 0;
    const p: Promise<Secret> = read(name)
      .then((secret) => {
        if ((generations.get(name) ?? 0) === generation) entries.set(name, { secret, checkedAt: Date.now() });
        return secret;
      })
      .finally(() => {
        if (reading.get(name) === p) reading.delete(name);
      });
    reading.set(name, p);
    return p;
  }

  function listOnce(): Promise<ListSecretsResponse> {
    listing ??= list().finally(() => (listing = undefined));
    return listing;
  }

  return {
    async get(name, fresh = false) {
      const entry = entries.get(name);
      if (!entry || fresh) return readInto(name);
      if (Date.now() - entry.checkedAt < maxAgeMs) return entry.secret;
      const startedAt = Date.now();
      const { secrets } = await listOnce();
      const info = secrets.find((s) => s.name === name);
      const current = entries.get(name);
      if (info && current && info.version === current.secret.version) {
        current.checkedAt = startedAt;
        return current.secret;
      }
      // Changed, unset or undeclared now: reading tells which (and throws 409/404 for the last two).
      entries.delete(name);
      return readInto(name);
    },
    async refresh(name, version) {
      const entry = entries.get(name);
      if (entry?.secret.version === version) return false;
      // Nothing cached and nothing being read: the next `get` reads anyway.
      if (!entry && !reading.has(name)) return false;
      generations.set(name, (generations.get(name) ?? 0) + 1);
      entries.delete(name);
      await readInto(name, true);
      return true;
    },
    clear(name) {
      // A read under way started before: its answer is not cached either.
      for (const n of name === undefined ? reading.keys() : [name]) generations.set(n, (generations.get(n) ?? 0) + 1);
      if (name === undefined) entries.clear();
      else entries.delete(name);
    },
  };
}
