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
  payload: z.custom<JsonValue>((v) => v !== undefined, { error: "is required" }),
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

export const queuesRoutes: readonly AnyRestRoute[] = [
  defineRoute({
    method: "GET",
    url: "/v1/queues",
    rpc: QueueService.method.listQueues,
    response: (out) => ({
      queues: out.queues.map((q) => ({
        name: q.name,
        depth: Number(q.depth),
        inFlight: Number(q.inFlight),
        maxDepth: Number(q.maxDepth),
        oldestAt: ms(q.oldestAt),
      })),
    }),
  }),
  // Registered before `/:queue`; the router prefers the static segment anyway.
  defineRoute({
    method: "POST",
    url: "/v1/queues/_ack",
    rpc: QueueService.method.ackMessage,
    body: AckBody,
    request: ({ body }) => ({ receipt: body.receipt }),
    response: (out) => ({ acked: out.acked }),
  }),
  defineRoute({
    method: "POST",
    url: "/v1/queues/:queue",
    rpc: QueueService.method.putMessage,
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
