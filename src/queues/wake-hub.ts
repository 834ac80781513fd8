/**
 * Long-poll wake-ups without polling the database. Each process holds ONE
 * `LISTEN` connection; a put anywhere sends `pg_notify` in its own statement,
 * and this hub fans the notification out, in memory, to the consumers of that
 * app and queue that wait on this process.
 *
 * A notification is a hint, never a promise: the woken consumer re-runs the
 * claim and goes back to waiting when another consumer (on any instance) was
 * faster. So a lost notification costs latency, never a message:
 * - one hint wakes ONE waiter (one message was put), not the whole herd;
 * - a wake that its waiter could not use (it had just been served, or left)
 *   passes to the next waiter of that queue;
 * - a "sweep" wake (the safety re-check, a lapsed lease, a delayed message,
 *   a reconnect of the LISTEN connection) cannot know how many messages are
 *   there, so a waiter it served passes it on until a claim comes back empty;
 * - the safety re-check is one query for all waited-on queues every few
 *   seconds, which also learns when the next lease lapses or delay ends in
 *   each of them and sets a timer for that moment.
 * Puts on this process wake local waiters directly; the hub ignores its own
 * notifications when they come back from the database.
 *
 * Apps take turns: the wakes of notifications, sweeps and timers wait in a
 * line per app and go out one app after another (round robin), at most
 * `WAKE_TURN` a turn of the event loop, so a notification that wakes 1000
 * consumers of one app (a batch put) cannot put another app's wake-up, and
 * its claim, behind all of them. (A wake passed on by a waiter that could not
 * use it goes at once: it is already that app's turn.)
 */
import crypto from "node:crypto";
import type { Logger } from "pino";
import type { Database } from "../core/database/index.ts";
import { QUEUE_CHANNEL, type QueueStore } from "./queue-store.ts";

/** Wakes sent a turn of the event loop, taken from the waiting apps in turn. */
export const WAKE_TURN = 64;

/** How often the safety re-check runs while anyone waits. */
export const RECHECK_MS = 5_000;

type WakeKind = "hint" | "sweep";

/** One waiting consume. Register BEFORE the claim attempt, so no put can slip between them. */
interface Waiter {
  /** Marks the wake (if any) as used: call right before each claim attempt. Returns the kind used. */
  beforeClaim(): WakeKind | undefined;
  /** Resolves when woken (true), or at `untilMs` or on abort (false). */
  wait(untilMs: number, signal: AbortSignal): Promise<boolean>;
  /** Ends the wait. `served` is the consume's claim outcome; unused or baton wakes pass on. */
  leave(served: boolean, usedKind: WakeKind | undefined): void;
}

export interface WakeHub {
  readonly instanceId: string;
  start(): Promise<void>;
  close(): Promise<void>;
  register(appId: string, queue: string): Waiter;
  /** After a put committed on this process: wake one local waiter (now, or when the delay ends). */
  announce(appId: string, queue: string, visibleAtMs: number): void;
  /** Wakes one waiter of the queue at `atMs` (a lease lapses, a delay ends). */
  wakeAt(appId: string, queue: string, atMs: number): void;
  /** The NOTIFY payload for a put of this process. */
  payload(appId: string, queue: string, visibleAtMs: number): string;
  /** The payload's start, for a statement that learns the queue itself and appends `queue|visibleAtMs` (a nack). */
  payloadPrefix(appId: string): string;
  /** How many consumes wait on this process (for metrics and tests). */
  waiting(): number;
}

const keyOf = (appId: string, queue: string) => `${appId}|${queue}`;

class WaiterImpl implements Waiter {
  pending: WakeKind | undefined;
  private resolve: ((woken: boolean) => void) | undefined;
  left = false;
  readonly hub: WakeHubImpl;
  readonly key: string;

  constructor(hub: WakeHubImpl, key: string) {
    this.hub = hub;
    this.key = key;
  }

