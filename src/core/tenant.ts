/**
 * The app a piece of work is done for, carried along the async path of its
 * request (AsyncLocalStorage), so that what apps share can be shared out per
 * app without threading the app through every call: the database pool
 * (`database/pg-pool.ts`, through `fair-gate.ts`) serves waiting apps in turn and caps each one's
 * share. Set once per facility call, where the call is admitted (the REST
 * router and the Connect interceptor, which also runs each step of a stream's
 * messages in its app's name); work outside any call (token lookups,
 * housekeeping, a batch serving several apps) runs with no tenant, which the
 * pool holds to one share as if it were one more app.
 */
import { AsyncLocalStorage } from "node:async_hooks";

const storage = new AsyncLocalStorage<string>();

/** Runs `fn` as work of `appId`. */
export function runAsTenant<T>(appId: string, fn: () => T): T {
  return storage.run(appId, fn);
}

/** Runs `fn` as nobody's work (a statement shared by several apps). */
export function runAsNoTenant<T>(fn: () => T): T {
  return storage.exit(fn);
}

/** The app the current work is for, if any. */
export function currentTenant(): string | undefined {
  return storage.getStore();
}
