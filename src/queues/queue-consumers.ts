/**
 * The consuming side of the queues facility: claims (shared by concurrent
 * consumes through the batcher), waiting consumes, `StreamMessages` and its
 * windows, acks, and the queue policies the claims apply. `queues-service.ts`
 * maps the RPCs onto these; this module knows nothing of requests.
 */
import type { HandlerContext } from "@connectrpc/connect";
import type { Logger } from "pino";
import { createAbortFanout } from "../core/abort-fanout.ts";
import type { AppRecord } from "../core/apps/apps.ts";
import { currentApp } from "../core/auth.ts";
import { createBatcher } from "../core/batcher.ts";
import { onUndelivered } from "../core/delivery.ts";
import type { Metrics } from "../core/metrics.ts";
import {
  ACK_BATCH,
  CLAIM_BATCH,
  MAX_WAIT_SECONDS,
  QUIET_KEY_MS,
  STREAM_CLAIM_BATCH,
  STREAM_EXTENDED_RECHECK_MS,
  STREAM_RECHECK_BATCH,
  STREAM_RECHECK_MAX_MS,
  STREAM_RECHECK_MIN_MS,
} from "./queue-limits.ts";
import { claimRule, createQueuePolicies, type QueuePolicies, type QueuePolicy } from "./queue-policy.ts";
import {
  DROP_DEAD_LETTERS,
  type ClaimResult,
  type ClaimRule,
  type QueueStore,
  type StoredMessage,
} from "./queue-store.ts";
import type { RateGate } from "./rate-gate.ts";
import type { Receipt } from "./receipt.ts";
import { createStreamWindows, type StreamWindows } from "./stream-windows.ts";
import type { WakeHub } from "./wake-hub.ts";

export interface QueueConsumersOptions {
  store: QueueStore;
  hub: WakeHub;
  logger: Logger;
  metrics: Metrics;
  /** Aborted when the server starts shutting down: waiting consumes and streams end at once. */
  shutdownSignal: AbortSignal;
  /** The tokens of queues with `maxDeliveriesPerSecond` (docs/queues.md "Rate limits"). */
  rateGate: RateGate;
}

/** What one consume takes: from which queue, how many at most, how long it waits, and for how long it leases. */
interface ConsumeTake {
  queue: string;
  waitSeconds: number;
  leaseSeconds: number;
  rule: ClaimRule;
  n: number;
}

export interface QueueConsumers {
  readonly policies: QueuePolicies;
  readonly windows: StreamWindows;
  /** The queue's policy and the claim rule it makes. */
  policyOf(app: AppRecord, queue: string): Promise<{ policy: QueuePolicy; rule: ClaimRule }>;
  /**
   * Leases up to `n` messages of the queue, waiting up to `waitSeconds` while there is none; what the
   * caller (`context`) does not receive goes back in line.
   */
  consume(app: AppRecord, take: ConsumeTake, context: HandlerContext): Promise<StoredMessage[]>;
  /**
   * Moves the messages of the queue that had their last delivery (lease lapsed, or nacked) to the
   * policy's dead letters now, without leasing anything: the claim does it too, but a queue nobody
   * consumes would keep them in line. How many.
   */
  bury(app: AppRecord, queue: string): Promise<number>;
  /** Acks one receipt (batched with concurrent acks of any app); frees its place in a local stream's window. */
  ackOne(appId: string, receipt: Receipt): Promise<boolean>;
  ackAll(appId: string, receipts: Receipt[]): Promise<boolean[]>;
  stream(
    app: AppRecord,
    take: { queue: string; windowSize: number; leaseSeconds: number; rule: ClaimRule },
    context: HandlerContext,
    /** How many of the first of these messages fit in one response (at least one is always sent). */
    fit?: (unsent: StoredMessage[]) => number,
  ): AsyncGenerator<{ messages: StoredMessage[] }>;
}

