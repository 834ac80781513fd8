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
 */
import { fromJson, toJson, type JsonValue } from "@bufbuild/protobuf";
import { ValueSchema, timestampFromMs, type Value } from "@bufbuild/protobuf/wkt";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type { Logger } from "pino";
import { QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import { NAME_PATTERN, NAME_RULE, type AppRecord } from "../core/apps/apps.ts";
import type { AppStore } from "../core/apps/app-store.ts";
import { appOf } from "../core/auth.ts";
import { createBatcher } from "../core/batcher.ts";
import { PlatformError, invalidArgument } from "../core/errors.ts";
import type { Metrics } from "../core/metrics.ts";
import {
  ACK_BATCH,
  CLAIM_BATCH,
  DEPTH_SLACK,
  EVENTS_QUEUE,
  MAX_DELAY_SECONDS,
  MAX_LEASE_SECONDS,
  MAX_WAIT_SECONDS,
  PUT_BATCH,
  QUEUE_FULL_RETRY_AFTER_SECONDS,
} from "./queue-limits.ts";
import { decodeReceipt, encodeReceipt } from "./receipt.ts";
import type { ClaimResult, PutItem, PutResult, QueueStore, StoredMessage } from "./queue-store.ts";
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
  if (!Number.isInteger(value) || value < min || value > max) throw invalidArgument(field, `must be an integer from ${min} to ${max}`);
  return value;
}

function payloadText(payload: Value | undefined, app: AppRecord): string {
  if (payload === undefined) throw invalidArgument("payload", "is required");
  let text: string;
  try {
    text = JSON.stringify(toJson(ValueSchema, payload));
  } catch {
    throw invalidArgument("payload", "must be a JSON value");
  }
  const bytes = Buffer.byteLength(text, "utf8");
  if (bytes > app.limits.maxPayloadBytes) {
    throw invalidArgument("payload", `must be at most ${app.limits.maxPayloadBytes} bytes as JSON (was ${bytes})`);
  }
  return text;
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

export function createQueuesService(deps: QueuesServiceOptions): QueuesImplementation {
  const { store, hub, logger, metrics } = deps;
  const putBatcher = createBatcher<PutItem & { appId: string; queue: string; depthBelow: number }, PutResult>({
    maxBatch: PUT_BATCH,
    maxInFlight: 1,
    run: (_key, items) => store.putMany(items[0].appId, items[0].queue, items[0].depthBelow, items),
  });
  const claimBatcher = createBatcher<{ appId: string; queue: string; leaseSeconds: number }, ClaimResult>({
    maxBatch: CLAIM_BATCH,
    maxInFlight: 1,
    async run(_key, items) {
      const { appId, queue, leaseSeconds } = items[0];
      const { messages, nextVisibleAt } = await store.claimMany(appId, queue, leaseSeconds, items.length);
      return items.map((_, i) => (messages[i] ? { message: messages[i] } : { nextVisibleAt }));
    },
  });
  const claim = (appId: string, queue: string, leaseSeconds: number) =>
    claimBatcher.call(`${appId}|${queue}|${leaseSeconds}`, { appId, queue, leaseSeconds });
  const ackBatcher = createBatcher<{ appId: string; id: string; deliveries: number }, boolean>({
    maxBatch: ACK_BATCH,
    maxInFlight: 1,
    run: (_key, items) => store.ackMany(items),
  });
  const dropped = metrics.counter("queue_events_dropped_total", "Platform events dropped (oldest first) because an app's _events queue was at its depth cap.", []);
  const waitingGauge = metrics.gauge("queue_waiting_consumers", "Consumes waiting (long-polling) on this instance.", []);

  /** After a put committed: local waiters now, other instances through the NOTIFY sent by the statement. */
  const announced = (appId: string, queue: string, delaySeconds: number) => hub.announce(appId, queue, Date.now() + delaySeconds * 1000);

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

  async function consume(app: AppRecord, queue: string, waitSeconds: number, leaseSeconds: number, context: HandlerContext) {
    if (waitSeconds === 0) return (await claim(app.id, queue, leaseSeconds)).message;
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
        const claimed = await claim(app.id, queue, leaseSeconds);
        if (claimed.message) {
          served = true;
          return claimed.message;
        }
        if (signal.aborted || Date.now() >= deadline) return undefined;
        if (claimed.nextVisibleAt && claimed.nextVisibleAt.getTime() < deadline) hub.wakeAt(app.id, queue, claimed.nextVisibleAt.getTime());
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
          })),
        };
      },

      async putMessage(req, context) {
        const app = appOf(context);
        const queue = checkQueueName(req.queue, true);
        if (queue === EVENTS_QUEUE) {
          throw new PlatformError("permission_denied", `${EVENTS_QUEUE} is the platform's events queue; apps cannot put on it`);
        }
        const payload = payloadText(req.payload, app);
        const ttlSeconds = checkRange("ttlSeconds", req.ttlSeconds, 1, app.limits.messageTtlSeconds, app.limits.messageTtlSeconds);
        const delaySeconds = checkRange("delaySeconds", req.delaySeconds, 0, MAX_DELAY_SECONDS, 0);
        if (delaySeconds >= ttlSeconds) throw invalidArgument("delaySeconds", "must be less than the message's lifetime (ttlSeconds)");
        const result = await put(app, queue, payload, delaySeconds, ttlSeconds);
        if (!result.inserted) throw new Error("unreachable");
        return { id: result.id, queue, expiresAt: timestampFromMs(result.expiresAt.getTime()) };
      },

      async consumeMessage(req, context) {
        const app = appOf(context);
        const queue = checkQueueName(req.queue, true);
        const waitSeconds = checkRange("waitSeconds", req.waitSeconds, 0, MAX_WAIT_SECONDS, MAX_WAIT_SECONDS);
        const leaseSeconds = checkRange("leaseSeconds", req.leaseSeconds, 1, MAX_LEASE_SECONDS, Math.min(app.limits.leaseSeconds, MAX_LEASE_SECONDS));
        const message = await consume(app, queue, waitSeconds, leaseSeconds, context);
        return message ? { message: toMessage(message) } : {};
      },

      async ackMessage(req, context) {
        const app = appOf(context);
        const receipt = decodeReceipt(req.receipt);
        return { acked: await ackBatcher.call("", { appId: app.id, id: receipt.id, deliveries: receipt.deliveries }) };
      },
    },
  };
}
