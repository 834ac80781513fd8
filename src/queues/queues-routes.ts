/**
 * The `/v1/queues` routes (docs/api.md#queues), mapped onto `QueueService`. The schemas
 * check JSON shapes only; the rules on values (queue names, ranges, payload
 * size) are the implementation's, shared with gRPC. Times leave as epoch ms.
 */
import type { JsonValue } from "@bufbuild/protobuf";
import type { Value } from "@bufbuild/protobuf/wkt";
import { z } from "zod";
import { QueueService, type Message, type QueuePolicy } from "../../gen/platform/queues/v1/queues_pb.js";
import { invalidArgument } from "../core/errors.ts";
import { defineRoute, type AnyRestRoute } from "../core/http/rest-router.ts";
import { valueFromJson, valueToJson } from "./payload-value.ts";
import {
  epochMs,
  fixedObject,
  jsonObject,
  optionalInteger,
  optionalJsonObject,
  optionalString,
} from "../core/http/validation.ts";

function messageJson(m: Message) {
  return {
    id: m.id,
    queue: m.queue,
    payload: m.payload ? valueToJson(m.payload) : null,
    receipt: m.receipt,
    enqueuedAt: epochMs(m.enqueuedAt),
    expiresAt: epochMs(m.expiresAt),
    leaseExpiresAt: epochMs(m.leaseExpiresAt),
    deliveries: m.deliveries,
    ...(m.groupKey !== undefined && { groupKey: m.groupKey }),
  };
}

/** Kept inside int32 so the message stays encodable; the implementation checks the range. */
const int32 = (v: number | undefined) => (v === undefined ? undefined : Math.max(-0x80000000, Math.min(0x7fffffff, v)));

const QueuePath = z.object({ queue: z.string() });

const strings = (rule: string) => z.array(z.string({ error: "must be a string" }), { error: rule });

const AckBody = jsonObject({
  receipt: optionalString().meta({ description: "One receipt; or `receipts`." }),
  receipts: strings("must be an array of receipts")
    .optional()
    .meta({ description: "Extension: 1 to 1,000 receipts, answered by `acked: boolean[]` in the same order." }),
});

// Any parsed JSON value; taken as it is (not copied: payloads can be large).
const Payload = z
  .custom<JsonValue>((v) => v !== undefined, { error: "is required" })
  .meta({ description: "Any JSON value; the service does not read into it." });
const DedupKey = optionalString().meta({
  description:
    "Extension, 1 to 128 characters: a put with a key used on the queue within its policy's dedup window adds nothing and answers the first message (`deduplicated: true`).",
});

const Priority = optionalInteger().meta({
  description:
    "Extension, 0 to 9 (default 0): among the queue's visible messages, higher priorities are delivered first; within one, the oldest first.",
});

const GroupKey = optionalString().meta({
  description:
    "Extension, 1 to 128 characters, no control characters: the message's ordered group. A group's messages are delivered one at a time in put order (the next is not visible while one before it is leased, held back for a retry or delayed; a dead letter releases the group); other groups and ungrouped messages flow on. Within a group put order wins over `priority`.",
});

/** One message's fields, as a put takes them and as each message of a batch put does. */
const PutFields = {
  payload: Payload,
  delaySeconds: optionalInteger(),
  ttlSeconds: optionalInteger(),
  dedupKey: DedupKey,
  priority: Priority,
  groupKey: GroupKey,
};

const PutBody = jsonObject(PutFields);

const BatchPutBody = jsonObject({
  messages: z.array(fixedObject(PutFields), { error: "must be an array of messages" }),
});

/** No body at all is an empty one: every field has a default. */
const ConsumeBody = optionalJsonObject({
  waitSeconds: optionalInteger(),
  leaseSeconds: optionalInteger(),
  max: optionalInteger().meta({
    description: "Extension: lease up to this many (1 to 100), answered as `messages` instead of `message`.",
  }),
});

const ExtendBody = jsonObject({
  receipt: z.string({ error: "must be a string" }),
  leaseSeconds: z.number({ error: "must be an integer" }).int({ error: "must be an integer" }),
});

