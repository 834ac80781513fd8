/**
 * The paused refusals' line (`rate-limiter.ts`): a refusal answered after a pause waits here, and the pauses
 * that are over are answered a few a turn of the event loop, app by app in turn, not all at once.
 *
 * Why: a client that ignores `Retry-After` and calls again at once has its refusals paused, and a flood of
 * such clients (300 long-polls refused together) has hundreds of pauses ending within a few milliseconds
 * of each other. Each is then answered: a 429 rendered, written and counted. Ended by their own timers,
 * they were all answered in one stretch of the loop's timers phase (up to 17 ms of CPU in one stretch in
 * bench:fairness), and any other app's request that arrived meanwhile waited for the whole stretch before
 * the service read it. Here a timer only moves its pause to its app's line; the lines are answered at most
 * `perTurn` a turn (`setImmediate`), so the loop reads the sockets between every few refusals: another app's
 * call waits for a few refusals, not for hundreds.
 */
export interface PauseLine {
  /** Resolves about `ms` from now (no sooner), in `appId`'s turn among the pauses over by then. */
  wait(appId: string, ms: number): Promise<void>;
  /** Pauses not answered yet: waiting for their time or for their turn (tests). */
  size(): number;
}

export function createPauseLine(options: { perTurn: number }): PauseLine {
  /** The pauses that are over and wait for their turn, per app; the map's order is the turn. */
  const ready = new Map<string, (() => void)[]>();
  let pending = 0;
  let draining = false;

  const drain = () => {
    for (let sent = 0; sent < options.perTurn && ready.size > 0; sent++) {
      const [appId, line] = ready.entries().next().value as [string, (() => void)[]];
      const resolve = line.shift()!;
      // The app served goes to the back of the turn.
      ready.delete(appId);
      if (line.length > 0) ready.set(appId, line);
      pending--;
      resolve();
    }
    // The next few go in the next turn, after the loop has read whatever arrived meanwhile.
    if (ready.size > 0) setImmediate(drain);
    else draining = false;
  };

  const over = (appId: string, resolve: () => void) => {
    let line = ready.get(appId);
    if (!line) ready.set(appId, (line = []));
    line.push(resolve);
    if (!draining) {
      draining = true;
      setImmediate(drain);
    }
  };

  return {
    wait(appId, ms) {
      pending++;
      return new Promise<void>((resolve) => setTimeout(() => over(appId, resolve), ms).unref());
    },
    size: () => pending,
  };
}
