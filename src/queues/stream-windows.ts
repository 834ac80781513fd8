/**
 * The windows of `StreamMessages`: which receipts each open stream has handed
 * out and not yet seen acknowledged. A stream may hold at most `window` of
 * them; it claims more only when one leaves its window.
 *
 * A server-streaming call cannot hear its caller, so acks arrive through
 * `AckMessage` / `AckMessages`, possibly on another connection. Every ack that
 * deletes a message on this instance is reported here (`acked`), keyed by the
 * receipt, and frees the place in the window of the stream that handed that
 * receipt out, at once. An ack made on another instance (behind a load
 * balancer that spreads the calls) is not reported here: a stream whose window
 * is full asks the database which of its receipts still hold their lease
 * (`receipts`, then `acked` for the others), every few milliseconds while
 * nothing frees, backing off to `STREAM_RECHECK_MAX_MS`; so its window frees
 * within that time of an ack anywhere. A lease that reaches its end (the
 * stream sets a timer for its earliest) is checked the same way before its
 * place frees: the caller may have extended it on another instance, which is
 * not reported here either; a lease still held is checked again a little later
 * (its place held on, as by `extended`). Lease ends are on this process's clock (the claim's or the
 * extension's answer plus the lease), never the database's `lease_until`: a
 * skew between the clocks moves nothing.
 *
 * The checks are due on a grid shared by every stream of the instance
 * (`recheckTick`): streams waiting for the same step wake in the same turn of
 * the event loop, so their questions go to the database as one statement
 * (`queue-consumers.ts`). Each stream asked on its own timer before: 1,000
 * streams with full windows, at the 100 ms step, sent 10,000 statements a second.
 */

interface StreamWindow {
  /** Receipts handed out and not yet freed (an ack here, or a check that found the lease gone). */
  readonly size: number;
  /** Records a delivery as handed out (its lease's end on this process's clock); call before it is sent, so an immediate ack finds it. */
  add(appId: string, id: string, claim: number, leaseExpiresAtMs: number): void;
  /**
   * Resolves once the window has shrunk (an ack of its own), a lease held has
   * reached its end on this process's clock (to be checked), on abort, or
   * when `recheck` resolves (a `recheckTick`).
   */
  shrunk(signal: AbortSignal, recheck?: Promise<void>): Promise<void>;
  /** The receipts held, as `{ id, claim, untilMs }` (to ask the database which still hold their lease). */
  receipts(): { id: string; claim: number; untilMs: number }[];
  /** Forgets every receipt: the stream ended (its deliveries keep their leases). */
  close(): void;
}

export interface StreamWindows {
  open(): StreamWindow;
  /** After an ack deleted a message on this instance: frees the place of that receipt, if a local stream holds it. */
  acked(appId: string, id: string, claim: number): void;
  /** After a lease was extended on this instance: its place is held until the new end. */
  extended(appId: string, id: string, claim: number, leaseExpiresAtMs: number): void;
  /**
   * Resolves at the next multiple of `ms` on this process's clock; every caller
   * asking for the same `ms` until then gets the same promise, resolved in one
   * timer callback.
   */
  recheckTick(ms: number): Promise<void>;
  /** Open streams on this instance. */
  readonly count: number;
}

/**
 * A receipt a window holds. Keyed by the message id alone (a UUID, unique across apps), the string the row
 * or the decoded receipt already is: a key made per message from app, id and claim was a string built and
 * hashed twice per streamed message (at the send and at the ack). A message is leased to one claim at a
 * time, so an id holds at most one live receipt: a newer claim of it replaces the older receipt, whose
 * lease had ended (the database would have answered so at the next check).
 */
interface Held {
  readonly appId: string;
  readonly id: string;
  readonly claim: number;
  /** The lease's end on this process's clock. */
  untilMs: number;
  readonly window: WindowImpl;
}

interface WindowImpl extends StreamWindow {
  readonly held: Map<string, Held>;
  release(id: string): void;
}

export function createStreamWindows(): StreamWindows {
  const owners = new Map<string, Held>();
  let count = 0;
  const ticks = new Map<number, Promise<void>>();

  class Window implements WindowImpl {
    readonly held = new Map<string, Held>();
    private wake: (() => void) | undefined;
    private closed = false;

    get size() {
      return this.held.size;
    }

    add(appId: string, id: string, claim: number, leaseExpiresAtMs: number) {
      if (this.closed) return;
      const before = owners.get(id);
      // An older claim added late (after a slow give-back) must not evict the receipt of a newer one.
      if (before && before.claim > claim) return;
      if (before && before.window !== this) before.window.release(id);
      const held: Held = { appId, id, claim, untilMs: leaseExpiresAtMs, window: this };
      this.held.set(id, held);
      owners.set(id, held);
    }

    release(id: string) {
      if (!this.held.delete(id)) return;
      const wake = this.wake;
      this.wake = undefined;
      wake?.();
    }

    /** Whether a lease held has reached its end here, and the earliest end of the others. */
    private due(): { reached: boolean; earliest: number } {
      const now = Date.now();
      let earliest = Infinity;
      for (const { untilMs: at } of this.held.values()) {
        if (at <= now) return { reached: true, earliest: at };
        if (at < earliest) earliest = at;
      }
      return { reached: false, earliest };
    }

    receipts() {
      return Array.from(this.held.values(), ({ id, claim, untilMs }) => ({ id, claim, untilMs }));
    }

    shrunk(signal: AbortSignal, recheck?: Promise<void>): Promise<void> {
      const { reached, earliest } = this.due();
      if (reached || signal.aborted || this.closed) return Promise.resolve();
      return new Promise<void>((resolve) => {
        let done = false;
        const finish = () => {
          if (done) return;
          done = true;
          clearTimeout(timer);
          signal.removeEventListener("abort", finish);
          this.wake = undefined;
          resolve();
        };
        // +1 ms: the lease has lapsed (not merely reached) when the timer fires.
        const timer = Number.isFinite(earliest)
          ? setTimeout(finish, Math.min(2 ** 31 - 1, Math.max(0, earliest - Date.now()) + 1))
          : undefined;
        signal.addEventListener("abort", finish, { once: true });
        void recheck?.then(finish);
        this.wake = finish;
      });
    }

    close() {
      if (this.closed) return;
      this.closed = true;
      count--;
      for (const [id, held] of this.held) if (owners.get(id) === held) owners.delete(id);
      this.held.clear();
      this.wake?.();
    }
  }

  /** The receipt `appId|id|claim` as a window holds it, if one does. */
  const heldAs = (appId: string, id: string, claim: number) => {
    const held = owners.get(id);
    return held && held.appId === appId && held.claim === claim ? held : undefined;
  };

  return {
    open() {
      count++;
      return new Window();
    },
    acked(appId, id, claim) {
      const held = heldAs(appId, id, claim);
      if (!held) return;
      owners.delete(id);
      held.window.release(id);
    },
    extended(appId, id, claim, leaseExpiresAtMs) {
      const held = heldAs(appId, id, claim);
      if (held && held.window.held.get(id) === held) held.untilMs = leaseExpiresAtMs;
    },
    recheckTick(ms) {
      let tick = ticks.get(ms);
      if (!tick) {
        // Unref'd: a stream waiting on it keeps the process up through its own call; the tick alone does not.
        tick = new Promise<void>((resolve) =>
          setTimeout(
            () => {
              ticks.delete(ms);
              resolve();
            },
            ms - (Date.now() % ms),
          ).unref(),
        );
        ticks.set(ms, tick);
      }
      return tick;
    },
    get count() {
      return count;
    },
  };
}