export function createQueueConsumers(deps: QueueConsumersOptions): QueueConsumers {
  const { store, hub, logger, metrics, rateGate } = deps;
  const buriedTotal = metrics.counter(
    "queue_dead_letters_total",
    "Messages moved to a dead-letter list (maxDeliveries reached).",
    [],
  );
  const undeliveredReleased = metrics.counter(
    "queue_undelivered_leases_released_total",
    "Leases of consumed messages given back because the consume's answer could not be written to its client.",
    [],
  );
  const policies = createQueuePolicies(store);
  // What each waiting consume and open stream does at shutdown, called by one listener of the shutdown signal.
  const atShutdown = createAbortFanout(deps.shutdownSignal);
  /** The queue's policy and the claim rule it makes. */
  async function policyOf(app: AppRecord, queue: string): Promise<{ policy: QueuePolicy; rule: ClaimRule }> {
    const policy = await policies.get(app, queue);
    return { policy, rule: claimRule(app, policy, (target) => hub.payload(app.id, target, 0)) };
  }
  /** The queue's delivery rate limit (0: none), from the cached policy. */
  async function rateOf(app: AppRecord, queue: string): Promise<number> {
    return (await policies.get(app, queue)).maxDeliveriesPerSecond;
  }
  /** After a claim moved messages: counted, and local consumers of a dead-letter queue woken. */
  function afterBurying(appId: string, rule: ClaimRule, buried: number | undefined) {
    if (!buried) return;
    buriedTotal.inc(buried);
    const target = rule.deadLetterQueue;
    if (target !== null && target !== DROP_DEAD_LETTERS)
      for (let n = Math.min(buried, hub.waiting()); n > 0; n--) hub.announce(appId, target, 0);
  }
  const claimBatcher = createBatcher<
    { appId: string; queue: string; leaseSeconds: number; rule: ClaimRule },
    ClaimResult
  >({
    maxBatch: CLAIM_BATCH,
    maxInFlight: 1,
    quietMs: QUIET_KEY_MS,
    async run(_key, items) {
      const { appId, queue, leaseSeconds, rule } = items[0];
      const { messages, nextVisibleAt, buried } = await store.claimMany({
        appId,
        queue,
        leaseSeconds,
        n: items.length,
        rule,
      });
      afterBurying(appId, rule, buried);
      return items.map((_, i) => (messages[i] ? { message: messages[i] } : { nextVisibleAt }));
    },
  });
  /** Claims of one queue share a statement when they share its lease and rule. */
  const ruleKey = (r: ClaimRule) =>
    `${r.maxDeliveries}|${r.deadLetterQueue}|${r.ttlSeconds}|${r.retry.delaySeconds}|${r.retry.backoff}|${r.retry.maxDelaySeconds}|${r.retry.jitter}`;
  /** Leases up to `n` messages: one through the claim batcher (shared with concurrent consumes), more in one statement. */
  async function claimSome(
    app: AppRecord,
    queue: string,
    leaseSeconds: number,
    rule: ClaimRule,
    n: number,
  ): Promise<{ messages: StoredMessage[]; nextVisibleAt: Date | null }> {
    if (n === 1) {
      const key = `${app.id}|${queue}|${leaseSeconds}|${ruleKey(rule)}`;
      const claimed = await claimBatcher.call(key, { appId: app.id, queue, leaseSeconds, rule });
      return claimed.message
        ? { messages: [claimed.message], nextVisibleAt: null }
        : { messages: [], nextVisibleAt: claimed.nextVisibleAt };
    }
    const claimed = await store.claimMany({ appId: app.id, queue, leaseSeconds, n, rule });
    afterBurying(app.id, rule, claimed.buried);
    return claimed;
  }
  const ackBatcher = createBatcher<{ appId: string; id: string; claim: number }, boolean>({
    maxBatch: ACK_BATCH,
    maxInFlight: 1,
    quietMs: QUIET_KEY_MS,
    run: (_key, items) => store.ackMany(items),
  });
  const windows = createStreamWindows();
  const streamRechecks = metrics.counter(
    "queue_stream_rechecks_total",
    "Statements asking which leases of full StreamMessages windows still hold (those due at once share one).",
    [],
  );
  // The streams whose checks are due in the same turn (`windows.recheckTick`) ask in one statement.
  const recheckBatcher = createBatcher<{ appId: string; held: { id: string }[] }, Set<string>>({
    maxBatch: STREAM_RECHECK_BATCH,
    maxInFlight: 2,
    run: async (_key, items) => {
      streamRechecks.inc();
      const leased = await store.stillLeased(items.flatMap(({ appId, held }) => held.map(({ id }) => ({ appId, id }))));
      return items.map(() => leased);
    },
  });
  const streamsGauge = metrics.gauge("queue_streams", "StreamMessages calls open on this instance.", []);
  const streamSent = metrics.counter(
    "queue_stream_messages_sent_total",
    "Messages leased and sent by StreamMessages.",
    [],
  );
  const streamReleased = metrics.counter(
    "queue_stream_leases_released_total",
    "Leases a StreamMessages call took but did not send (it ended first) and gave back.",
    [],
  );
  const waitingGauge = metrics.gauge(
    "queue_waiting_consumers",
    "Consumes waiting (long-polling) on this instance.",
    [],
  );

  /**
   * Leases up to `n` messages of the queue, waiting up to `waitSeconds` while
   * there is none (a wake-up from a put on any instance, or the moment the
   * next message becomes visible, ends the wait early).
   */
  async function consume(
    app: AppRecord,
    { queue, waitSeconds, leaseSeconds, rule, n }: ConsumeTake,
    context: HandlerContext,
  ): Promise<StoredMessage[]> {
    /** The claimed messages, unless the caller went away during the claim: then they go back in line. */
    const handOn = async (claimed: { messages: StoredMessage[] }): Promise<StoredMessage[]> => {
      if (claimed.messages.length === 0) return claimed.messages;
      if (!context.signal.aborted) {
        // The caller may still leave while the answer is written: then nobody holds these receipts.
        const messages = claimed.messages;
        onUndelivered(context, () => {
          void giveBack(app.id, messages).then((n) => void undeliveredReleased.inc(n));
        });
        return messages;
      }
      await giveBack(app.id, claimed.messages);
      return [];
    };
    // A caller already gone (its HTTP/2 stream reset before this ran) claims nothing: a message leased to
    // it would wait out the whole lease.
    if (context.signal.aborted) return [];
    let rate = await rateOf(app, queue);
    if (waitSeconds === 0) {
      // Rate-limited: only what the bucket holds now (docs/queues.md "Rate limits").
      const granted = rate > 0 ? await rateGate.take(app.id, queue, rate, n, Date.now(), context.signal) : n;
      if (granted === 0) return [];
      const claimed = await claimSome(app, queue, leaseSeconds, rule, granted);
      if (rate > 0) await rateGate.giveBack(app.id, queue, rate, granted - claimed.messages.length);
      return handOn(claimed);
    }
    const deadline = Date.now() + waitSeconds * 1000;
    // One controller fed by both signals (cheaper per waiting consume than AbortSignal.any,
    // whose dependants a long-lived signal keeps until collected).
    const stop = new AbortController();
    const onAbort = () => stop.abort();
    const { signal } = stop;
    if (context.signal.aborted || deps.shutdownSignal.aborted) stop.abort();
    context.signal.addEventListener("abort", onAbort, { once: true });
    atShutdown.add(onAbort);
    // Registered before the first claim, so a put landing between the claim and the wait still wakes it.
    const waiter = hub.register(app.id, queue);
    // Counted once its first claim found nothing: from then on it only waits.
    let counted = false;
    let served = false;
    let used: ReturnType<typeof waiter.beforeClaim>;
    try {
      for (let again = false; ; again = true) {
        if (again) {
          // A claim after a wait acts on the app as it is now: stopped, its token revoked or the app deleted
          // meanwhile, the consume is refused as a new one would be; a changed limit or policy applies.
          app = await currentApp(context);
          const now = await policyOf(app, queue);
          rule = now.rule;
          rate = now.policy.maxDeliveriesPerSecond;
        }
        // A rate-limited queue's tokens first: waiting here is the consume's long poll too (none by the
        // deadline, or the caller gone: an empty answer).
        const granted = rate > 0 ? await rateGate.take(app.id, queue, rate, n, deadline, signal) : n;
        if (granted === 0) return [];
        used = waiter.beforeClaim();
        const claimed = await claimSome(app, queue, leaseSeconds, rule, granted);
        if (rate > 0) await rateGate.giveBack(app.id, queue, rate, granted - claimed.messages.length);
        if (claimed.messages.length > 0) {
          const handed = await handOn(claimed);
          served = handed.length > 0;
          return handed;
        }
        if (signal.aborted || Date.now() >= deadline) return [];
        if (claimed.nextVisibleAt && claimed.nextVisibleAt.getTime() < deadline)
          hub.wakeAt(app.id, queue, claimed.nextVisibleAt.getTime());
        if (!counted) {
          counted = true;
          waitingGauge.inc();
        }
        await waiter.wait(deadline, signal);
        if (signal.aborted) return [];
      }
    } finally {
      waiter.leave(served, used);
      if (counted) waitingGauge.dec();
      context.signal.removeEventListener("abort", onAbort);
      atShutdown.delete(onAbort);
    }
  }

  /** Acks a batch of one app's receipts in one statement, and frees the stream windows that held them. */
  async function ackAll(appId: string, receipts: Receipt[]): Promise<boolean[]> {
    const acked = await store.ackMany(receipts.map((r) => ({ appId, id: r.id, claim: r.claim })));
    acked.forEach((ok, i) => ok && windows.acked(appId, receipts[i].id, receipts[i].claim));
    return acked;
  }

  /**
   * One `StreamMessages` call: claims what fits in the window, sends it, and
   * waits for room (an ack, a lapsed lease) or for messages (the wake-up hub,
   * as a waiting consume does). A lease is only taken for messages about to be
   * sent: when the call ends between a claim and its send (cancel, shutdown),
   * `finally` undoes those leases (`release`), so they go back in line as if
   * never claimed, and so does a part that waited on a slow reader (HTTP/2
   * flow control) past half its lease, also while the stream is paused on it. Messages already sent keep their lease
   * and receipt.
   */
  async function* stream(
    app: AppRecord,
    {
      queue,
      windowSize,
      leaseSeconds,
      rule,
    }: { queue: string; windowSize: number; leaseSeconds: number; rule: ClaimRule },
    context: HandlerContext,
    /** How many of the first of these messages fit in one response (at least one is always sent). */
    fit: (unsent: StoredMessage[]) => number = (unsent) => unsent.length,
  ) {
    const stop = new AbortController();
    // Ended while paused at `yield` (a slow reader): the parts not yet handed on go back now. The transport
    // may hold the paused write until the stream is torn down, and `finally` runs only then.
    let pausedAtYield = false;
    const onAbort = () => {
      stop.abort();
      if (pausedAtYield) giveBackUnsent();
    };
    const { signal } = stop;
    if (context.signal.aborted || deps.shutdownSignal.aborted) stop.abort();
    context.signal.addEventListener("abort", onAbort, { once: true });
    atShutdown.add(onAbort);
    const window = windows.open();
    // The policy as the call began: a stream keeps the rule it started with.
    streamsGauge.inc();
    let unsent: StoredMessage[] = [];
    // When the claim of `unsent` answered, on this process's clock: lease ends come from the database's
    // clock, and a skew between the two must not decide whether a part is still worth sending.
    let claimedAt!: number;
    let recheckMs = STREAM_RECHECK_MIN_MS;
    // While the stream waits on a slow reader after a part (paused at `yield`: the transport takes the next
    // part only once the last is written), the parts not yet handed on are given back at half their lease
    // all the same: left to lapse, each would count a delivery that never reached anyone.
    let claims = 0;
    let lapseTimer: NodeJS.Timeout | undefined;
    let givingBack: Promise<void> | undefined;
    const giveBackUnsent = () => {
      const stale = unsent;
      unsent = [];
      if (stale.length > 0) givingBack = giveBack(app.id, stale).then((n) => void streamReleased.inc(n));
    };
    try {
      while (!signal.aborted) {
        const room = windowSize - window.size;
        if (room <= 0) {
          await window.shrunk(signal, windows.recheckTick(recheckMs));
          if (signal.aborted || window.size < windowSize) {
            recheckMs = STREAM_RECHECK_MIN_MS;
            continue;
          }
          // Still full: acks made on other instances are not reported here, nor extensions; ask the database.
          const held = window.receipts();
          const leased = await recheckBatcher.call("", { appId: app.id, held });
          let freed = 0;
          const now = Date.now();
          for (const r of held)
            if (!leased.has(`${app.id}|${r.id}|${r.claim}`)) {
              windows.acked(app.id, r.id, r.claim);
              freed++;
            } else if (r.untilMs <= now) {
              // Past its end here, yet leased: extended elsewhere (or the database's clock is behind).
              windows.extended(app.id, r.id, r.claim, now + STREAM_EXTENDED_RECHECK_MS);
            }
          recheckMs = freed > 0 ? STREAM_RECHECK_MIN_MS : Math.min(recheckMs * 2, STREAM_RECHECK_MAX_MS);
          continue;
        }
        // Each claim after the first acts for the app as it is now: a stream of an app stopped, deleted or
        // whose token was revoked meanwhile ends as a new call would be refused (the claim rule stays the
        // one the stream started with).
        if (claims++ > 0) await currentApp(context);
        // A rate-limited queue's tokens first (docs/queues.md "Rate limits"), waited for as long as the stream
        // lasts; the limit is the queue's as it is now (cached policy), unlike the claim rule.
        const want = Math.min(room, STREAM_CLAIM_BATCH);
        const rate = await rateOf(app, queue);
        const granted =
          rate > 0
            ? await rateGate.take(app.id, queue, rate, want, Date.now() + MAX_WAIT_SECONDS * 1000, signal)
            : want;
        if (granted === 0) continue;
        // Registered before the claim, so a put landing between the claim and the wait still wakes it.
        const waiter = hub.register(app.id, queue);
        let served = false;
        let used: ReturnType<typeof waiter.beforeClaim>;
        try {
          used = waiter.beforeClaim();
          const claimed = await store.claimMany({ appId: app.id, queue, leaseSeconds, n: granted, rule });
          afterBurying(app.id, rule, claimed.buried);
          if (rate > 0) await rateGate.giveBack(app.id, queue, rate, granted - claimed.messages.length);
          if (claimed.messages.length > 0) {
            served = true;
            unsent = claimed.messages;
            claimedAt = Date.now();
          } else {
            if (signal.aborted) break;
            if (claimed.nextVisibleAt) hub.wakeAt(app.id, queue, claimed.nextVisibleAt.getTime());
            await waiter.wait(Date.now() + MAX_WAIT_SECONDS * 1000, signal);
            continue;
          }
        } finally {
          waiter.leave(served, used);
        }
        // One response per part that fits (STREAM_RESPONSE_MAX_BYTES); the parts not yet handed on stay unsent.
        while (unsent.length > 0 && !signal.aborted) {
          // A part that waited on a slow reader past half its lease goes back in line instead of out:
          // sent now, it would reach the client with little or no lease left, when another consumer
          // may already hold its messages. Measured from the claim on this process's clock.
          if (Date.now() - claimedAt > (leaseSeconds * 1000) / 2) {
            const stale = unsent;
            unsent = [];
            streamReleased.inc(await giveBack(app.id, stale));
            break;
          }
          const messages = unsent.slice(0, Math.max(1, fit(unsent)));
          for (const m of messages) window.add(app.id, m.id, m.claims, claimedAt + leaseSeconds * 1000);
          // Handed to the transport from here on: sent.
          unsent = unsent.slice(messages.length);
          streamSent.inc(messages.length);
          if (unsent.length > 0)
            lapseTimer = setTimeout(giveBackUnsent, Math.max(0, claimedAt + (leaseSeconds * 1000) / 2 - Date.now()));
          pausedAtYield = true;
          yield { messages };
          pausedAtYield = false;
          clearTimeout(lapseTimer);
          await givingBack;
        }
        if (signal.aborted) break;
      }
    } finally {
      clearTimeout(lapseTimer);
      window.close();
      context.signal.removeEventListener("abort", onAbort);
      atShutdown.delete(onAbort);
      // Given back before the stream counts as ended, so that once no stream is open no unsent lease remains.
      await givingBack;
      if (unsent.length > 0) streamReleased.inc(await giveBack(app.id, unsent));
      streamsGauge.dec();
    }
  }

  /**
   * Undoes the leases of messages claimed for a caller that is gone before they
   * were handed on (a stream ended, a consumer went away during its claim):
   * back in line as if never claimed, the delivery uncounted, and the queue's
   * waiting consumers and streams woken as by a put (on this instance now, on
   * others through the statement's NOTIFY). How many.
   */
  async function giveBack(appId: string, messages: StoredMessage[]): Promise<number> {
    if (messages.length === 0) return 0;
    // One claim's messages: one queue.
    const queue = messages[0].queue;
    const leases = messages.map((m) => ({
      id: m.id,
      claim: m.claims,
      visibleBefore: m.visibleBefore ?? new Date(),
    }));
    try {
      const released = await store.release(appId, leases, hub.payload(appId, queue, 0));
      for (let n = Math.min(released, hub.waiting()); n > 0; n--) hub.announce(appId, queue, 0);
      return released;
    } catch (err) {
      // The leases then simply lapse: a delay, not a lost message.
      logger.warn(
        { err: (err as Error).message, appId, count: leases.length },
        "could not give back leases of messages not handed on",
      );
      return 0;
    }
  }

  async function ackOne(appId: string, receipt: Receipt): Promise<boolean> {
    const acked = await ackBatcher.call("", { appId, id: receipt.id, claim: receipt.claim });
    if (acked) windows.acked(appId, receipt.id, receipt.claim);
    return acked;
  }

  async function bury(app: AppRecord, queue: string): Promise<number> {
    const { rule } = await policyOf(app, queue);
    if (rule.maxDeliveries <= 0) return 0;
    // A claim of none: only its burying part runs.
    const { buried } = await store.claimMany({ appId: app.id, queue, leaseSeconds: 1, n: 0, rule });
    afterBurying(app.id, rule, buried);
    return buried ?? 0;
  }

  return { policies, windows, policyOf, consume, ackOne, ackAll, stream, bury };
}
