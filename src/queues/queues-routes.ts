/**
 * The SPEC.md `/v1/queues` routes, mapped onto `QueueService`. The schemas
 * check JSON shapes only; the rules on values (queue names, ranges, payload
 * size) are the implementation's, shared with gRPC. Times leave as epoch ms.
 */
import { fromJson, toJson, type JsonValue } from "@bufbuild/protobuf";
import { ValueSchema, type Value } from "@bufbuild/protobuf/wkt";
import { z } from "zod";
import { QueueService, type Message } from "../../gen/platform/queues/v1/queues_pb.js";
import { invalidArgument } from "../core/errors.ts";
import { defineRoute, type AnyRestRoute } from "../core/http/rest-router.ts";
import { epochMs, jsonObject, optionalInteger, optionalJsonObject } from "../core/http/validation.ts";

const ms = epochMs;

function messageJson(m: Message) {
  return {
    id: m.id,
    queue: m.queue,
    payload: m.payload ? toJson(ValueSchema, m.payload) : null,
    receipt: m.receipt,
    enqueuedAt: ms(m.enqueuedAt),
    expiresAt: ms(m.expiresAt),
    leaseExpiresAt: ms(m.leaseExpiresAt),
    deliveries: m.deliveries,
  };
}

/** Kept inside int32 so the message stays encodable; the implementation checks the range. */
const int32 = (v: number | undefined) => (v === undefined ? undefined : Math.max(-0x80000000, Math.min(0x7fffffff, v)));

export const QueuePath = z.object({ queue: z.string() });

export const AckBody = jsonObject({
  receipt: z.string({ error: "must be a string" }),
});

export const PutBody = jsonObject({
  // Any parsed JSON value; taken as it is (not copied: payloads can be large).
  payload: z
    .custom<JsonValue>((v) => v !== undefined, { error: "is required" })
    .meta({ description: "Any JSON value; the service does not read into it." }),
  delaySeconds: optionalInteger(),
  ttlSeconds: optionalInteger(),
});

/** No body at all is an empty one: every field has a default. */
export const ConsumeBody = optionalJsonObject({
  waitSeconds: optionalInteger(),
  leaseSeconds: optionalInteger(),
});

function payloadValue(payload: JsonValue): Value {
  try {
    return fromJson(ValueSchema, payload);
  } catch {
    throw invalidArgument("payload", "must be a JSON value");
  }
}

const EpochMs = z.number().int().meta({ description: "Epoch milliseconds." });
const NullableMs = EpochMs.nullable();

/** The 200 bodies of the routes below, as `response` builds them (the OpenAPI document's response shapes). */
export const QueueListResponse = z.object({
  queues: z.array(
    z.object({
      name: z.string(),
      depth: z.number().int(),
      inFlight: z.number().int(),
      maxDepth: z.number().int(),
      oldestAt: NullableMs,
      deadLetters: z
        .number()
        .int()
        .meta({ description: "Messages that reached the app's maxDeliveries; not counted in depth." }),
    }),
  ),
});
export const AckResponse = z.object({
  acked: z.boolean().meta({ description: "False when the lease had lapsed and the message went back on the queue." }),
});
export const PutResponse = z.object({ id: z.string(), queue: z.string(), expiresAt: NullableMs });
export const ConsumeResponse = z.object({
  message: z
    .object({
      id: z.string(),
      queue: z.string(),
      payload: z.unknown().meta({ description: "The JSON value that was put." }),
      receipt: z.string().meta({ description: "Opaque; new on every delivery; pass it to `_ack`." }),
      enqueuedAt: NullableMs,
      expiresAt: NullableMs,
      leaseExpiresAt: NullableMs,
      deliveries: z.number().int(),
    })
    .nullable()
    .meta({ description: "Null when nothing arrived within the wait; call again." }),
});

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
        oldestAt: ms(q.oldestAt),
        deadLetters: Number(q.deadLetters),
      })),
    }),
  }),
  // Registered before `/:queue`; the router prefers the static segment anyway.
  defineRoute({
    method: "POST",
    url: "/v1/queues/_ack",
    rpc: QueueService.method.ackMessage,
    responseSchema: AckResponse,
    doc: {
      summary: "Finish with a message (delete it)",
      description: "Ack after the work is done. `acked: false` (a lapsed lease) is not an error.",
      errors: ["app_stopped"],
      requestExample: { receipt: "r1.AbCdEf" },
      responseExample: { acked: true },
    },
    body: AckBody,
    request: ({ body }) => ({ receipt: body.receipt }),
    response: (out) => ({ acked: out.acked }),
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
    }),
    response: (out) => ({ id: out.id, queue: out.queue, expiresAt: ms(out.expiresAt) }),
  }),
  defineRoute({
    method: "POST",
    url: "/v1/queues/:queue/consume",
    rpc: QueueService.method.consumeMessage,
    responseSchema: ConsumeResponse,
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
    }),
    response: (out) => ({ message: out.message ? messageJson(out.message) : null }),
  }),
];
