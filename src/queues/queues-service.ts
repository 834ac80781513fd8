/**
 * `QueueService`, implemented once for Connect, gRPC and the REST routes
 * (docs/api.md#queues, docs/queues.md): durable queues with leased
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
 * - **delivery**: one lease of a message; `deliveries` counts them toward
 *   `maxDeliveries` (0 again after a replay), `claims` in all its lives.
 * - **receipt**: names one delivery (the message and its `claims`); only the
 *   receipt of the current, unexpired lease acks (deletes) the message, and no
 *   receipt ever names two leases, across a replay too.
 * - **expiry**: a waiting message is dropped at `expiresAt`.
 * - **wake-up**: how a put ends a waiting consume, on any instance (see
 *   `wake-hub.ts`).
 * - **platform event**: `{ kind, at, data }` put on `_events` by the platform,
 *   never by the app; never refused for depth: the oldest waiting is dropped.
 * - **dead letter**: a message that had its queue policy's `maxDeliveries`
 *   deliveries and whose last lease lapsed (or was nacked): instead of being
 *   leased again it leaves the line for the queue's dead-letter list (which
 *   the app and the operator list, replay and purge), for the policy's
 *   dead-letter queue, or is dropped. Moved by the claim that would have
 *   leased it, so every consume path (unary, REST, streams, `_events`) obeys
 *   the rule.
 * - **retry hold**: after a lapsed lease or a nack without a delay, the time
 *   before the message is visible again (the policy's retry delay and backoff).
 * - **policy**: per queue, set by the app (`queue-policy.ts`).
 */
import type { JsonValue } from "@bufbuild/protobuf";
import { WireType } from "@bufbuild/protobuf/wire";
import { timestampFromMs, type Timestamp, type Value } from "@bufbuild/protobuf/wkt";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type { Logger } from "pino";
import {
  MessageStatus,
  QueueService,
  StreamMessagesResponseSchema,
  type PutMessagesResponseSchema,
  type StreamMessagesResponse,
} from "../../gen/platform/queues/v1/queues_pb.js";
import type { Db, InTransactionWith, Tx } from "../core/database/index.ts";
import { isUuid, type AppRecord } from "../core/apps/apps.ts";
import { appOf } from "../core/auth.ts";
import { createBatcher } from "../core/batcher.ts";
import { throwIfPastDeadline } from "../core/deadline.ts";
import { sendStreamHeaders } from "../core/stream-headers.ts";
import { answerInRun } from "../core/idempotent-run.ts";
import { characterCount, isWellFormedText } from "../core/text.ts";
import { checkQueueName } from "./queue-name.ts";
import { PlatformError, invalidArgument, toConnectError, toPlatformError } from "../core/errors.ts";
import type { Metrics } from "../core/metrics.ts";
import type { MessagingTracing } from "../core/tracing.ts";
import {
  EVENTS_QUEUE,
  EVENTS_TTL_SECONDS,
  MAX_BATCH_MESSAGES,
  MAX_CONSUME_MESSAGES,
  MAX_DELAY_SECONDS,
  MAX_STREAM_WINDOW,
  MAX_LEASE_SECONDS,
  MAX_WAIT_SECONDS,
  PUT_BATCH,
  QUEUE_FULL_RETRY_AFTER_SECONDS,
  QUIET_KEY_MS,
  STREAM_MESSAGE_JSON_OVERHEAD,
  STREAM_RESPONSE_MAX_BYTES,
} from "./queue-limits.ts";
import { encodeDelimitedMessage, toMessage } from "./message-binary.ts";
import { valueBinarySize, valueFromJsonText, valueToJsonText } from "./payload-value.ts";
import { decodeReceipt, type Receipt } from "./receipt.ts";
import { createQueueConsumers } from "./queue-consumers.ts";
import type { RateGate } from "./rate-gate.ts";
import type { DeadLetterOperator } from "./dead-letters.ts";
import { claimRule, effectivePolicy, policyChangeOf, policyMessage, type QueuePolicies } from "./queue-policy.ts";
import {
  createQueueStore,
  type DeadLetterSelection,
  type PutAllMessage,
  type PutDone,
  type PutItem,
  type PutResult,
  type QueueStore,
  type StoredMessage,
} from "./queue-store.ts";
import type { WakeHub } from "./wake-hub.ts";

