/**
 * The app a piece of work is done for, carried along the async path of its
 * request (AsyncLocalStorage), so that what apps share can be shared out per
 * app without threading the app through every call: the database pool
 * (`database/fair-pool.ts`) serves waiting apps in turn and caps each one's
 * share. Set once per facility call, where the call is admitted
 * (`limits/admission.ts`); work outside any call (housekeeping, a batch
 * serving several apps) runs with no tenant and is never capped.
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
