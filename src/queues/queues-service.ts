/**
 * `QueueService`, implemented once for Connect, gRPC and the REST routes
 * (SPEC.md "Queues", DESIGN.md sections 4 and 5): durable queues with leased
 * consumption, and the platform's own events on the reserved `_events` queue.
 * Concurrent puts, claims and acks share statements through the core batcher.
 *
 * Terminology:
 * - **line**: the messages of one app's queue in the order they are handed
 *   out (by `visible_at`, the put time for a fresh message).
 * - **waiting**: a message not leased (never delivered, or its lease lapsed);
 *   `depth` counts these, and the depth cap (`maxDepth`) applies to them.
 * - **leased / in flight**: handed to a consumer until `leaseExpiresAt`; no
 *   other consumer gets it meanwhile. A lapsed lease puts it back in line.
 * - **delivery**: one lease of a message; `deliveries` counts them.
 * - **receipt**: names one delivery; only the receipt of the current,
 *   unexpired lease acks (deletes) the message.
 * - **expiry**: a waiting message is dropped at `expiresAt`.
 * - **wake-up**: how a put ends a waiting consume, on any instance (see
 *   `wake-hub.ts`).
 * - **platform event**: `{ kind, at, data }` put on `_events` by the platform,
 *   never by the app; never refused for depth: the oldest waiting is dropped.
 * - **dead letter**: a message that had the app's `maxDeliveries` deliveries
 *   and whose last lease lapsed: instead of being leased again it leaves the
 *   line for the queue's dead-letter list, where only the operator sees it
 *   (replay, purge). Moved by the claim that would have leased it, so every
 *   consume path (unary, REST, streams, `_events`) obeys the rule.
 */
import { create, fromJson, toBinary, toJson, type JsonValue } from "@bufbuild/protobuf";
import { ValueSchema, timestampFromMs, type Value } from "@bufbuild/protobuf/wkt";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type { Logger } from "pino";
import { MessageSchema, QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import { NAME_PATTERN, NAME_RULE, type AppRecord } from "../core/apps/apps.ts";
import type { AppStore } from "../core/apps/app-store.ts";
import { appOf } from "../core/auth.ts";
import { createBatcher } from "../core/batcher.ts";
import { PlatformError, invalidArgument, toConnectError, toPlatformError } from "../core/errors.ts";
import type { Metrics } from "../core/metrics.ts";
import {
  ACK_BATCH,
  CLAIM_BATCH,
  DEPTH_SLACK,
  EVENTS_QUEUE,
  MAX_BATCH_MESSAGES,
  MAX_DELAY_SECONDS,
  MAX_STREAM_WINDOW,
  MAX_LEASE_SECONDS,
  MAX_WAIT_SECONDS,
  PUT_BATCH,
  QUEUE_FULL_RETRY_AFTER_SECONDS,
  STREAM_CLAIM_BATCH,
  STREAM_MESSAGE_JSON_OVERHEAD,
  STREAM_RESPONSE_MAX_BYTES,
} from "./queue-limits.ts";
import { decodeReceipt, encodeReceipt, type Receipt } from "./receipt.ts";
import { createStreamWindows } from "./stream-windows.ts";
import type { ClaimResult, DeadLetterRule, PutItem, PutResult, QueueStore, StoredMessage } from "./queue-store.ts";
import type { WakeHub } from "./wake-hub.ts";

/**
 * The public API of the queues facility that others use to put a platform
 * event `{ kind, at, data }` on an app's reserved `_events` queue (for
 * example `secret.set`). Never refused for depth: the oldest is dropped.
 */
export interface PlatformEvents {
  publish(appId: string, kind: string, data: JsonValue): Promise<{ id: string }>;
}

export interface QueuesServiceOptions {
  store: QueueStore;
  apps: AppStore;
  hub: WakeHub;
  logger: Logger;
  metrics: Metrics;
  /** Aborted when the server starts shutting down: waiting consumes end at once. */
  shutdownSignal: AbortSignal;
}

export interface QueuesImplementation {
  readonly impl: ServiceImpl<typeof QueueService>;
  readonly events: PlatformEvents;
}

function checkQueueName(name: string, allowEvents: boolean): string {
  if (name === EVENTS_QUEUE && allowEvents) return name;
  if (!NAME_PATTERN.test(name)) {
    throw invalidArgument("queue", `${NAME_RULE}${allowEvents ? ` or be ${EVENTS_QUEUE}` : ""}`);
  }
  return name;
}

function checkRange(field: string, value: number | undefined, min: number, max: number, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || value < min || value > max)
    throw invalidArgument(field, `must be an integer from ${min} to ${max}`);
  return value;
}