/**
 * The public API of the queues facility that others use to put a platform
 * event `{ kind, at, data }` on an app's reserved `_events` queue (for
 * example `secret.set`). Never refused for depth: the oldest is dropped.
 */
export interface PlatformEvents {
  /**
   * Publishes on `trx`, the transaction of the change the event announces
   * (a secret's new version): the event is on `_events` and in the feed
   * exactly when that change commits. Call what it returns once `trx`
   * committed: it wakes this process's consumers and feed readers (other
   * instances hear the NOTIFY sent at the commit).
   */
  publishIn(trx: Db, appId: string, kind: string, data: JsonValue): Promise<() => void>;
}

/** The `_events` queue as the facility's publisher uses it (see `index.ts`, which adds the feed). */
interface EventsQueue {
  /** Puts `{ kind, at, data }` on the app's `_events` on `trx`; never refused for depth: the oldest is dropped. */
  put(trx: Db, app: AppRecord, kind: string, at: number, data: JsonValue): Promise<{ id: string }>;
  /** After the put committed: wakes this process's consumers of `_events`. */
  announce(appId: string): void;
}

export interface QueuesServiceOptions {
  store: QueueStore;
  hub: WakeHub;
  logger: Logger;
  metrics: Metrics;
  /** The dead-letter lists, shared with the operator's AdminService RPCs. */
  deadLetters: DeadLetterOperator;
  /** Aborted when the server starts shutting down: waiting consumes end at once. */
  shutdownSignal: AbortSignal;
  /** The spans of puts, consumes and acks, when tracing is on (docs/operations.md#traces). */
  tracing?: MessagingTracing;
  /** The tokens of rate-limited queues (docs/queues.md "Rate limits"). */
  rateGate: RateGate;
}

export interface QueuesImplementation {
  /** Every RPC but the event feed's, which `event-feed.ts` implements, and the schedules', `queue-schedules.ts`'s. */
  readonly impl: Omit<
    ServiceImpl<typeof QueueService>,
    "readEventFeed" | "putQueueSchedule" | "listQueueSchedules" | "deleteQueueSchedule"
  >;
  readonly events: EventsQueue;
  /**
   * An operator's test message (AdminService `PutTestMessage`): `PutMessage` as
   * the app, same checks and limits, on the operator's unit of work. The message's id.
   */
  putAsOperator(
    tx: Tx,
    app: AppRecord,
    queue: string,
    payload: Value | undefined,
    groupKey?: string,
  ): Promise<{ id: string }>;
  /**
   * The dead-letter sweep (housekeeping, every instance): in every queue whose policy limits deliveries,
   * the messages past the limit whose last lease lapsed (or was nacked) move to the dead letters, whether or
   * not anyone consumes. `appOf` reads an app (throws when it is gone). How many moved.
   */
  buryLapsed(appOf: (appId: string) => Promise<AppRecord>, signal: AbortSignal): Promise<number>;
  /** The queue policies the RPCs read (an operator's change through it applies at once on this instance). */
  readonly policies: QueuePolicies;
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
    text = valueToJsonText(payload);
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
/** What `PutMessage` reads of its request. */
interface PutMessageInput {
  queue: string;
  payload?: Value;
  delaySeconds?: number;
  ttlSeconds?: number;
  dedupKey?: string;
  priority?: number;
  groupKey?: string;
}

/** The highest priority (docs/queues.md "Priorities"): 0 to 9, higher first, as graphile-worker's and BullMQ's. */
const MAX_PRIORITY = 9;

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

function queueFull(queue: string, depth: number, max: number): PlatformError {
  return new PlatformError("queue_full", `queue ${queue} has ${max} messages waiting, its maxDepth`, {
    details: [`depth: ${depth} of maxDepth ${max}`],
    retryAfterSeconds: QUEUE_FULL_RETRY_AFTER_SECONDS,
  });
}

function checkDedupKey(field: string, key: string | undefined): string | undefined {
  if (key === undefined) return undefined;
  const n = [...key].length;
  if (n < 1 || n > 128) throw invalidArgument(field, `must be 1 to 128 characters (was ${n})`);
  // Compared as stored: a NUL cannot be stored, and a lone surrogate would be stored as U+FFFD (matching others).
  if (key.includes("\0") || !isWellFormedText(key))
    throw invalidArgument(field, "must be text without NUL characters or lone surrogates");
  return key;
}

/** The longest group key, in characters (code points): as a dedup key, and as SQS's `MessageGroupId`. */
const MAX_GROUP_KEY_CHARS = 128;

/**
 * A put's `groupKey` (docs/queues.md "Ordered groups"): 1 to 128 characters, no control characters (C0,
 * DEL, C1: a key is shown in listings and logs, where they would garble the line) and no lone surrogates
 * (stored as U+FFFD, it would join another key's group).
 */
function checkGroupKey(field: string, key: string | undefined): string | undefined {
  if (key === undefined) return undefined;
  const n = characterCount(key);
  if (n < 1 || n > MAX_GROUP_KEY_CHARS)
    throw invalidArgument(field, `must be 1 to ${MAX_GROUP_KEY_CHARS} characters (was ${n})`);
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f-\u009f]/.test(key) || !isWellFormedText(key))
    throw invalidArgument(field, "must be text without control characters or lone surrogates");
  return key;
}

