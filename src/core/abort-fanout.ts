/**
 * One listener on a long-lived signal (the server's shutdown) for many short-lived waiters (waiting
 * consumes, open streams, event-feed reads). Not a listener each: an AbortSignal's addEventListener and
 * removeEventListener walk all its listeners, so with hundreds of waiters each one that began or ended paid for
 * all the others, and a burst of long-polls ending together (one app's, all with the same wait) held the event
 * loop for every app. A Set's add and delete do not.
 */
export interface AbortFanout {
  /** Calls `onAbort` when the signal aborts, until `delete` (at once if it already has). */
  add(onAbort: () => void): void;
  delete(onAbort: () => void): void;
}

export function createAbortFanout(signal: AbortSignal): AbortFanout {
  const waiting = new Set<() => void>();
  signal.addEventListener(
    "abort",
    () => {
      for (const onAbort of waiting) onAbort();
      waiting.clear();
    },
    { once: true },
  );
  return {
    add(onAbort) {
      if (signal.aborted) onAbort();
      else waiting.add(onAbort);
    },
    delete(onAbort) {
      waiting.delete(onAbort);
    },
  };
}