function payloadText(payload: Value | undefined, app: AppRecord, field = "payload"): string {
  if (payload === undefined) throw invalidArgument(field, "is required");
  let text: string;
  try {
    text = JSON.stringify(toJson(ValueSchema, payload));
  } catch {
    throw invalidArgument(field, "must be a JSON value");
  }
  const bytes = Buffer.byteLength(text, "utf8");
  if (bytes > app.limits.maxPayloadBytes) {
    throw invalidArgument(field, `must be at most ${app.limits.maxPayloadBytes} bytes as JSON (was ${bytes})`);
  }
  return text;
}

/** The put's lifetime and delay, checked against the app's limits; `prefix` names the message in a batch. */
function putTimes(app: AppRecord, req: { delaySeconds?: number; ttlSeconds?: number }, prefix = "") {
  const ttlSeconds = checkRange(
    `${prefix}ttlSeconds`,
    req.ttlSeconds,
    1,
    app.limits.messageTtlSeconds,
    app.limits.messageTtlSeconds,
  );
  const delaySeconds = checkRange(`${prefix}delaySeconds`, req.delaySeconds, 0, MAX_DELAY_SECONDS, 0);
  if (delaySeconds >= ttlSeconds)
    throw invalidArgument(`${prefix}delaySeconds`, "must be less than the message's lifetime (ttlSeconds)");
  return { ttlSeconds, delaySeconds };
}

/**
 * A call whose deadline (`connect-timeout-ms`, `grpc-timeout`) passed while it
 * waited ends with `deadline_exceeded`, as the protocols say, not with an
 * empty success the client cannot tell from "no message".
 */
function throwIfPastDeadline(context: HandlerContext): void {
  const left = context.timeoutMs();
  if (left !== undefined && left <= 0)
    throw new PlatformError("deadline_exceeded", "the call's deadline passed before a message came");
}

/** The app's dead-letter rule for claims, or undefined when its deliveries are unlimited. */
export function deadLetterRule(app: AppRecord): DeadLetterRule | undefined {
  const max = app.limits.maxDeliveries;
  return max > 0 ? { maxDeliveries: max, ttlSeconds: app.limits.messageTtlSeconds } : undefined;
}

function checkPutQueue(name: string): string {
  const queue = checkQueueName(name, true);
  if (queue === EVENTS_QUEUE) {
    throw new PlatformError(
      "permission_denied",
      `${EVENTS_QUEUE} is the platform's events queue; apps cannot put on it`,
    );
  }
  return queue;
}

function checkCount(field: string, n: number): void {
  if (n < 1 || n > MAX_BATCH_MESSAGES)
    throw invalidArgument(field, `must hold 1 to ${MAX_BATCH_MESSAGES} entries (was ${n})`);
}

function receiptAt(receipts: string[], i: number): Receipt {
  try {
    return decodeReceipt(receipts[i]);
  } catch {
    throw invalidArgument(`receipts[${i}]`, receipts[i].length === 0 ? "is required" : "is not a receipt");
  }
}

function batchTooDeep(queue: string, depth: number, n: number, max: number): PlatformError {
  return new PlatformError(
    "queue_full",
    `queue ${queue} has ${depth} messages waiting; ${n} more would exceed its maxDepth ${max}`,
    {
      details: [`depth: ${depth} of maxDepth ${max}`, `messages: ${n}`],
      retryAfterSeconds: QUEUE_FULL_RETRY_AFTER_SECONDS,
    },
  );
}