/** Dead letters by id (1 to 1,000 ids), or all of the queue's (none given). */
function selection(ids: string[]): DeadLetterSelection {
  if (ids.length === 0) return { all: true };
  checkCount("ids", ids.length);
  ids.forEach((id, i) => {
    if (!isUuid(id)) throw invalidArgument(`ids[${i}]`, "must be a message id (a UUID)");
  });
  return { ids };
}

/** The longest `reason` a nack keeps, in characters (code points). */
const MAX_NACK_REASON_CHARS = 1_000;

function checkReason(reason: string): string {
  if (!isWellFormedText(reason)) throw invalidArgument("reason", "must be text (no lone surrogate)");
  if (characterCount(reason) > MAX_NACK_REASON_CHARS)
    throw invalidArgument("reason", `must be at most ${MAX_NACK_REASON_CHARS} characters`);
  return reason;
}

const MESSAGE_STATUS = {
  waiting: MessageStatus.WAITING,
  delayed: MessageStatus.DELAYED,
  leased: MessageStatus.LEASED,
  dead: MessageStatus.DEAD,
} as const;

/**
 * The most a `Message` encodes to in binary beyond its payload `Value` and
 * queue name: id (38 bytes), receipt (29), three timestamps (19 each at most),
 * deliveries (6) and the payload's, queue's and group key's tags and lengths (11).
 */
const MESSAGE_BINARY_OVERHEAD = 160;

/**
 * How many of the first messages of `unsent` fit in one `StreamMessages`
 * response of at most `STREAM_RESPONSE_MAX_BYTES` encoded (always at least
 * one), each made into its `Message` once (kept in `made` for the response):
 * its binary encoding when the call's codec is protobuf (`encodeDelimitedMessage`),
 * else the message object. The larger of the binary size (exact, or computed
 * without encoding) and the JSON text of the payload counts, so the cap holds
 * for the protobuf and the JSON encodings alike.
 */
function responsePart(
  unsent: StoredMessage[],
  made: Map<StoredMessage, ReturnType<typeof toMessage> | Uint8Array>,
  binaryCodec: boolean,
): number {
  let bytes = 0;
  let n = 0;
  for (const m of unsent) {
    let message = made.get(m);
    if (!message) made.set(m, (message = binaryCodec ? encodeDelimitedMessage(m) : toMessage(m)));
    // A group key (no control characters) at most doubles in JSON, where `"` and `\` are escaped.
    const group = m.groupKey === undefined ? 0 : Buffer.byteLength(m.groupKey);
    const binary =
      message instanceof Uint8Array
        ? message.length
        : valueBinarySize(message.payload) + Buffer.byteLength(m.queue) + group + MESSAGE_BINARY_OVERHEAD;
    const size = Math.max(binary, Buffer.byteLength(m.payload) + 2 * group + STREAM_MESSAGE_JSON_OVERHEAD) + 8;
    if (n > 0 && bytes + size > STREAM_RESPONSE_MAX_BYTES) break;
    n++;
    bytes += size;
  }
  return n;
}

/**
 * A `StreamMessagesResponse` of messages already encoded (`encodeDelimitedMessage`): each goes out as
 * field 1 (`messages`) through the message's unknown fields, which the binary encoding writes as they are
 * (tag, then the bytes: length and message). Only for a call whose codec is protobuf: the JSON encoding
 * leaves unknown fields out.
 */