  /** Returns false when this waiter already holds a wake (so the hub picks another). */
  wake(kind: WakeKind): boolean {
    if (this.left || this.pending) return false;
    this.pending = kind;
    const resolve = this.resolve;
    this.resolve = undefined;
    resolve?.(true);
    return true;
  }

  beforeClaim(): WakeKind | undefined {
    const kind = this.pending;
    this.pending = undefined;
    return kind;
  }

  wait(untilMs: number, signal: AbortSignal): Promise<boolean> {
    if (this.pending) return Promise.resolve(true);
    if (signal.aborted) return Promise.resolve(false);
    return new Promise<boolean>((resolve) => {
      const finish = (woken: boolean) => {
        clearTimeout(timer);
        signal.removeEventListener("abort", onAbort);
        this.resolve = undefined;
        resolve(woken);
      };
      const onAbort = () => finish(false);
      const timer = setTimeout(() => finish(false), Math.max(0, untilMs - Date.now()));
      signal.addEventListener("abort", onAbort, { once: true });
      this.resolve = finish;
    });
  }

  leave(served: boolean, usedKind: WakeKind | undefined): void {
    if (this.left) return;
    this.left = true;
    this.hub.remove(this);
    // A wake that arrived after the last claim started was not used: hand it on.
    if (this.pending) this.hub.wakeOne(this.key, this.pending);
    // A sweep that found a message may have found more.
    else if (served && usedKind === "sweep") this.hub.wakeOne(this.key, "sweep");
  }
}

class WakeHubImpl implements WakeHub {
  readonly instanceId = crypto.randomBytes(6).toString("base64url");
  private readonly waiters = new Map<string, Set<WaiterImpl>>();
  /** Wakes waiting for their app's turn, per app; the map's order is the turn. */
  private readonly due = new Map<string, { key: string; kind: WakeKind }[]>();
  private draining = false;
  private readonly timers = new Map<string, { at: number; timer: NodeJS.Timeout }>();
  private count = 0;
  private recheckTimer: NodeJS.Timeout | undefined;
  private rechecking = false;
  private unlisten: (() => Promise<void>) | undefined;
  private closed = false;
  private readonly database: Database;
  private readonly store: QueueStore;
  private readonly logger: Logger;

  constructor(database: Database, store: QueueStore, logger: Logger) {
    this.database = database;
    this.store = store;
    this.logger = logger;
  }

  async start(): Promise<void> {
    this.unlisten = await this.database.listen(
      QUEUE_CHANNEL,
      (payload) => this.onNotify(payload),
      () => {
        this.logger.info("queue wake-up connection re-established; re-checking waiting consumers");
        void this.recheck();
      },
    );
    this.recheckTimer = setInterval(() => void this.recheck(), RECHECK_MS);
    this.recheckTimer.unref();
  }