function toMessage(m: StoredMessage) {
  return {
    id: m.id,
    queue: m.queue,
    payload: fromJson(ValueSchema, JSON.parse(m.payload) as JsonValue),
    receipt: encodeReceipt(m.id, m.deliveries),
    enqueuedAt: timestampFromMs(m.enqueuedAt.getTime()),
    expiresAt: timestampFromMs(m.expiresAt.getTime()),
    leaseExpiresAt: timestampFromMs(m.leaseExpiresAt.getTime()),
    deliveries: m.deliveries,
  };
}

/**
 * The first messages of `claimed` that fit in one `StreamMessages` response of
 * at most `STREAM_RESPONSE_MAX_BYTES` encoded (always at least one). The
 * larger of the binary size and the JSON text of the payload counts, so the
 * cap holds for the protobuf and the JSON encodings alike.
 */
function responsePart(claimed: StoredMessage[]) {
  const part: ReturnType<typeof toMessage>[] = [];
  let bytes = 0;
  for (const m of claimed) {
    const message = toMessage(m);
    const binary = toBinary(MessageSchema, create(MessageSchema, message)).byteLength;
    const size = Math.max(binary, Buffer.byteLength(m.payload) + STREAM_MESSAGE_JSON_OVERHEAD) + 8;
    if (part.length > 0 && bytes + size > STREAM_RESPONSE_MAX_BYTES) break;
    part.push(message);
    bytes += size;
  }
  return part;
}