function encodedResponse(encoded: Uint8Array[]) {
  return {
    $typeName: StreamMessagesResponseSchema.typeName,
    messages: [],
    $unknown: encoded.map((data) => ({ no: 1, wireType: WireType.LengthDelimited, data })),
  } satisfies StreamMessagesResponse;
}

/** Whether the call's messages are in the protobuf binary encoding (gRPC, gRPC-Web, Connect with proto), not JSON. */
const binaryCodecOf = (context: HandlerContext) => !/json/i.test(context.requestHeader.get("content-type") ?? "");

/** A put as the service answers it: the message put, or (dedup key) the first one of its key. */
interface PutAnswer extends PutDone {
  deduplicated: boolean;
}

interface PutMessageAnswer {
  id: string;
  queue: string;
  expiresAt: Timestamp;
  deduplicated: boolean;
}
type PutMessagesAnswer = MessageInitShape<typeof PutMessagesResponseSchema>;

/** A put message as `PutMessage` and each entry of `PutMessages` answer it. */
function putAnswer(queue: string, put: PutAnswer): PutMessageAnswer {
  return { id: put.id, queue, expiresAt: timestampFromMs(put.expiresAt.getTime()), deduplicated: put.deduplicated };
}

/**
 * `PutMessages`' answer: one `Timestamp` for each run of equal expiries (a batch's messages mostly share
 * their ttl, so their expiry), not one made per message; the encoders only read it.
 */
function putAnswers(queue: string, puts: PutAnswer[]): PutMessageAnswer[] {
  let lastMs = NaN;
  let last = timestampFromMs(0);
  return puts.map((put) => {
    const ms = put.expiresAt.getTime();
    if (ms !== lastMs) {
      lastMs = ms;
      last = timestampFromMs(ms);
    }
    return { id: put.id, queue, expiresAt: last, deduplicated: put.deduplicated };
  });
}