const NackBody = jsonObject({
  receipt: z.string({ error: "must be a string" }),
  delaySeconds: optionalInteger(),
  reason: optionalString().meta({
    description:
      "Extension: why the delivery failed, up to 1,000 characters; kept on the message and shown on its dead letter.",
  }),
});

const PurgeBody = optionalJsonObject({
  includeLeased: z.boolean({ error: "must be a boolean" }).optional().meta({
    description: "Also delete the leased messages (their receipts then ack false). Default false.",
  }),
});

const MessagePath = z.object({ queue: z.string(), id: z.string() });

const MESSAGE_STATUS_NAMES = ["unspecified", "waiting", "delayed", "leased", "dead"] as const;

const PolicyBody = jsonObject({
  queue: optionalString().meta({
    description: "Optional, and only the path's queue: a policy read with GET can be sent back whole.",
  }),
  maxDeliveries: optionalInteger(),
  deadLetterQueue: z.string({ error: "must be a string or null" }).nullable().optional(),
  retryDelaySeconds: optionalInteger(),
  retryBackoff: z.number({ error: "must be a number" }).nullish(),
  maxRetryDelaySeconds: optionalInteger(),
  retryJitter: z.number({ error: "must be a number" }).nullish(),
  leaseSeconds: optionalInteger(),
  dedupWindowSeconds: optionalInteger(),
  maxDeliveriesPerSecond: z
    .number({ error: "must be a number" })
    .nullish()
    .meta({ description: "Messages handed out a second at most, across all consumers; 0 or null removes the limit." }),
});

const DeadLetterQuery = z.object({
  limit: z.coerce.number({ error: "must be an integer" }).int({ error: "must be an integer" }).optional(),
  cursor: z.string().optional(),
});

const SelectionBody = optionalJsonObject({
  ids: strings("must be an array of message ids").optional(),
});

/** The method, path and body of the two calls on selected dead letters (replay, purge): `ids`, or every one. */
const deadLetterSelection = {
  method: "POST" as const,
  params: QueuePath,
  body: SelectionBody,
  request: ({ params, body }: { params: z.infer<typeof QueuePath>; body: z.infer<typeof SelectionBody> }) => ({
    queue: params.queue,
    ids: body.ids ?? [],
  }),
};

/** The answer of a route that answers one count of its RPC's answer (`{ "purged": 3 }`): its schema and mapping. */
function countAnswer<K extends string>(field: K) {
  return {
    responseSchema: z.object({ [field]: Int }),
    response: (out: Record<K, number>) => ({ [field]: out[field] }),
  };
}

function payloadValue(payload: JsonValue, field = "payload"): Value {
  try {
    return valueFromJson(payload);
  } catch {
    throw invalidArgument(field, "must be a JSON value");
  }
}

/** A whole number of a 200 body. */
const Int = z.number().int();
const EpochMs = Int.meta({ description: "Epoch milliseconds." });
const NullableMs = EpochMs.nullable();

function policyJson(p: QueuePolicy | undefined) {
  return {
    queue: p?.queue ?? "",
    maxDeliveries: p?.maxDeliveries ?? 0,
    deadLetterQueue: p?.deadLetterQueue ?? null,
    retryDelaySeconds: p?.retryDelaySeconds ?? 0,
    retryBackoff: p?.retryBackoff ?? 0,
    maxRetryDelaySeconds: p?.maxRetryDelaySeconds ?? 0,
    retryJitter: p?.retryJitter ?? 0,
    leaseSeconds: p?.leaseSeconds ?? 0,
    dedupWindowSeconds: p?.dedupWindowSeconds ?? 0,
    maxDeliveriesPerSecond: p?.maxDeliveriesPerSecond ?? 0,
  };
}

