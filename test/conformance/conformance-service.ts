/**
 * The Connect conformance suite's reference `ConformanceService`, as its server tests require
 * (connectrpc.com/conformance, docs/testing_servers.md): each call answers as its request's response
 * definition says (data, headers, trailers, an error, a delay) and echoes what the server saw (the request
 * headers, the deadline, every request message) in the payload, or in the error's details when there is
 * no payload. Test-only: served by `conformance-server.ts` beside the facilities, never by the service.
 */
import { create, createRegistry, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { anyPack, type Any } from "@bufbuild/protobuf/wkt";
import { ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import {
  BidiStreamRequestSchema,
  ClientStreamRequestSchema,
  ConformancePayload_RequestInfoSchema,
  ConformancePayloadSchema,
  ConformanceService,
  IdempotentUnaryRequestSchema,
  ServerStreamRequestSchema,
  UnaryRequestSchema,
  type ConformancePayload,
  type ConformancePayload_RequestInfo,
  type Error as ConformanceError,
  type Header,
  type StreamResponseDefinition,
  type UnaryResponseDefinition,
} from "../../gen/test-only/connectrpc/conformance/v1/service_pb.js";

/** The messages the payloads' `Any` fields hold, for the JSON codec. */
export const conformanceRegistry = createRegistry(
  UnaryRequestSchema,
  IdempotentUnaryRequestSchema,
  ClientStreamRequestSchema,
  ServerStreamRequestSchema,
  BidiStreamRequestSchema,
  ConformancePayload_RequestInfoSchema,
);

type Responses = AsyncIterable<{ payload: ConformancePayload }>;

export function createConformanceImpl(): Partial<ServiceImpl<typeof ConformanceService>> {
  return {
    unary: (req, ctx) => answerOnce(req.responseDefinition, [pack(UnaryRequestSchema, req)], ctx),
    idempotentUnary: (req, ctx) =>
      answerOnce(req.responseDefinition, [pack(IdempotentUnaryRequestSchema, req)], ctx, connectGetInfo(ctx)),
    async clientStream(requests, ctx) {
      let definition: UnaryResponseDefinition | undefined;
      const received: Any[] = [];
      for await (const req of requests) {
        // Only the first message's definition counts.
        if (received.length === 0) definition = req.responseDefinition;
        received.push(pack(ClientStreamRequestSchema, req));
      }
      return answerOnce(definition, received, ctx);
    },
    async *serverStream(req, ctx): Responses {
      const definition = req.responseDefinition;
      setHeaders(ctx, definition);
      const info = requestInfo(ctx, [pack(ServerStreamRequestSchema, req)]);
      yield* respond(definition, info, ctx);
    },
    async *bidiStream(requests, ctx): Responses {
      let definition: StreamResponseDefinition | undefined;
      let fullDuplex = false;
      let first = true;
      let sent = 0;
      let received: Any[] = [];
      for await (const req of requests) {
        if (first) {
          first = false;
          definition = req.responseDefinition;
          fullDuplex = req.fullDuplex;
          setHeaders(ctx, definition);
        }
        received.push(pack(BidiStreamRequestSchema, req));
        if (!fullDuplex) continue;
        // Full duplex: one answer to each message, echoing the messages since the last answer.
        if (!definition || sent >= definition.responseData.length) break;
        await sleep(definition.responseDelayMs, ctx.signal);
        yield { payload: payload(definition.responseData[sent], requestInfo(ctx, received)) };
        sent++;
        received = [];
      }
      // Half duplex (or more answers than messages): the rest now, the first one echoing every message.
      yield* respond(definition, requestInfo(ctx, received), ctx, sent);
    },
  };
}

/** The answer of a call with one response (unary, client stream): a payload, or the error asked for. */
async function answerOnce(
  definition: UnaryResponseDefinition | undefined,
  received: Any[],
  ctx: HandlerContext,
  getInfo?: ConformancePayload_RequestInfo["connectGetInfo"],
): Promise<{ payload: ConformancePayload }> {
  setHeaders(ctx, definition);
  const info = requestInfo(ctx, received, getInfo);
  if (definition?.response.case === "error") throw connectError(definition.response.value, info);
  if (definition?.responseDelayMs) await sleep(definition.responseDelayMs, ctx.signal);
  return {
    payload: payload(definition?.response.case === "responseData" ? definition.response.value : undefined, info),
  };
}

/** The stream's answers from the `from`th on, then its error if one is asked for. */
async function* respond(
  definition: StreamResponseDefinition | undefined,
  info: ConformancePayload_RequestInfo,
  ctx: HandlerContext,
  from = 0,
): Responses {
  const data = definition?.responseData ?? [];
  for (let i = from; i < data.length; i++) {
    await sleep(definition?.responseDelayMs ?? 0, ctx.signal);
    // Only the first answer of the stream echoes the request.
    yield { payload: payload(data[i], i === 0 ? info : undefined) };
  }
  if (definition?.error) throw connectError(definition.error, data.length === 0 ? info : undefined);
}

function payload(data: Uint8Array | undefined, info: ConformancePayload_RequestInfo | undefined): ConformancePayload {
  return create(ConformancePayloadSchema, { data: data ?? new Uint8Array(0), requestInfo: info });
}

function requestInfo(
  ctx: HandlerContext,
  requests: Any[],
  connectGetInfo?: ConformancePayload_RequestInfo["connectGetInfo"],
): ConformancePayload_RequestInfo {
  const timeoutMs = ctx.timeoutMs();
  const requestHeaders: Header[] = [];
  ctx.requestHeader.forEach((value, name) => {
    requestHeaders.push({ $typeName: "connectrpc.conformance.v1.Header", name, value: [value] });
  });
  return create(ConformancePayload_RequestInfoSchema, {
    requestHeaders,
    requests,
    connectGetInfo,
    ...(timeoutMs === undefined ? {} : { timeoutMs: BigInt(timeoutMs) }),
  });
}

/** What a Connect GET carried in its query (IdempotentUnary), as the suite expects it echoed. */
function connectGetInfo(ctx: HandlerContext): ConformancePayload_RequestInfo["connectGetInfo"] {
  if (ctx.requestMethod !== "GET") return undefined;
  const queryParams: Header[] = [];
  const url = new URL(ctx.url);
  for (const name of new Set(url.searchParams.keys())) {
    queryParams.push({ $typeName: "connectrpc.conformance.v1.Header", name, value: url.searchParams.getAll(name) });
  }
  return { $typeName: "connectrpc.conformance.v1.ConformancePayload.ConnectGetInfo", queryParams };
}

function setHeaders(ctx: HandlerContext, definition: UnaryResponseDefinition | StreamResponseDefinition | undefined) {
  for (const { name, value } of definition?.responseHeaders ?? []) {
    for (const v of value) ctx.responseHeader.append(name, v);
  }
  for (const { name, value } of definition?.responseTrailers ?? []) {
    for (const v of value) ctx.responseTrailer.append(name, v);
  }
}

/** The error the definition asks for, its details as sent (raw `Any`s), then the request info when given. */
function connectError(error: ConformanceError, info: ConformancePayload_RequestInfo | undefined): ConnectError {
  const details = error.details.map((any) => ({ type: any.typeUrl.replace(/^.*\//, ""), value: any.value }));
  if (info) details.push({ type: ConformancePayload_RequestInfoSchema.typeName, value: packBytes(info) });
  // Raw details (a type name and bytes) go in after construction: the constructor types only described ones.
  const err = new ConnectError(error.message ?? "", error.code as number);
  err.details.push(...details);
  return err;
}

function pack<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>): Any {
  return anyPack(schema, message);
}

function packBytes(info: ConformancePayload_RequestInfo): Uint8Array {
  return anyPack(ConformancePayload_RequestInfoSchema, info).value;
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  if (ms <= 0) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
  });
}