export function createQueuesService(deps: QueuesServiceOptions): QueuesImplementation {
  const { store, hub, logger, metrics, tracing } = deps;
  const consumers = createQueueConsumers(deps);
  const { policies, windows } = consumers;
  const policyOf = (app: AppRecord, queue: string) => consumers.policyOf(app, queue);
  const putBatcher = createBatcher<PutItem & { appId: string; queue: string; depthBelow: number }, PutResult>({
    maxBatch: PUT_BATCH,
    maxInFlight: 1,
    quietMs: QUIET_KEY_MS,
    run: (_key, items) =>
      store.putMany({ appId: items[0].appId, queue: items[0].queue, depthBelow: items[0].depthBelow, items }),
  });
  const dropped = metrics.counter(
    "queue_events_dropped_total",
    "Platform events dropped (oldest first) because an app's _events queue was at its depth cap.",
    [],
  );
  /** After a put committed: local waiters now, other instances through the NOTIFY sent by the statement. */
  const announced = (appId: string, queue: string, delaySeconds: number) =>
    hub.announce(appId, queue, Date.now() + delaySeconds * 1000);

  async function put(
    app: AppRecord,
    queue: string,
    payload: string,
    delaySeconds: number,
    ttlSeconds: number,
    dedupKey: string | undefined,
    answerIn?: InTransactionWith<PutAnswer>,
    priority = 0,
    traceParent?: string,
    groupKey?: string,
  ): Promise<PutAnswer> {
    const max = app.limits.maxQueueDepth;
    if (dedupKey !== undefined) {
      // A keyed put takes the serialised path: its key is checked and recorded under the queue's lock.
      const { dedupWindowSeconds } = await policies.get(app, queue);
      const notify = hub.payload(app.id, queue, delaySeconds > 0 ? Date.now() + delaySeconds * 1000 : 0);
      const result = await store.putAll({
        appId: app.id,
        queue,
        maxDepth: max,
        items: [
          {
            payload,
            delaySeconds,
            ttlSeconds,
            notify,
            dedupKey,
            priority,
            ...(groupKey !== undefined && { groupKey }),
          },
        ],
        dedupWindowSeconds,
        answerIn: answerIn && ((trx, messages) => answerIn(trx, messages[0])),
      });
      if (!result.inserted) throw queueFull(queue, result.depth, max);
      if (!result.messages[0].deduplicated) announced(app.id, queue, delaySeconds);
      return result.messages[0];
    }
    const input = {
      appId: app.id,
      queue,
      payload,
      delaySeconds,
      ttlSeconds,
      priority,
      notify: hub.payload(app.id, queue, 0),
      ...(traceParent && { traceParent }),
      ...(groupKey !== undefined && { groupKey }),
    };
    if (delaySeconds > 0) input.notify = hub.payload(app.id, queue, Date.now() + delaySeconds * 1000);
    // A put with `answerIn` (an idempotent answer) needs a transaction of its own, not a shared batch.
    const result: PutResult = answerIn
      ? await store.putSerialized({ ...input, depthBelow: max }, (trx: Db, made: PutDone) =>
          answerIn(trx, { ...made, deduplicated: false }),
        )
      : await putBatcher.call(`${app.id}|${queue}|${max}`, { ...input, depthBelow: max });
    if (!result.inserted) throw queueFull(queue, result.depth, max);
    announced(app.id, queue, delaySeconds);
    return { id: result.id, expiresAt: result.expiresAt, deduplicated: false };
  }

  /**
   * `PutMessage` of `app`; `answerIn`, the answer of an idempotent run, commits with the message.
   */
  async function putMessage(app: AppRecord, req: PutMessageInput, answerIn?: InTransactionWith<PutMessageAnswer>) {
    const queue = checkPutQueue(req.queue);
    const payload = payloadText(req.payload, app);
    const { ttlSeconds, delaySeconds } = putTimes(app, req);
    const dedupKey = checkDedupKey("dedupKey", req.dedupKey);
    const priority = checkRange("priority", req.priority, 0, MAX_PRIORITY, 0);
    const groupKey = checkGroupKey("groupKey", req.groupKey);
    const answer = (r: PutAnswer) => putAnswer(queue, r);
    const done = answerIn && ((trx: Db, made: PutAnswer) => answerIn(trx, answer(made)));
    const run = (traceParent?: string) =>
      put(app, queue, payload, delaySeconds, ttlSeconds, dedupKey, done, priority, traceParent, groupKey);
    return answer(tracing ? await tracing.send(queue, run) : await run());
  }

  /**
   * An operator's test message: `PutMessage`'s checks and limits, one serialised put on the operator's unit
   * of work `tx` (as an idempotent put's); its consumers are woken once `tx` committed.
   */
  async function putOn(tx: Tx, app: AppRecord, req: PutMessageInput): Promise<{ id: string }> {
    const queue = checkPutQueue(req.queue);
    const payload = payloadText(req.payload, app);
    const { ttlSeconds, delaySeconds } = putTimes(app, req);
    const groupKey = checkGroupKey("groupKey", req.groupKey);
    const max = app.limits.maxQueueDepth;
    const run = async (traceParent?: string) => {
      const result = await createQueueStore(tx.db).putSerialized({
        appId: app.id,
        queue,
        payload,
        delaySeconds,
        ttlSeconds,
        priority: 0,
        notify: hub.payload(app.id, queue, delaySeconds > 0 ? Date.now() + delaySeconds * 1000 : 0),
        ...(traceParent && { traceParent }),
        ...(groupKey !== undefined && { groupKey }),
        depthBelow: max,
      });
      if (!result.inserted) throw queueFull(queue, result.depth, max);
      tx.afterCommit(() => announced(app.id, queue, delaySeconds));
      return { id: result.id };
    };
    return tracing ? tracing.send(queue, run) : run();
  }

  const events: EventsQueue = {
    async put(trx, app, kind, at, data) {
      const result = await createQueueStore(trx).putDroppingOldest({
        appId: app.id,
        queue: EVENTS_QUEUE,
        payload: JSON.stringify({ kind, at, data }),
        delaySeconds: 0,
        // Not the message lifetime: unread, an event leaves `_events` within the hour (EVENTS_TTL_SECONDS).
        ttlSeconds: Math.min(app.limits.messageTtlSeconds, EVENTS_TTL_SECONDS),
        keep: app.limits.maxQueueDepth,
        notify: hub.payload(app.id, EVENTS_QUEUE, 0),
      });
      if (result.dropped > 0) {
        dropped.inc(result.dropped);
        logger.info({ appId: app.id, dropped: result.dropped }, "platform events dropped at the depth cap");
      }
      return { id: result.id };
    },
    announce: (appId) => announced(appId, EVENTS_QUEUE, 0),
  };

  return {
    events,
    putAsOperator: (tx, app, queue, payload, groupKey) =>
      putOn(tx, app, { queue, payload, ...(groupKey !== undefined && { groupKey }) }),
    policies,
    async buryLapsed(appOf, signal) {
      let moved = 0;
      let failure: Error | undefined;
      for (const { appId, queue } of await store.queuesWithDeliveryLimit()) {
        if (signal.aborted) break;
        try {
          moved += await consumers.bury(await appOf(appId), queue);
        } catch (err) {
          // One queue (or a deleted app) does not keep the others from their sweep.
          failure ??= err instanceof Error ? err : new Error("the dead-letter sweep of a queue failed");
        }
      }
      if (failure !== undefined) throw failure;
      return moved;
    },
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

      putMessage(req, context) {
        const answerIn = answerInRun(context, QueueService.method.putMessage, (answer: PutMessageAnswer) => answer);
        return putMessage(appOf(context), req, answerIn);
      },

      async consumeMessage(req, context) {
        const app = appOf(context);
        const queue = checkQueueName(req.queue, true);
        const waitSeconds = checkRange("waitSeconds", req.waitSeconds, 0, MAX_WAIT_SECONDS, MAX_WAIT_SECONDS);
        const max = checkRange("max", req.max, 1, MAX_CONSUME_MESSAGES, 1);
        const { policy, rule } = await policyOf(app, queue);
        const leaseSeconds = checkRange("leaseSeconds", req.leaseSeconds, 1, MAX_LEASE_SECONDS, policy.leaseSeconds);
        const consume = () => consumers.consume(app, { queue, waitSeconds, leaseSeconds, rule, n: max }, context);
        const messages = tracing ? await tracing.receive(queue, consume) : await consume();
        if (messages.length === 0) throwIfPastDeadline(context, "a message");
        if (req.max !== undefined) return { messages: messages.map(toMessage) };
        return messages[0] ? { message: toMessage(messages[0]) } : {};
      },

      async ackMessage(req, context) {
        const app = appOf(context);
        if (req.receipts.length > 0) {
          if (req.receipt !== "") throw invalidArgument("receipt", "must not be given with receipts");
          checkCount("receipts", req.receipts.length);
          const receipts = req.receipts.map((_, i) => receiptAt(req.receipts, i));
          const ackAll = () => consumers.ackAll(app.id, receipts);
          const ids = () => receipts.map((r) => r.id);
          return { ackedEach: tracing ? await tracing.settle("ack", ids(), ackAll) : await ackAll() };
        }
        const receipt = decodeReceipt(req.receipt);
        const ackOne = () => consumers.ackOne(app.id, receipt);
        return { acked: tracing ? await tracing.settle("ack", [receipt.id], ackOne) : await ackOne() };
      },

      async putMessages(req, context) {
        const app = appOf(context);
        const queue = checkPutQueue(req.queue);
        checkCount("messages", req.messages.length);
        const now = Date.now();
        // One notification text for every message visible at once (most batches), not one made per message.
        const notifyNow = hub.payload(app.id, queue, 0);
        const items = req.messages.map((m, i) => {
          const payload = payloadText(m.payload, app, `messages[${i}].payload`);
          const { ttlSeconds, delaySeconds } = putTimes(app, m, `messages[${i}].`);
          return {
            payload,
            ttlSeconds,
            delaySeconds,
            notify: delaySeconds > 0 ? hub.payload(app.id, queue, now + delaySeconds * 1000) : notifyNow,
            dedupKey: checkDedupKey(`messages[${i}].dedupKey`, m.dedupKey),
            priority: checkRange(`messages[${i}].priority`, m.priority, 0, MAX_PRIORITY, 0),
            groupKey: checkGroupKey(`messages[${i}].groupKey`, m.groupKey),
          };
        });
        const max = app.limits.maxQueueDepth;
        const keyed = items.some((i) => i.dedupKey !== undefined);
        const window = keyed ? (await policies.get(app, queue)).dedupWindowSeconds : 0;
        const answer = (messages: PutAllMessage[]): PutMessagesAnswer => ({
          messages: putAnswers(queue, messages),
        });
        const answerIn = answerInRun(context, QueueService.method.putMessages, answer);
        const result = await store.putAll({
          appId: app.id,
          queue,
          maxDepth: max,
          items,
          dedupWindowSeconds: window,
          answerIn,
        });
        if (!result.inserted) throw batchTooDeep(queue, result.depth, items.length, max);
        // Local waiters: one wake per message visible now (no more than wait here), a timer for delayed ones.
        const added = items.filter((_, i) => !result.messages[i].deduplicated);
        const visibleNow = added.filter((i) => i.delaySeconds === 0).length;
        for (let n = Math.min(visibleNow, hub.waiting()); n > 0; n--) announced(app.id, queue, 0);
        for (const delay of new Set(added.map((i) => i.delaySeconds).filter((d) => d > 0)))
          announced(app.id, queue, delay);
        return answer(result.messages);
      },

      async ackMessages(req, context) {
        const app = appOf(context);
        checkCount("receipts", req.receipts.length);
        const receipts = req.receipts.map((_, i) => receiptAt(req.receipts, i));
        return { acked: await consumers.ackAll(app.id, receipts) };
      },

      async extendLease(req, context) {
        const app = appOf(context);
        const receipt = decodeReceipt(req.receipt);
        const leaseSeconds = checkRange("leaseSeconds", req.leaseSeconds, 1, MAX_LEASE_SECONDS, 0);
        const until = await store.extend({ appId: app.id, id: receipt.id, claim: receipt.claim, leaseSeconds });
        // The window's clock is this process's (see stream-windows.ts): the new end, counted from now.
        if (until) windows.extended(app.id, receipt.id, receipt.claim, Date.now() + leaseSeconds * 1000);
        return until ? { extended: true, leaseExpiresAt: timestampFromMs(until.getTime()) } : { extended: false };
      },

      async nackMessage(req, context) {
        const app = appOf(context);
        const receipt = decodeReceipt(req.receipt);
        const delaySeconds =
          req.delaySeconds === undefined
            ? undefined
            : checkRange("delaySeconds", req.delaySeconds, 0, MAX_LEASE_SECONDS, 0);
        const reason = req.reason === undefined ? undefined : checkReason(req.reason);
        // The receipt names the message, not its queue: the retry hold is that of the policy of the queue it is on.
        const appPolicy = effectivePolicy(app, undefined);
        const appRule = claimRule(app, appPolicy, () => "");
        // A nack is held back by the default's delay even where a lapse is not (`holdLapses`).
        const defaults = {
          ...appRule.retry,
          delaySeconds: appPolicy.retryDelaySeconds,
          maxDeliveries: appRule.maxDeliveries,
        };
        const nacked = await store.nack({
          appId: app.id,
          id: receipt.id,
          claim: receipt.claim,
          delaySeconds,
          defaults,
          notifyPrefix: hub.payloadPrefix(app.id),
          reason,
        });
        if (nacked === undefined) return { nacked: false };
        windows.acked(app.id, receipt.id, receipt.claim);
        // Waiters here now (or when the hold ends); other instances through the statement's NOTIFY.
        hub.announce(app.id, nacked.queue, nacked.visibleAtMs);
        return { nacked: true };
      },

      async getQueuePolicy(req, context) {
        const app = appOf(context);
        const queue = checkQueueName(req.queue, true);
        return { policy: policyMessage(queue, await policies.get(app, queue)) };
      },

      async updateQueuePolicy(req, context) {
        const app = appOf(context);
        const queue = checkQueueName(req.queue, true);
        const policy = await policies.update(app, queue, policyChangeOf(req));
        return { policy: policyMessage(queue, policy) };
      },

      async listQueueDeadLetters(req, context) {
        const app = appOf(context);
        const queue = checkQueueName(req.queue, true);
        const limit = checkRange("limit", req.limit, 1, 100, 50);
        let page;
        try {
          // Whole payloads, as a consume answers them: a letter may be longer than the app's payload limit now
          // (the limit lowered since, or a platform event, which that limit does not bound).
          page = await deps.deadLetters.list({
            appId: app.id,
            queue,
            pageSize: limit,
            pageToken: req.cursor,
            maxChars: undefined,
          });
        } catch (err) {
          // The operator's message names its own field; this one is `cursor`.
          if (err instanceof PlatformError && err.code === "invalid_argument")
            throw invalidArgument("cursor", "is not a cursor of this listing");
          throw err;
        }
        return {
          deadLetters: page.deadLetters.map((d) => ({
            id: d.id,
            payload: valueFromJsonText(d.payload),
            enqueuedAt: timestampFromMs(d.enqueuedAt.getTime()),
            deliveries: d.deliveries,
            diedAt: timestampFromMs(d.diedAt.getTime()),
            expiresAt: timestampFromMs(d.expiresAt.getTime()),
            failureReason: d.failureReason ?? undefined,
            groupKey: d.groupKey ?? undefined,
          })),
          nextCursor: page.nextPageToken,
        };
      },

      async replayQueueDeadLetters(req, context) {
        const app = appOf(context);
        const queue = checkQueueName(req.queue, true);
        const which = selection(req.ids);
        return { replayed: await deps.deadLetters.replay(app.id, queue, which, app.limits.messageTtlSeconds) };
      },

      async purgeQueueDeadLetters(req, context) {
        const app = appOf(context);
        const queue = checkQueueName(req.queue, true);
        return { purged: await deps.deadLetters.purge(app.id, queue, selection(req.ids)) };
      },

      async purgeQueue(req, context) {
        const app = appOf(context);
        // `_events` too: the app consumes it, so it may also clear it.
        const queue = checkQueueName(req.queue, true);
        const purged = await store.purge(app.id, queue, req.includeLeased);
        // Purged leases leave any stream window that holds them when their lease ends (their acks answer false).
        return { purged };
      },

      async getMessage(req, context) {
        const app = appOf(context);
        const queue = checkQueueName(req.queue, true);
        if (!isUuid(req.id)) throw invalidArgument("id", "must be a message id (a UUID)");
        const state = await store.messageState(app.id, queue, req.id.toLowerCase());
        if (!state) throw new PlatformError("not_found", `no message ${req.id} on queue ${queue}`);
        const ts = (d: Date | null) => (d === null ? undefined : timestampFromMs(d.getTime()));
        // Each field named (a field added to the state later is not answered unless chosen here); the times
        // become Timestamps, a null an absent field.
        return {
          id: state.id,
          deliveries: state.deliveries,
          queue,
          status: MESSAGE_STATUS[state.status],
          enqueuedAt: ts(state.enqueuedAt),
          expiresAt: ts(state.expiresAt),
          visibleAt: ts(state.visibleAt),
          leaseExpiresAt: ts(state.leaseExpiresAt),
          diedAt: ts(state.diedAt),
          failureReason: state.failureReason ?? undefined,
          groupKey: state.groupKey ?? undefined,
        };
      },

      async *streamMessages(req, context) {
        // Errors of a stream leave through the generator, past the interceptor's mapping: map them here.
        try {
          const app = appOf(context);
          const queue = checkQueueName(req.queue, true);
          const windowSize = checkRange("window", req.window, 1, MAX_STREAM_WINDOW, 0);
          const { policy, rule } = await policyOf(app, queue);
          const leaseSeconds = checkRange("leaseSeconds", req.leaseSeconds, 1, MAX_LEASE_SECONDS, policy.leaseSeconds);
          // Each message is made into its `Message` (or, for a binary codec, its encoding) once: when its size
          // is counted.
          const binaryCodec = binaryCodecOf(context);
          const made = new Map<StoredMessage, ReturnType<typeof toMessage> | Uint8Array>();
          const fit = (unsent: StoredMessage[]) => responsePart(unsent, made, binaryCodec);
          const take = (m: StoredMessage) => {
            const message = made.get(m) ?? (binaryCodec ? encodeDelimitedMessage(m) : toMessage(m));
            made.delete(m);
            return message;
          };
          // The call is accepted: its headers go now, not with a first message that may be long in coming.
          sendStreamHeaders(context);
          for await (const { messages } of consumers.stream(
            app,
            { queue, windowSize, leaseSeconds, rule },
            context,
            fit,
          )) {
            yield binaryCodec
              ? encodedResponse(messages.map((m) => take(m) as Uint8Array))
              : { messages: messages.map((m) => take(m) as ReturnType<typeof toMessage>) };
          }
          throwIfPastDeadline(context, "a message");
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