export function createQueuesService(deps: QueuesServiceOptions): QueuesImplementation {
  const { store, hub, logger, metrics } = deps;
  const putBatcher = createBatcher<PutItem & { appId: string; queue: string; depthBelow: number }, PutResult>({
    maxBatch: PUT_BATCH,
    maxInFlight: 1,
    run: (_key, items) => store.putMany(items[0].appId, items[0].queue, items[0].depthBelow, items),
  });
  const buriedTotal = metrics.counter(
    "queue_dead_letters_total",
    "Messages moved to a dead-letter list (maxDeliveries reached).",
    [],
  );
  const claimBatcher = createBatcher<
    { appId: string; queue: string; leaseSeconds: number; rule: DeadLetterRule | undefined },
    ClaimResult
  >({
    maxBatch: CLAIM_BATCH,
    maxInFlight: 1,
    async run(_key, items) {
      const { appId, queue, leaseSeconds, rule } = items[0];
      const { messages, nextVisibleAt, buried } = await store.claimMany(appId, queue, leaseSeconds, items.length, rule);
      if (buried) buriedTotal.inc(buried);
      return items.map((_, i) => (messages[i] ? { message: messages[i] } : { nextVisibleAt }));
    },
  });
  /** Claims of one queue share a statement when they share its lease and dead-letter rule. */
  const claim = (app: AppRecord, queue: string, leaseSeconds: number) => {
    const rule = deadLetterRule(app);
    return claimBatcher.call(
      `${app.id}|${queue}|${leaseSeconds}|${rule ? `${rule.maxDeliveries}|${rule.ttlSeconds}` : ""}`,
      {
        appId: app.id,
        queue,
        leaseSeconds,
        rule,
      },
    );
  };
  const ackBatcher = createBatcher<{ appId: string; id: string; deliveries: number }, boolean>({
    maxBatch: ACK_BATCH,
    maxInFlight: 1,
    run: (_key, items) => store.ackMany(items),
  });
  const windows = createStreamWindows();
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
  const dropped = metrics.counter(
    "queue_events_dropped_total",
    "Platform events dropped (oldest first) because an app's _events queue was at its depth cap.",
    [],
  );
  const waitingGauge = metrics.gauge(
    "queue_waiting_consumers",
    "Consumes waiting (long-polling) on this instance.",
    [],
  );

  /** After a put committed: local waiters now, other instances through the NOTIFY sent by the statement. */
  const announced = (appId: string, queue: string, delaySeconds: number) =>
    hub.announce(appId, queue, Date.now() + delaySeconds * 1000);

  async function put(app: AppRecord, queue: string, payload: string, delaySeconds: number, ttlSeconds: number) {
    const max = app.limits.maxQueueDepth;
    const input = { appId: app.id, queue, payload, delaySeconds, ttlSeconds, notify: hub.payload(app.id, queue, 0) };
    if (delaySeconds > 0) input.notify = hub.payload(app.id, queue, Date.now() + delaySeconds * 1000);
    let result: PutResult | undefined;
    if (max - DEPTH_SLACK > 0) {
      const depthBelow = max - DEPTH_SLACK;
      result = await putBatcher.call(`${app.id}|${queue}|${depthBelow}`, { ...input, depthBelow });
    }
    if (!result?.inserted) result = await store.putSerialized({ ...input, depthBelow: max });
    if (!result.inserted) {
      throw new PlatformError("queue_full", `queue ${queue} has ${max} messages waiting, its maxDepth`, {
        details: [`depth: ${result.depth} of maxDepth ${max}`],
        retryAfterSeconds: QUEUE_FULL_RETRY_AFTER_SECONDS,
      });
    }
    announced(app.id, queue, delaySeconds);
    return result;
  }

  async function consume(
    app: AppRecord,
    queue: string,
    waitSeconds: number,
    leaseSeconds: number,
    context: HandlerContext,
  ) {
    if (waitSeconds === 0) return (await claim(app, queue, leaseSeconds)).message;
    const deadline = Date.now() + waitSeconds * 1000;
    // One controller fed by both signals (cheaper per waiting consume than AbortSignal.any,
    // whose dependants a long-lived signal keeps until collected).
    const stop = new AbortController();
    const onAbort = () => stop.abort();
    const { signal } = stop;
    if (context.signal.aborted || deps.shutdownSignal.aborted) stop.abort();
    context.signal.addEventListener("abort", onAbort, { once: true });
    deps.shutdownSignal.addEventListener("abort", onAbort, { once: true });
    // Registered before the first claim, so a put landing between the claim and the wait still wakes it.
    const waiter = hub.register(app.id, queue);
    // Counted once its first claim found nothing: from then on it only waits.
    let counted = false;
    let served = false;
    let used: ReturnType<typeof waiter.beforeClaim>;
    try {
      for (;;) {
        used = waiter.beforeClaim();
        const claimed = await claim(app, queue, leaseSeconds);
        if (claimed.message) {
          served = true;
          return claimed.message;
        }
        if (signal.aborted || Date.now() >= deadline) return undefined;
        if (claimed.nextVisibleAt && claimed.nextVisibleAt.getTime() < deadline)
          hub.wakeAt(app.id, queue, claimed.nextVisibleAt.getTime());
        if (!counted) {
          counted = true;
          waitingGauge.inc();
        }
        await waiter.wait(deadline, signal);
        if (signal.aborted) return undefined;
      }
    } finally {
      waiter.leave(served, used);
      if (counted) waitingGauge.dec();
      context.signal.removeEventListener("abort", onAbort);
      deps.shutdownSignal.removeEventListener("abort", onAbort);
    }
  }

  /** Acks a batch of one app's receipts in one statement, and frees the stream windows that held them. */
  async function ackAll(appId: string, receipts: Receipt[]): Promise<boolean[]> {
    const acked = await store.ackMany(receipts.map((r) => ({ appId, id: r.id, deliveries: r.deliveries })));
    acked.forEach((ok, i) => ok && windows.acked(appId, receipts[i].id, receipts[i].deliveries));
    return acked;
  }

  /**
   * One `StreamMessages` call: claims what fits in the window, sends it, and
   * waits for room (an ack, a lapsed lease) or for messages (the wake-up hub,
   * as a waiting consume does). A lease is only taken for messages about to be
   * sent: when the call ends between a claim and its send (cancel, shutdown),
   * `finally` undoes those leases (`release`), so they go back in line as if
   * never claimed. Messages already sent keep their lease and receipt.
   */
  async function* stream(
    app: AppRecord,
    queue: string,
    windowSize: number,
    leaseSeconds: number,
    context: HandlerContext,
  ) {
    const stop = new AbortController();
    const onAbort = () => stop.abort();
    const { signal } = stop;
    if (context.signal.aborted || deps.shutdownSignal.aborted) stop.abort();
    context.signal.addEventListener("abort", onAbort, { once: true });
    deps.shutdownSignal.addEventListener("abort", onAbort, { once: true });
    const window = windows.open();
    // The app's limits as the call began: a stream keeps the dead-letter rule it started with.
    const rule = deadLetterRule(app);
    streamsGauge.inc();
    let unsent: StoredMessage[] = [];
    try {
      while (!signal.aborted) {
        const room = windowSize - window.size;
        if (room <= 0) {
          await window.shrunk(signal);
          continue;
        }
        // Registered before the claim, so a put landing between the claim and the wait still wakes it.
        const waiter = hub.register(app.id, queue);
        let served = false;
        let used: ReturnType<typeof waiter.beforeClaim>;
        try {
          used = waiter.beforeClaim();
          const claimed = await store.claimMany(app.id, queue, leaseSeconds, Math.min(room, STREAM_CLAIM_BATCH), rule);
          if (claimed.buried) buriedTotal.inc(claimed.buried);
          if (claimed.messages.length > 0) {
            served = true;
            unsent = claimed.messages;
          } else {
            if (signal.aborted) break;
            if (claimed.nextVisibleAt) hub.wakeAt(app.id, queue, claimed.nextVisibleAt.getTime());
            await waiter.wait(Date.now() + MAX_WAIT_SECONDS * 1000, signal);
            continue;
          }
        } finally {
          waiter.leave(served, used);
        }
        // One response per part of at most STREAM_RESPONSE_MAX_BYTES; the parts not yet handed on stay unsent.
        while (unsent.length > 0 && !signal.aborted) {
          const messages = responsePart(unsent);
          const part = unsent.slice(0, messages.length);
          for (const m of part) window.add(app.id, m.id, m.deliveries, m.leaseExpiresAt.getTime());
          // Handed to the transport from here on: sent.
          unsent = unsent.slice(part.length);
          streamSent.inc(messages.length);
          yield { messages };
        }
        if (signal.aborted) break;
      }
    } finally {
      window.close();
      context.signal.removeEventListener("abort", onAbort);
      deps.shutdownSignal.removeEventListener("abort", onAbort);
      // Given back before the stream counts as ended, so that once no stream is open no unsent lease remains.
      if (unsent.length > 0) {
        const leases = unsent.map((m) => ({
          id: m.id,
          deliveries: m.deliveries,
          visibleBefore: m.visibleBefore ?? new Date(),
        }));
        try {
          streamReleased.inc(await store.release(app.id, leases));
        } catch (err) {
          // The leases then simply lapse: a delay, not a lost message.
          logger.warn(
            { err: (err as Error).message, appId: app.id, count: leases.length },
            "could not release unsent stream leases",
          );
        }
      }
      streamsGauge.dec();
    }
  }

  const events: PlatformEvents = {
    async publish(appId, kind, data) {
      const app = await deps.apps.get(appId);
      const payload = JSON.stringify({ kind, at: Date.now(), data });
      const result = await store.putDroppingOldest({
        appId: app.id,
        queue: EVENTS_QUEUE,
        payload,
        delaySeconds: 0,
        ttlSeconds: app.limits.messageTtlSeconds,
        keep: app.limits.maxQueueDepth,
        notify: hub.payload(app.id, EVENTS_QUEUE, 0),
      });
      if (result.dropped > 0) {
        dropped.inc(result.dropped);
        logger.info({ appId: app.id, dropped: result.dropped }, "platform events dropped at the depth cap");
      }
      announced(app.id, EVENTS_QUEUE, 0);
      return { id: result.id };
    },
  };

  return {
    events,
    impl: {
      async listQueues(_req, context) {
        const app = appOf(context);
        const queues = await store.list(app.id);
        return {
          queues: queues.map((q) => ({
            name: q.name,
            depth: BigInt(q.depth),
            inFlight: BigInt(q.inFlight),
            maxDepth: BigInt(app.limits.maxQueueDepth),
            oldestAt: q.oldestAt ? timestampFromMs(q.oldestAt.getTime()) : undefined,
            deadLetters: BigInt(q.deadLetters),
          })),
        };
      },

      async putMessage(req, context) {
        const app = appOf(context);
        const queue = checkPutQueue(req.queue);
        const payload = payloadText(req.payload, app);
        const { ttlSeconds, delaySeconds } = putTimes(app, req);
        const result = await put(app, queue, payload, delaySeconds, ttlSeconds);
        if (!result.inserted) throw new Error("unreachable");
        return { id: result.id, queue, expiresAt: timestampFromMs(result.expiresAt.getTime()) };
      },

      async consumeMessage(req, context) {
        const app = appOf(context);
        const queue = checkQueueName(req.queue, true);
        const waitSeconds = checkRange("waitSeconds", req.waitSeconds, 0, MAX_WAIT_SECONDS, MAX_WAIT_SECONDS);
        const leaseSeconds = checkRange(
          "leaseSeconds",
          req.leaseSeconds,
          1,
          MAX_LEASE_SECONDS,
          Math.min(app.limits.leaseSeconds, MAX_LEASE_SECONDS),
        );
        const message = await consume(app, queue, waitSeconds, leaseSeconds, context);
        if (!message) throwIfPastDeadline(context);
        return message ? { message: toMessage(message) } : {};
      },

      async ackMessage(req, context) {
        const app = appOf(context);
        const receipt = decodeReceipt(req.receipt);
        const acked = await ackBatcher.call("", { appId: app.id, id: receipt.id, deliveries: receipt.deliveries });
        if (acked) windows.acked(app.id, receipt.id, receipt.deliveries);
        return { acked };
      },

      async putMessages(req, context) {
        const app = appOf(context);
        const queue = checkPutQueue(req.queue);
        checkCount("messages", req.messages.length);
        const now = Date.now();
        const items = req.messages.map((m, i) => {
          const payload = payloadText(m.payload, app, `messages[${i}].payload`);
          const { ttlSeconds, delaySeconds } = putTimes(app, m, `messages[${i}].`);
          return {
            payload,
            ttlSeconds,
            delaySeconds,
            notify: hub.payload(app.id, queue, delaySeconds > 0 ? now + delaySeconds * 1000 : 0),
          };
        });
        const max = app.limits.maxQueueDepth;
        const result = await store.putAll(app.id, queue, max, items);
        if (!result.inserted) throw batchTooDeep(queue, result.depth, items.length, max);
        // Local waiters: one wake per message visible now (no more than wait here), a timer for delayed ones.
        const visibleNow = items.filter((i) => i.delaySeconds === 0).length;
        for (let n = Math.min(visibleNow, hub.waiting()); n > 0; n--) announced(app.id, queue, 0);
        for (const delay of new Set(items.map((i) => i.delaySeconds).filter((d) => d > 0)))
          announced(app.id, queue, delay);
        return {
          messages: result.messages.map((m) => ({
            id: m.id,
            queue,
            expiresAt: timestampFromMs(m.expiresAt.getTime()),
          })),
        };
      },

      async ackMessages(req, context) {
        const app = appOf(context);
        checkCount("receipts", req.receipts.length);
        const receipts = req.receipts.map((_, i) => receiptAt(req.receipts, i));
        return { acked: await ackAll(app.id, receipts) };
      },

      async *streamMessages(req, context) {
        // Errors of a stream leave through the generator, past the interceptor's mapping: map them here.
        try {
          const app = appOf(context);
          const queue = checkQueueName(req.queue, true);
          const windowSize = checkRange("window", req.window, 1, MAX_STREAM_WINDOW, 0);
          const leaseSeconds = checkRange(
            "leaseSeconds",
            req.leaseSeconds,
            1,
            MAX_LEASE_SECONDS,
            Math.min(app.limits.leaseSeconds, MAX_LEASE_SECONDS),
          );
          yield* stream(app, queue, windowSize, leaseSeconds, context);
          throwIfPastDeadline(context);
        } catch (err) {
          const platformError = toPlatformError(err);
          // A client that cancels (or goes away) ends its stream normally: nothing to log.
          if (platformError.code === "internal" && !context.signal.aborted)
            logger.error({ err, rpc: "QueueService/StreamMessages" }, "unexpected error");
          throw toConnectError(platformError);
        }
      },
    },
  };
}