/** The 200 bodies of the routes below, as `response` builds them (the OpenAPI document's response shapes). */
const QueueListResponse = z.object({
  queues: z.array(
    z.object({
      name: z.string(),
      depth: Int,
      inFlight: Int,
      maxDepth: Int,
      oldestAt: NullableMs,
      deadLetters: Int.meta({ description: "Messages that reached the app's maxDeliveries; not counted in depth." }),
    }),
  ),
});
const AckResponse = z.object({
  acked: z.boolean().meta({ description: "False when the lease had lapsed and the message went back on the queue." }),
});
const AckManyResponse = z.object({
  acked: z.array(z.boolean()).meta({ description: "With `receipts`: one answer per receipt, in order." }),
});
const Deduplicated = z.boolean().meta({ description: "True when nothing was added: the first put of the dedup key." });
const PutResponse = z.object({
  id: z.string(),
  queue: z.string(),
  expiresAt: NullableMs,
  deduplicated: Deduplicated.optional().meta({ description: "Only with `dedupKey`: true when nothing was added." }),
});
const BatchPutResponse = z.object({
  queue: z.string(),
  messages: z.array(z.object({ id: z.string(), expiresAt: NullableMs, deduplicated: Deduplicated })),
});
const MessageJson = z.object({
  id: z.string(),
  queue: z.string(),
  payload: z.unknown().meta({ description: "The JSON value that was put." }),
  receipt: z.string().meta({ description: "Opaque; new on every delivery; pass it to `_ack`." }),
  enqueuedAt: NullableMs,
  expiresAt: NullableMs,
  leaseExpiresAt: NullableMs,
  deliveries: Int,
  groupKey: z
    .string()
    .optional()
    .meta({ description: "Extension: the ordered group the message was put in; absent when none." }),
});
const ConsumeResponse = z.object({
  message: MessageJson.nullable().meta({ description: "Null when nothing arrived within the wait; call again." }),
});
const ConsumeManyResponse = z.object({
  messages: z.array(MessageJson).meta({ description: "With `max`: empty when nothing arrived within the wait." }),
});
const ExtendResponse = z.object({
  extended: z.boolean().meta({ description: "False when the lease had lapsed or the message was acked." }),
  leaseExpiresAt: NullableMs,
});
const NackResponse = z.object({
  nacked: z.boolean().meta({ description: "False when the lease had lapsed or the message was acked." }),
});
const PolicyResponse = z.object({
  queue: z.string(),
  maxDeliveries: Int.meta({ description: "0 is unlimited." }),
  deadLetterQueue: z
    .string()
    .nullable()
    .meta({ description: "null: the queue's dead-letter list; `_drop`: deleted; a name: that queue of the app." }),
  retryDelaySeconds: Int,
  retryBackoff: z.number(),
  maxRetryDelaySeconds: Int,
  retryJitter: z.number().meta({ description: "0 to 1: each hold is drawn from [hold × (1 − retryJitter), hold]." }),
  leaseSeconds: Int,
  dedupWindowSeconds: Int,
  maxDeliveriesPerSecond: z.number().meta({
    description:
      'Messages handed out a second at most, across all consumers and instances (a consume beyond it waits, up to its waitSeconds); 0 is no limit. See docs/queues.md "Rate limits".',
  }),
});
const MessageStateResponse = z.object({
  id: z.string(),
  queue: z.string(),
  status: z.enum(["waiting", "delayed", "leased", "dead"]),
  enqueuedAt: NullableMs,
  expiresAt: NullableMs,
  deliveries: Int,
  visibleAt: NullableMs.meta({ description: "`delayed`: when it becomes visible; else null." }),
  leaseExpiresAt: NullableMs.meta({ description: "`leased`: when the lease lapses; else null." }),
  failureReason: z
    .string()
    .nullable()
    .meta({ description: "Why its last delivery failed: a nack's reason, or `lease expired`." }),
  diedAt: NullableMs.meta({ description: "`dead`: when it died; else null." }),
  groupKey: z.string().nullable().meta({ description: "The ordered group it is (or, dead, was) in; null when none." }),
});
const DeadLetterListResponse = z.object({
  deadLetters: z.array(
    z.object({
      id: z.string(),
      payload: z.unknown(),
      enqueuedAt: NullableMs,
      deliveries: Int,
      diedAt: NullableMs,
      expiresAt: NullableMs,
      failureReason: z
        .string()
        .nullable()
        .meta({ description: "Why its last delivery failed: the nack's reason, or `lease expired`." }),
      groupKey: z
        .string()
        .nullable()
        .meta({ description: "The ordered group it was in (its death released the group); null when none." }),
    }),
  ),
  nextCursor: z.string().nullable().meta({ description: "Null on the last page." }),
});