  async close(): Promise<void> {
    this.closed = true;
    this.due.clear();
    clearInterval(this.recheckTimer);
    for (const { timer } of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
    await this.unlisten?.();
  }

  payload(appId: string, queue: string, visibleAtMs: number): string {
    return `${this.payloadPrefix(appId)}${queue}|${visibleAtMs}`;
  }

  payloadPrefix(appId: string): string {
    return `${this.instanceId}|${appId}|`;
  }

  register(appId: string, queue: string): Waiter {
    const key = keyOf(appId, queue);
    const waiter = new WaiterImpl(this, key);
    let set = this.waiters.get(key);
    if (!set) this.waiters.set(key, (set = new Set()));
    set.add(waiter);
    this.count++;
    return waiter;
  }

  remove(waiter: WaiterImpl): void {
    const set = this.waiters.get(waiter.key);
    if (set?.delete(waiter)) {
      this.count--;
      if (set.size === 0) {
        this.waiters.delete(waiter.key);
        const t = this.timers.get(waiter.key);
        if (t) {
          clearTimeout(t.timer);
          this.timers.delete(waiter.key);
        }
      }
    }
  }

  waiting(): number {
    return this.count;
  }

  announce(appId: string, queue: string, visibleAtMs: number): void {
    this.hintAt(keyOf(appId, queue), visibleAtMs);
  }

  wakeAt(appId: string, queue: string, atMs: number): void {
    // Not sooner than 20 ms: a message visible but skipped (locked by a
    // concurrent claim) must not make its waiter spin.
    this.wakeKeyAt(keyOf(appId, queue), Math.max(atMs, Date.now() + 20));
  }

  /** Wakes one waiter of `key` in its app's turn (see the top of this file). */
  private wakeInTurn(key: string, kind: WakeKind): void {
    const appId = key.slice(0, key.indexOf("|"));
    let line = this.due.get(appId);
    if (!line) this.due.set(appId, (line = []));
    line.push({ key, kind });
    if (!this.draining) {
      this.draining = true;
      setImmediate(() => this.drain());
    }
  }

  private drain(): void {
    for (let sent = 0; sent < WAKE_TURN && this.due.size > 0; sent++) {
      const [appId, line] = this.due.entries().next().value as [string, { key: string; kind: WakeKind }[]];
      const wake = line.shift()!;
      // The app served goes to the back of the turn.
      this.due.delete(appId);
      if (line.length > 0) this.due.set(appId, line);
      this.wakeOne(wake.key, wake.kind);
    }
    if (this.due.size > 0 && !this.closed) setImmediate(() => this.drain());
    else this.draining = false;
  }

  wakeOne(key: string, kind: WakeKind): void {
    const set = this.waiters.get(key);
    if (!set) return;
    for (const waiter of set) if (waiter.wake(kind)) return;
  }

  private hintAt(key: string, visibleAtMs: number): void {
    if (!this.waiters.has(key)) return;
    if (visibleAtMs <= Date.now() + 1) this.wakeInTurn(key, "hint");
    else this.wakeKeyAt(key, visibleAtMs);
  }

  private wakeKeyAt(key: string, atMs: number): void {
    const existing = this.timers.get(key);
    if (existing && existing.at <= atMs) return;
    if (existing) clearTimeout(existing.timer);
    const timer = setTimeout(
      () => {
        this.timers.delete(key);
        this.wakeInTurn(key, "sweep");
      },
      Math.max(0, atMs - Date.now()) + 1,
    );
    timer.unref();
    this.timers.set(key, { at: atMs, timer });
  }

  /** `instance|app|queue|visibleAtMs[|count]`: a batch of puts announces `count` messages at once. */
  private onNotify(payload: string): void {
    const [instance, appId, queue, at, count] = payload.split("|");
    if (instance === this.instanceId || !appId || !queue) return;
    const key = keyOf(appId, queue);
    const visibleAtMs = Number(at) || 0;
    if (visibleAtMs > Date.now() + 1) return this.hintAt(key, visibleAtMs);
    // No more wakes than waiters: each wakes a different one.
    for (let n = Math.min(Number(count) || 1, this.waiters.get(key)?.size ?? 0); n > 0; n--)
      this.wakeInTurn(key, "hint");
  }

  /** The safety net: one query for every queue someone waits on here. */
  async recheck(): Promise<void> {
    if (this.rechecking || this.closed || this.waiters.size === 0) return;
    this.rechecking = true;
    try {
      const keys = [...this.waiters.keys()].map((key) => {
        const [appId, queue] = key.split("|") as [string, string];
        return { appId, queue };
      });
      const now = Date.now();
      for (let i = 0; i < keys.length; i += 1000) {
        for (const { appId, queue, at } of await this.store.nextVisible(keys.slice(i, i + 1000))) {
          const key = keyOf(appId, queue);
          const atMs = at.getTime();
          if (atMs <= now) this.wakeInTurn(key, "sweep");
          else if (atMs < now + RECHECK_MS * 2) this.wakeKeyAt(key, atMs);
        }
      }
    } catch (err) {
      this.logger.warn({ err: (err as Error).message }, "queue wake-up re-check failed");
    } finally {
      this.rechecking = false;
    }
  }
}

export function createWakeHub(database: Database, store: QueueStore, logger: Logger): WakeHub {
  return new WakeHubImpl(database, store, logger);
}