const POLICY_EXAMPLE = {
  queue: "jobs",
  maxDeliveries: 5,
  deadLetterQueue: "jobs-failed",
  retryDelaySeconds: 10,
  retryBackoff: 2,
  maxRetryDelaySeconds: 3600,
  retryJitter: 0,
  leaseSeconds: 30,
  dedupWindowSeconds: 300,
  maxDeliveriesPerSecond: 0,
};

export const queuesRoutes: readonly AnyRestRoute[] = [
  defineRoute({
    method: "GET",
    url: "/v1/queues",
    rpc: QueueService.method.listQueues,
    responseSchema: QueueListResponse,
    doc: {
      summary: "List every queue with something on it",
      errors: ["app_stopped"],
      responseExample: {
        queues: [{ name: "jobs", depth: 3, inFlight: 1, maxDepth: 10000, oldestAt: 1763892000000, deadLetters: 0 }],
      },
    },
    response: (out) => ({
      queues: out.queues.map((q) => ({
        name: q.name,
        depth: Number(q.depth),
        inFlight: Number(q.inFlight),
        maxDepth: Number(q.maxDepth),
        oldestAt: epochMs(q.oldestAt),
        deadLetters: Number(q.deadLetters),
      })),
    }),
  }),
  // Registered before `/:queue`; the router prefers the static segment anyway.
  defineRoute({
    method: "POST",
    url: "/v1/queues/_ack",
    rpc: QueueService.method.ackMessage,
    responseSchema: z.union([AckResponse, AckManyResponse]),
    doc: {
      summary: "Finish with a message (delete it), or with many",
      description:
        "Ack after the work is done. `acked: false` (a lapsed lease) is not an error. Extension: `{ receipts }` (1 to 1,000) acks many in one statement and answers `acked` as an array, in order.",
      errors: ["app_stopped"],
      requestExample: { receipt: "r1.AbCdEf" },
      responseExample: { acked: true },
    },
    body: AckBody,
    request: ({ body }) => {
      if (body.receipts === undefined && body.receipt === undefined) throw invalidArgument("receipt", "is required");
      return { receipt: body.receipt ?? "", receipts: body.receipts ?? [] };
    },
    response: (out, req) => (req.receipts.length > 0 ? { acked: out.ackedEach } : { acked: out.acked }),
  }),
  defineRoute({
    method: "POST",
    url: "/v1/queues/_extend",
    rpc: QueueService.method.extendLease,
    responseSchema: ExtendResponse,
    doc: {
      summary: "Extend (or shorten) a lease",
      description:
        "Extension. The lease of a receipt that still holds it ends `leaseSeconds` (1 to 43200) from now. `extended: false` when the lease had lapsed or the message was acked, as for `_ack`.",
      errors: ["app_stopped"],
      requestExample: { receipt: "r1.AbCdEf", leaseSeconds: 120 },
      responseExample: { extended: true, leaseExpiresAt: 1763892120000 },
    },
    body: ExtendBody,
    request: ({ body }) => ({ receipt: body.receipt, leaseSeconds: int32(body.leaseSeconds) }),
    response: (out) => ({ extended: out.extended, leaseExpiresAt: epochMs(out.leaseExpiresAt) }),
  }),
  defineRoute({
    method: "POST",
    url: "/v1/queues/_nack",
    rpc: QueueService.method.nackMessage,
    responseSchema: NackResponse,
    doc: {
      summary: "Give a leased message back",
      description:
        "Extension. The message is visible again after `delaySeconds` (0 to 43200), or without it after the queue policy's retry delay and backoff. The delivery counts toward the policy's `maxDeliveries`.",
      errors: ["app_stopped"],
      requestExample: { receipt: "r1.AbCdEf", delaySeconds: 10, reason: "smtp: 421 try again later" },
      responseExample: { nacked: true },
    },
    body: NackBody,
    request: ({ body }) => ({ receipt: body.receipt, delaySeconds: int32(body.delaySeconds), reason: body.reason }),
    response: (out) => ({ nacked: out.nacked }),
  }),
  defineRoute({
    method: "POST",
    url: "/v1/queues/:queue",
    rpc: QueueService.method.putMessage,
    idempotent: true,
    responseSchema: PutResponse,
    doc: {
      summary: "Put a message on a queue",
      description:
        "Creates the queue if nothing was on it. `delaySeconds` hides the message for that long; `ttlSeconds` drops it when not consumed in time. The `_events` queue is the platform's (403).",
      errors: ["app_stopped", "permission_denied", "queue_full"],
      requestExample: { payload: { orderId: 42 }, delaySeconds: 0, ttlSeconds: 86400 },
      responseExample: { id: "0193f0c4-7b1e-7c2a-9a55-3f1c2d4e5f60", queue: "jobs", expiresAt: 1763978400000 },
    },
    params: QueuePath,
    body: PutBody,
    request: ({ body, params }) => ({
      queue: params.queue,
      payload: payloadValue(body.payload),
      delaySeconds: int32(body.delaySeconds),
      ttlSeconds: int32(body.ttlSeconds),
      dedupKey: body.dedupKey,
      priority: int32(body.priority),
      groupKey: body.groupKey,
    }),
    response: (out, req) =>
      req.dedupKey === undefined
        ? { id: out.id, queue: out.queue, expiresAt: epochMs(out.expiresAt) }
        : { id: out.id, queue: out.queue, expiresAt: epochMs(out.expiresAt), deduplicated: out.deduplicated },
  }),
  defineRoute({
    method: "POST",
    url: "/v1/queues/:queue/batch",
    rpc: QueueService.method.putMessages,
    idempotent: true,
    responseSchema: BatchPutResponse,
    doc: {
      summary: "Put many messages, all or nothing",
      description:
        "Extension: 1 to 1,000 messages in one statement, stored in order. When one is invalid or they would not all fit under `maxDepth`, none is stored.",
      errors: ["app_stopped", "permission_denied", "queue_full"],
      requestExample: { messages: [{ payload: { orderId: 42 } }, { payload: { orderId: 43 }, dedupKey: "order-43" }] },
      responseExample: {
        queue: "jobs",
        messages: [
          { id: "0193f0c4-7b1e-7c2a-9a55-3f1c2d4e5f60", expiresAt: 1763978400000, deduplicated: false },
          { id: "0193f0c4-7b1e-7c2a-9a55-3f1c2d4e5f61", expiresAt: 1763978400000, deduplicated: false },
        ],
      },
    },
    params: QueuePath,
    body: BatchPutBody,
    request: ({ body, params }) => ({
      queue: params.queue,
      messages: body.messages.map((m, i) => ({
        payload: payloadValue(m.payload, `messages[${i}].payload`),
        delaySeconds: int32(m.delaySeconds),
        ttlSeconds: int32(m.ttlSeconds),
        dedupKey: m.dedupKey,
        priority: int32(m.priority),
        groupKey: m.groupKey,
      })),
    }),
    response: (out, req) => ({
      queue: req.queue,
      messages: out.messages.map((m) => ({ id: m.id, expiresAt: epochMs(m.expiresAt), deduplicated: m.deduplicated })),
    }),
  }),
  defineRoute({
    method: "POST",
    url: "/v1/queues/:queue/consume",
    rpc: QueueService.method.consumeMessage,
    responseSchema: z.union([ConsumeResponse, ConsumeManyResponse]),
    doc: {
      summary: "Take one message, waiting if there is none",
      description:
        "Long-polls up to `waitSeconds` (0 to 25, default about 25); the message is leased for `leaseSeconds` (1 to 43200) until acked. No body is required.",
      errors: ["app_stopped"],
      requestExample: { waitSeconds: 20, leaseSeconds: 60 },
      responseExample: {
        message: {
          id: "0193f0c4-7b1e-7c2a-9a55-3f1c2d4e5f60",
          queue: "jobs",
          payload: { orderId: 42 },
          receipt: "r1.AbCdEf",
          enqueuedAt: 1763892000000,
          expiresAt: 1763978400000,
          leaseExpiresAt: 1763892060000,
          deliveries: 1,
        },
      },
    },
    params: QueuePath,
    body: ConsumeBody,
    request: ({ body, params }) => ({
      queue: params.queue,
      waitSeconds: int32(body.waitSeconds),
      leaseSeconds: int32(body.leaseSeconds),
      max: int32(body.max),
    }),
    response: (out, req) =>
      req.max === undefined
        ? { message: out.message ? messageJson(out.message) : null }
        : { messages: out.messages.map(messageJson) },
  }),
  defineRoute({
    method: "GET",
    url: "/v1/queues/:queue/policy",
    rpc: QueueService.method.getQueuePolicy,
    responseSchema: PolicyResponse,
    doc: {
      summary: "Read a queue's policy",
      description: "Extension. Every field has a default (docs/queues.md); a queue with nothing on it has one too.",
      errors: ["app_stopped"],
      responseExample: POLICY_EXAMPLE,
    },
    params: QueuePath,
    request: ({ params }) => ({ queue: params.queue }),
    response: (out) => policyJson(out.policy),
  }),
  defineRoute({
    method: "PUT",
    url: "/v1/queues/:queue/policy",
    rpc: QueueService.method.updateQueuePolicy,
    responseSchema: PolicyResponse,
    doc: {
      summary: "Change a queue's policy",
      description:
        "Extension. The fields given replace those fields; the answer is the whole policy. `maxDeliveries` is bounded by the app's limit when the operator set one.",
      errors: ["app_stopped"],
      requestExample: { maxDeliveries: 5, deadLetterQueue: "jobs-failed", retryDelaySeconds: 10 },
      responseExample: POLICY_EXAMPLE,
    },
    params: QueuePath,
    body: PolicyBody,
    request: ({ body, params }) => {
      if (body.queue !== undefined && body.queue !== params.queue)
        throw invalidArgument("queue", `must be the path's queue "${params.queue}" when given`);
      return {
        queue: params.queue,
        maxDeliveries: int32(body.maxDeliveries),
        // null sets the dead-letter list back ("" over gRPC).
        deadLetterQueue: body.deadLetterQueue === null ? "" : body.deadLetterQueue,
        retryDelaySeconds: int32(body.retryDelaySeconds),
        retryBackoff: body.retryBackoff ?? undefined,
        retryJitter: body.retryJitter ?? undefined,
        maxRetryDelaySeconds: int32(body.maxRetryDelaySeconds),
        leaseSeconds: int32(body.leaseSeconds),
        dedupWindowSeconds: int32(body.dedupWindowSeconds),
        // null removes the limit, as 0 does.
        maxDeliveriesPerSecond: body.maxDeliveriesPerSecond === null ? 0 : body.maxDeliveriesPerSecond,
      };
    },
    response: (out) => policyJson(out.policy),
  }),
  defineRoute({
    method: "GET",
    url: "/v1/queues/:queue/dead-letters",
    rpc: QueueService.method.listQueueDeadLetters,
    responseSchema: DeadLetterListResponse,
    doc: {
      summary: "List a queue's dead letters",
      description:
        "Extension. In the order they died, `limit` (1 to 100, default 50) at a time; pass `nextCursor` back as `cursor`.",
      errors: ["app_stopped"],
      responseExample: {
        deadLetters: [
          {
            id: "0193f0c4-7b1e-7c2a-9a55-3f1c2d4e5f60",
            payload: { orderId: 42 },
            enqueuedAt: 1763892000000,
            deliveries: 5,
            diedAt: 1763892600000,
            expiresAt: 1764237600000,
            failureReason: "lease expired",
            groupKey: "customer-7",
          },
        ],
        nextCursor: null,
      },
    },
    params: QueuePath,
    query: DeadLetterQuery,
    request: ({ params, query }) => ({ queue: params.queue, limit: int32(query.limit), cursor: query.cursor ?? "" }),
    response: (out) => ({
      deadLetters: out.deadLetters.map((d) => ({
        id: d.id,
        payload: d.payload ? valueToJson(d.payload) : null,
        enqueuedAt: epochMs(d.enqueuedAt),
        deliveries: d.deliveries,
        diedAt: epochMs(d.diedAt),
        expiresAt: epochMs(d.expiresAt),
        failureReason: d.failureReason ?? null,
        groupKey: d.groupKey ?? null,
      })),
      nextCursor: out.nextCursor === "" ? null : out.nextCursor,
    }),
  }),
  defineRoute({
    url: "/v1/queues/:queue/dead-letters/replay",
    rpc: QueueService.method.replayQueueDeadLetters,
    doc: {
      summary: "Put dead letters back in line",
      description: "Extension. Those of `ids`, or every dead letter of the queue; visible now, deliveries 0.",
      errors: ["app_stopped"],
      requestExample: { ids: ["0193f0c4-7b1e-7c2a-9a55-3f1c2d4e5f60"] },
      responseExample: { replayed: 1 },
    },
    ...deadLetterSelection,
    ...countAnswer("replayed"),
  }),
  defineRoute({
    url: "/v1/queues/:queue/dead-letters/purge",
    rpc: QueueService.method.purgeQueueDeadLetters,
    doc: {
      summary: "Delete dead letters",
      description: "Extension. Those of `ids`, or every dead letter of the queue.",
      errors: ["app_stopped"],
      requestExample: {},
      responseExample: { purged: 3 },
    },
    ...deadLetterSelection,
    ...countAnswer("purged"),
  }),
  defineRoute({
    method: "POST",
    url: "/v1/queues/:queue/purge",
    rpc: QueueService.method.purgeQueue,
    doc: {
      summary: "Delete a queue's waiting messages",
      description:
        "Extension. Deletes the waiting messages (delayed ones included); with `includeLeased: true` the leased ones too, whose receipts then ack `false`. Dead letters stay (see `dead-letters/purge`). Safe to repeat: a second purge deletes what arrived since.",
      errors: ["app_stopped"],
      requestExample: { includeLeased: false },
      responseExample: { purged: 12 },
    },
    params: QueuePath,
    body: PurgeBody,
    request: ({ params, body }) => ({ queue: params.queue, includeLeased: body.includeLeased ?? false }),
    ...countAnswer("purged"),
  }),
  defineRoute({
    method: "GET",
    url: "/v1/queues/:queue/messages/:id",
    rpc: QueueService.method.getMessage,
    responseSchema: MessageStateResponse,
    doc: {
      summary: "Where a message is",
      description:
        "Extension. `waiting` (visible now), `delayed` (visible at `visibleAt`), `leased` (until `leaseExpiresAt`), or `dead` (in the queue's dead-letter list, with `failureReason`); 404 `not_found` once it was acked, purged or expired.",
      errors: ["app_stopped", "not_found"],
      responseExample: {
        id: "0193f0c4-7b1e-7c2a-9a55-3f1c2d4e5f60",
        queue: "jobs",
        status: "leased",
        enqueuedAt: 1763892000000,
        expiresAt: 1764237600000,
        deliveries: 2,
        visibleAt: null,
        leaseExpiresAt: 1763892630000,
        failureReason: "lease expired",
        diedAt: null,
        groupKey: "customer-7",
      },
    },
    params: MessagePath,
    request: ({ params }) => ({ queue: params.queue, id: params.id }),
    response: (out) => ({
      id: out.id,
      queue: out.queue,
      status: MESSAGE_STATUS_NAMES[out.status] as "waiting" | "delayed" | "leased" | "dead",
      enqueuedAt: epochMs(out.enqueuedAt),
      expiresAt: epochMs(out.expiresAt),
      deliveries: out.deliveries,
      visibleAt: epochMs(out.visibleAt),
      leaseExpiresAt: epochMs(out.leaseExpiresAt),
      failureReason: out.failureReason ?? null,
      diedAt: epochMs(out.diedAt),
      groupKey: out.groupKey ?? null,
    }),
  }),
];
