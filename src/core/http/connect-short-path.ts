/**
 * The unary short path in front of `fastifyConnectPlugin` (see
 * `connect-routes.ts`): a fastify `preHandler` that answers the calls internal
 * services make most itself, with the same status, headers, body and trailers
 * as the plugin, and lets the plugin serve everything else.
 *
 * Why it exists: for a one-message call the plugin turns the request into web
 * `Headers`, a `URL` and async iterables, negotiates the protocol, pipes the
 * body through several async generators and aborts a linked signal (a
 * `DOMException`) when the call ends; that costs two to three times what the
 * REST route for the same RPC costs (`npm run bench:http`). This reads the
 * body in one piece, runs the same interceptors and implementation, and writes
 * the answer in one piece.
 *
 * Why it is written against the protocols rather than with Connect's own
 * helpers: those live in `@connectrpc/connect/protocol*`, which Connect marks
 * "@private Internal code, does not follow semantic versioning" (an ESLint
 * rule keeps them out of `src/`). The part of the public specifications this
 * needs is small:
 * - Connect unary (https://connectrpc.com/docs/protocol/): the body is the
 *   message (`application/json`, protobuf JSON; `application/proto`, binary);
 *   an error is a JSON body `{code, message, details}` with the HTTP status of
 *   its code; trailers go in headers prefixed `trailer-`; `accept-encoding`
 *   chooses the response's `content-encoding`.
 * - gRPC over HTTP/2 (https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md):
 *   one length-prefixed frame each way; the status in the `grpc-status`,
 *   `grpc-message` (percent-encoded) and `grpc-status-details-bin` (a
 *   `google.rpc.Status`, base64) trailers; `grpc-accept-encoding` chooses the
 *   response's `grpc-encoding`, with the frame's compressed flag set.
 * - gRPC-Web (https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-WEB.md),
 *   binary: gRPC's frames and headers, over HTTP/1.1 as over HTTP/2, the
 *   status in a last frame of the body (flag 0x80) holding the trailers as
 *   HTTP/1 header lines, an error's too (as the plugin answers it: its
 *   headers carry no status, its body is the trailer frame alone).
 * Serialization is @bufbuild/protobuf's, with the options the plugin is given
 * (`jsonOptions`: unknown JSON fields ignored, as Connect does by default;
 * binary with its defaults). Interceptors are Connect's public `Interceptor`s,
 * given the `UnaryRequest` the plugin would give them; the context is a
 * `HandlerContext` made on first use (`call-context.ts`), as on the REST routes.
 *
 * Only the narrow case is taken: POST of a unary method, content type exactly
 * `application/json`, `application/proto`, `application/grpc`,
 * `application/grpc+proto`, `application/grpc-web` or `application/grpc-web+proto`, no request compression, no deadline header
 * (`connect-timeout-ms`, `grpc-timeout`), a body of at most 1 MiB (and within
 * the read limit) that is, for gRPC and gRPC-Web, exactly one uncompressed frame. Anything
 * else goes to the plugin, with the body bytes already read handed on.
 * `test/core/connect-differential.test.ts` sends each of its cases to both and
 * requires identical answers, and which path served each.
 */
import type http from "node:http";
import type http2 from "node:http2";
import {
  create,
  fromBinary,
  fromJsonString,
  toBinary,
  toJsonString,
  type DescMessage,
  type DescMethodUnary,
  type DescService,
  type JsonReadOptions,
  type JsonWriteOptions,
  type Message,
} from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createContextValues,
  type ContextValues,
  type HandlerContext,
  type Interceptor,
  type UnaryRequest,
  type UnaryResponse,
} from "@connectrpc/connect";
import type { compressionGzip } from "@connectrpc/connect-node";
import type { FastifyReply, FastifyRequest } from "fastify";
import { createCallContext } from "./call-context.ts";
import { endResponse, type NodeHeaders } from "./end-response.ts";
import { clientGoneSignal } from "./client-gone.ts";
import { connectErrorJson, connectHttpStatus, detailed, grpcStatusFields } from "./rpc-errors.ts";

/**
 * The names of the protocols' specifications that the short path reads and writes. Connect has the same
 * in its internal modules, which `src/` may not import; test/core/connect-tables.test.ts checks these (and
 * `PROTOCOL_HEADERS` below, and `rpc-errors.ts`' code and HTTP status tables) against Connect's own.
 */
export const WIRE = {
  connectJson: "application/json",
  connectProto: "application/proto",
  grpc: "application/grpc",
  grpcProto: "application/grpc+proto",
  grpcWeb: "application/grpc-web",
  grpcWebProto: "application/grpc-web+proto",
  connectTimeout: "connect-timeout-ms",
  connectEncoding: "content-encoding",
  connectAcceptEncoding: "accept-encoding",
  connectTrailerPrefix: "trailer-",
  grpcTimeout: "grpc-timeout",
  grpcEncoding: "grpc-encoding",
  grpcAcceptEncoding: "grpc-accept-encoding",
} as const;

/** Bodies up to this size take the short path; larger ones are streamed by the plugin. */
const SHORT_MAX_BYTES = 1 << 20;

const textDecoder = new TextDecoder();
const textEncoder = new TextEncoder();

/** A response compression, as `@connectrpc/connect-node` exports them (`compressionGzip`, `compressionBrotli`). */
type Compression = typeof compressionGzip;

export interface ShortPathOptions {
  /** The services whose unary RPCs may take the short path (the same the plugin serves). */
  services: readonly { service: DescService; impl: object }[];
  interceptors: readonly Interceptor[];
  /** The plugin's options of the same names: both paths must read, write and compress alike. */
  readMaxBytes: number;
  compressMinBytes: number;
  acceptCompression: readonly Compression[];
  jsonOptions: Partial<JsonReadOptions & JsonWriteOptions> & { textDecoder?: { decode(input: Uint8Array): string } };
  contextValues?: (req: FastifyRequest) => ContextValues;
  /** Called once for each call the short path answers. */
  onServed: () => void;
}

type NodeRequest = http.IncomingMessage | http2.Http2ServerRequest;

/** The short path of one unary RPC. */
interface ShortMethod {
  method: DescMethodUnary;
  impl: (req: Message, context: HandlerContext) => unknown;
}

/** Which protocol a call takes: Connect unary, gRPC or gRPC-Web (both of these binary only). */
type Protocol = "connect" | "grpc" | "grpc-web";

/** What one call needs beyond its method. */
interface Call {
  method: ShortMethod;
  binary: boolean;
  /** gRPC-Web: the status goes in a trailer frame at the end of the body, not in HTTP trailers. */
  web: boolean;
  req: FastifyRequest;
  reply: FastifyReply;
  options: ShortPathOptions;
}

/**
 * The `preHandler` of the short path: answers the narrow case (and returns the
 * reply, which fastify then leaves alone), or sets `req.body` to the body
 * bytes (those already read, then the rest) for the plugin and returns nothing.
 */
export function connectShortPath(
  options: ShortPathOptions,
): (req: FastifyRequest, reply: FastifyReply) => Promise<FastifyReply | undefined> {
  const methods = new Map<string, ShortMethod>();
  for (const { service, impl } of options.services) {
    for (const method of service.methods) {
      const fn = (impl as Record<string, unknown>)[method.localName];
      if (method.methodKind !== "unary" || typeof fn !== "function") continue;
      methods.set(`/${service.typeName}/${method.name}`, {
        method: method as DescMethodUnary,
        impl: (fn as ShortMethod["impl"]).bind(impl),
      });
    }
  }
  return async (req, reply) => {
    const method = req.method === "POST" ? methods.get(req.url) : undefined;
    const kind = method ? shortKind(req.headers) : undefined;
    if (!method || !kind) return undefined;
    const framed = kind.protocol !== "connect";
    const read = await readBody(req.raw, SHORT_MAX_BYTES, framed);
    if (read.complete && read.bytes.byteLength <= options.readMaxBytes) {
      const call = { method, binary: kind.binary, web: kind.protocol === "grpc-web", req, reply, options };
      // Decided before anything is written: a gRPC(-Web) body that is not one plain frame goes to the plugin.
      if (framed ? await serveGrpc(call, read.bytes) : await serveConnect(call, read.bytes)) {
        options.onServed();
        return reply;
      }
    }
    // The plugin takes `req.body` as the body when it is set: what was read, then the rest.
    req.body = bodyAgain(read, req.raw);
    return undefined;
  };
}

/** Whether a request may take the short path, and as which protocol and encoding. */
function shortKind(h: FastifyRequest["headers"]): { protocol: Protocol; binary: boolean } | undefined {
  const type = h["content-type"];
  let kind: { protocol: Protocol; binary: boolean };
  if (type === WIRE.connectJson) kind = { protocol: "connect", binary: false };
  else if (type === WIRE.connectProto) kind = { protocol: "connect", binary: true };
  else if (type === WIRE.grpc || type === WIRE.grpcProto) kind = { protocol: "grpc", binary: true };
  else if (type === WIRE.grpcWeb || type === WIRE.grpcWebProto) kind = { protocol: "grpc-web", binary: true };
  else return undefined;
  // gRPC-Web names its deadline and encodings as gRPC does.
  if (kind.protocol !== "connect") {
    const encoding = h[WIRE.grpcEncoding];
    if (h[WIRE.grpcTimeout] !== undefined || (encoding !== undefined && encoding !== "identity")) return undefined;
  } else if (
    h[WIRE.connectTimeout] !== undefined ||
    (h[WIRE.connectEncoding] !== undefined && h[WIRE.connectEncoding] !== "identity")
  ) {
    return undefined;
  }
  const length = h["content-length"];
  if (length !== undefined && Number(length) > SHORT_MAX_BYTES) return undefined;
  return kind;
}

/**
 * What `readBody` read: the whole body, or its first chunks, either because
 * it is larger than the short path takes (the rest is still to be read) or
 * because the client went away before its end (`gone`: there is no rest).
 */
type ReadResult = { complete: true; bytes: Buffer } | { complete: false; chunks: Buffer[]; gone: boolean };

/**
 * Reads the whole body if it is at most `max` bytes; otherwise stops (paused) after the chunk that went over.
 * For gRPC (`framed`), a first frame whose length prefix says it is larger stops it at once: the plugin then
 * refuses a body over the read limit while the client is still sending it, instead of once it ended (or never).
 */
function readBody(raw: NodeRequest, max: number, framed: boolean): Promise<ReadResult> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const declaredTooLarge = () => {
      if (!framed || size < 5) return false;
      const head = chunks[0].length >= 5 ? chunks[0] : Buffer.concat(chunks);
      return 5 + head.readUInt32BE(1) > max;
    };
    const cleanup = () => {
      raw.off("data", onData);
      raw.off("end", onEnd);
      raw.off("error", onEnd);
      raw.off("close", onEnd);
    };
    const onData = (chunk: Buffer) => {
      chunks.push(chunk);
      size += chunk.length;
      if (size > max || declaredTooLarge()) {
        raw.pause();
        cleanup();
        resolve({ complete: false, chunks, gone: false });
      }
    };
    // An error or a close before the end: the client went away mid-body. (An HTTP/2 stream reset also ends
    // the request's stream, so an end that comes with `aborted` is one too.)
    const onEnd = () => {
      cleanup();
      if (raw.readableEnded && !raw.aborted)
        resolve({ complete: true, bytes: chunks.length === 1 ? chunks[0] : Buffer.concat(chunks) });
      else resolve({ complete: false, chunks, gone: true });
    };
    // `on`, not `once` (which wraps each listener per call): the first of them removes all four.
    raw.on("data", onData);
    raw.on("end", onEnd);
    raw.on("error", onEnd);
    raw.on("close", onEnd);
  });
}

/**
 * The body for the plugin: what was read, then the rest of the stream. A body
 * whose client went away before its end fails as the plugin's own reading
 * fails then: handed on as if whole, the part that came would be run (the
 * first messages of a PutMessages, say) while the client, answered nothing,
 * sends the whole batch again.
 */
async function* bodyAgain(read: ReadResult, raw: NodeRequest): AsyncIterable<Uint8Array> {
  if (read.complete) {
    yield read.bytes;
    return;
  }
  const gone = () => new ConnectError("the client went away before the end of the body", Code.Canceled);
  if (read.gone) throw gone();
  yield* read.chunks;
  for await (const chunk of raw as AsyncIterable<Buffer>) yield chunk;
  // An HTTP/2 stream reset ends the request's stream as if the body were whole.
  if (raw.aborted) throw gone();
}

/** The handler context of a call, as the plugin builds it, and the end of its client-gone watch. */
function contextFor({ method, req, reply, options }: Call, protocolName: Protocol) {
  // A client that goes away ends the call (a waiting consume stops waiting), also one gone before this point.
  const gone = clientGoneSignal(reply.raw, () => new ConnectError("operation was aborted", Code.Aborted));
  const authority = String("authority" in req.raw ? req.raw.authority : (req.headers.host ?? ""));
  const context = createCallContext({
    service: method.method.parent,
    method: method.method,
    protocolName,
    requestMethod: "POST",
    url: `${"encrypted" in req.raw.socket && req.raw.socket.encrypted ? "https" : "http"}://${authority}${req.url}`,
    headers: req.headers,
    values: options.contextValues?.(req) ?? createContextValues(),
    // Not the shutdown signal: the context is never aborted at the end of a
    // call (that costs a DOMException each), so a listener on the server's
    // long-lived signal would stay behind. As on the REST routes, a waiting
    // call ends at shutdown through the facility's own signal.
    signal: gone,
  });
  return { context, end: () => gone.done() };
}

/** The request message from its bytes, failing as Connect's serialization fails (see `rpc-errors.ts`). */
function parseInput({ method, binary, options }: Call, bytes: Uint8Array): Message {
  if (binary) {
    try {
      return fromBinary(method.method.input, bytes);
    } catch (e) {
      throw new ConnectError(`parse binary: ${e instanceof Error ? e.message : String(e)}`, Code.Internal);
    }
  }
  // `{}`, what clients send for a request with no field set (every list's), is the empty message: made
  // at once, without decoding, parsing and walking the JSON (a few microseconds of a light call).
  if (bytes.length === 2 && bytes[0] === 0x7b && bytes[1] === 0x7d) return create(method.method.input);
  try {
    return fromJsonString(
      method.method.input,
      (options.jsonOptions.textDecoder ?? textDecoder).decode(bytes),
      options.jsonOptions,
    );
  } catch (e) {
    throw ConnectError.from(e, Code.InvalidArgument);
  }
}

/**
 * The response message's bytes; for Connect JSON (`text`), its text as it is: Node writes a string as
 * UTF-8 itself, so encoding it here first only made one more copy of every answer.
 */
function serializeOutput(call: Call, message: Message, text: true): Uint8Array | string;
function serializeOutput(call: Call, message: Message): Uint8Array;
function serializeOutput({ method, binary, options }: Call, message: Message, text = false): Uint8Array | string {
  if (binary) {
    try {
      return toBinary(method.method.output, message);
    } catch (e) {
      throw new ConnectError(`serialize binary: ${e instanceof Error ? e.message : String(e)}`, Code.Internal);
    }
  }
  try {
    const json = toJsonString(method.method.output, message, options.jsonOptions);
    return text ? json : textEncoder.encode(json);
  } catch (e) {
    throw ConnectError.from(e, Code.Internal);
  }
}

type Next = Parameters<Interceptor>[0];

/**
 * Own enumerable accessors, each reading one field of the object's `context`
 * when first asked: shared by every instance of a class (one hidden class for
 * all, whose accessors hold nothing of a call). Own, not the prototype's, so
 * that an interceptor that copies a request or response (`{ ...req, message }`)
 * copies them.
 */
function fromContext(fields: Record<string, keyof HandlerContext>): [string, PropertyDescriptor][] {
  return Object.entries(fields).map(([name, field]) => [
    name,
    {
      get(this: { context: HandlerContext }) {
        return this.context[field];
      },
      enumerable: true,
    },
  ]);
}

/** What a short call's request and response share: the call's context, its method and its message. */
class ShortMessage {
  readonly stream = false;
  readonly context: HandlerContext;
  readonly method: DescMethodUnary;
  readonly service: DescService;
  readonly message: Message;

  constructor(
    context: HandlerContext,
    method: DescMethodUnary,
    message: Message,
    lazy: [string, PropertyDescriptor][],
  ) {
    this.context = context;
    this.method = method;
    this.service = method.parent;
    this.message = message;
    // One `defineProperty` per field: half the cost of one `defineProperties` with a descriptor map.
    for (const [name, descriptor] of lazy) Object.defineProperty(this, name, descriptor);
  }
}

/**
 * The `UnaryRequest` the interceptors get. Its header and signal are the
 * context's, made only when someone reads them: most calls read neither
 * (the caller was authenticated at the head), and the `Headers` of the
 * request and the client-gone controller were a measurable part of a short
 * call's cost.
 */
class ShortRequest extends ShortMessage implements UnaryRequest {
  static readonly #lazy = fromContext({ header: "requestHeader", signal: "signal" });
  readonly requestMethod: string;
  readonly url: string;
  readonly contextValues: ContextValues;
  declare readonly header: Headers;
  declare readonly signal: AbortSignal;

  constructor(context: HandlerContext, method: DescMethodUnary, message: Message) {
    super(context, method, message, ShortRequest.#lazy);
    this.requestMethod = context.requestMethod;
    this.url = context.url;
    this.contextValues = context.values;
  }
}

/** The `UnaryResponse` of the implementation: its header and trailer are the context's, made only when read. */
class ShortResponse extends ShortMessage implements UnaryResponse {
  static readonly #lazy = fromContext({ header: "responseHeader", trailer: "responseTrailer" });
  declare readonly header: Headers;
  declare readonly trailer: Headers;

  constructor(context: HandlerContext, method: DescMethodUnary, message: Message) {
    super(context, method, message, ShortResponse.#lazy);
  }
}

/**
 * Runs the interceptors and the implementation, as Connect does for a unary
 * call: the first interceptor outermost; the implementation gets the context
 * with the request's header, signal and values as the interceptors left them;
 * its answer is made a full message; the headers and trailers the
 * interceptors answer with become the response's.
 */
async function invoke(m: ShortMethod, context: HandlerContext, input: Message, interceptors: readonly Interceptor[]) {
  const request = new ShortRequest(context, m.method, input);
  const implementation: Next = async (req) => {
    // The request as it was made (its header and signal still the context's, made or not): the context as is.
    // A copy an interceptor made: the context spelled out with the copy's fields.
    const output = await m.impl(
      req.message as Message,
      req === request
        ? context
        : {
            method: context.method,
            service: req.service,
            protocolName: context.protocolName,
            requestMethod: context.requestMethod,
            url: context.url,
            timeoutMs: context.timeoutMs,
            requestHeader: req.header,
            responseHeader: context.responseHeader,
            responseTrailer: context.responseTrailer,
            signal: req.signal,
            values: req.contextValues,
          },
    );
    return new ShortResponse(context, m.method, create(m.method.output, output as never));
  };
  const res = (await interceptors.reduceRight(
    (next, interceptor) => interceptor(next),
    implementation,
  )(request)) as UnaryResponse<DescMessage, DescMessage>;
  if (!(res instanceof ShortResponse && res.context === context)) {
    replaceFields(res.header, context.responseHeader);
    replaceFields(res.trailer, context.responseTrailer);
  }
  return res.message;
}

/** `to` becomes a copy of `from` (unless they are the same object). */
function replaceFields(from: Headers, to: Headers): void {
  if (from === to) return;
  const keys: string[] = [];
  to.forEach((_, key) => keys.push(key));
  for (const key of keys) to.delete(key);
  from.forEach((value, key) => to.set(key, value));
}

/** What was thrown, as a ConnectError (Connect answers anything else as `internal`). */
function thrown(e: unknown): ConnectError {
  return e instanceof ConnectError ? e : new ConnectError("internal error", Code.Internal, undefined, undefined, e);
}

/** The header names of the protocols, which an error's metadata never sets (as Connect's handlers skip them). */
export const PROTOCOL_HEADERS: ReadonlySet<string> = new Set([
  "content-type",
  "content-length",
  "content-encoding",
  "host",
  "user-agent",
  "trailer",
  "date",
  "accept-encoding",
  "trailer-",
  "connect-content-encoding",
  "connect-accept-encoding",
  "connect-timeout-ms",
  "connect-protocol-version",
  "grpc-encoding",
  "grpc-accept-encoding",
  "grpc-timeout",
  "grpc-status",
  "grpc-message",
  "grpc-status-details-bin",
]);

/** Adds an error's metadata (e.g. `retry-after`) to the answer's header or trailer fields, as Connect does. */
function addErrorMetadata(into: Headers, error: ConnectError): void {
  // Errors parsed from another server's answer only relay their payload.
  if (error.isWireError) return;
  error.metadata.forEach((value, key) => {
    if (!PROTOCOL_HEADERS.has(key.toLowerCase())) into.append(key, value);
  });
}

/**
 * The response compression the client accepts, the first of its list that the
 * server has (the request itself is never compressed here, so none when it
 * names none).
 */
function responseCompression(accept: readonly Compression[], accepted: string | null): Compression | undefined {
  if (!accepted) return undefined;
  for (const name of accepted.split(",")) {
    const found = accept.find((c) => c.name === name.trim());
    if (found) return found;
  }
  return undefined;
}

/**
 * A unary Connect call: the body is the message; an error is a JSON body with
 * the HTTP status of its code. Returns true (it always answers).
 */
async function serveConnect(call: Call, bytes: Buffer): Promise<boolean> {
  const { req, options } = call;
  const { context, end } = contextFor(call, "connect");
  const compression = responseCompression(
    options.acceptCompression,
    headerValue(req.headers[WIRE.connectAcceptEncoding]),
  );
  let status = 200;
  let contentType: string = call.binary ? WIRE.connectProto : WIRE.connectJson;
  let body: Uint8Array | string;
  try {
    const output = await invoke(call.method, context, parseInput(call, bytes), options.interceptors);
    body = serializeOutput(call, output, true);
  } catch (e) {
    const original = thrown(e);
    const error = detailed(original);
    status = connectHttpStatus(error.code);
    contentType = WIRE.connectJson;
    addErrorMetadata(context.responseHeader, original);
    body = connectErrorJson(error);
  } finally {
    end();
  }
  // The header fields as the plugin writes them: the content type (which the implementation may set), what the
  // call set, unary Connect's trailers as headers prefixed `trailer-`, the encoding and the length.
  const header: NodeHeaders = { "content-type": contentType };
  addFields(header, context.responseHeaders());
  if (status !== 200) header["content-type"] = contentType;
  addFields(header, context.responseTrailers(), WIRE.connectTrailerPrefix);
  const length = typeof body === "string" ? Buffer.byteLength(body) : body.byteLength;
  if (compression && length >= options.compressMinBytes) {
    body = await compression.compress(typeof body === "string" ? textEncoder.encode(body) : body);
    header[WIRE.connectEncoding] = compression.name;
  }
  header["content-length"] = String(typeof body === "string" ? length : body.byteLength);
  answer(call.reply, status, header, body);
  return true;
}

/**
 * A unary gRPC or gRPC-Web call: the body must be exactly one uncompressed
 * frame (otherwise false: the plugin takes it, with its own errors). The
 * answer is one frame and the status in the trailers (gRPC) or in a trailer
 * frame after it (gRPC-Web, `serveGrpcWeb`).
 */
async function serveGrpc(call: Call, bytes: Buffer): Promise<boolean> {
  if (bytes.length < 5 || bytes[0] !== 0 || bytes.readUInt32BE(1) !== bytes.length - 5) return false;
  const { req, options } = call;
  const { context, end } = contextFor(call, call.web ? "grpc-web" : "grpc");
  const compression = responseCompression(options.acceptCompression, headerValue(req.headers[WIRE.grpcAcceptEncoding]));
  let frame: Uint8Array | undefined;
  let status: Record<string, string> = { "grpc-status": "0" };
  try {
    const output = await invoke(call.method, context, parseInput(call, bytes.subarray(5)), options.interceptors);
    let data = serializeOutput(call, output);
    let flags = 0;
    if (compression && data.byteLength >= options.compressMinBytes) {
      data = await compression.compress(data);
      flags = 1; // the frame's compressed flag
    }
    frame = envelope(flags, data);
  } catch (e) {
    const original = thrown(e);
    addErrorMetadata(context.responseTrailer, original);
    status = grpcStatusFields(detailed(original));
  } finally {
    end();
  }
  if (call.web) return serveGrpcWeb(call, context, compression, frame, status);
  const header: NodeHeaders = { "content-type": WIRE.grpcProto };
  if (compression) header[WIRE.grpcEncoding] = compression.name;
  addFields(header, context.responseHeaders());
  // The status last: it wins over a trailer of the same name the call set.
  const trailer: NodeHeaders = {};
  addFields(trailer, context.responseTrailers());
  Object.assign(trailer, status);
  answer(call.reply, 200, header, frame, trailer);
  return true;
}

/** The gRPC-Web frame flag of a trailer frame (the protocol's, as Connect's `trailerFlag`). */
export const GRPC_WEB_TRAILER_FLAG = 0x80;

/**
 * The answer of a gRPC-Web call, as Connect's gRPC-Web handler writes it: the
 * header fields (no status in them, also for an error), then the message's
 * frame if there is one, then the trailer frame: the call's trailers and the
 * status as HTTP/1 header lines (`name: value\r\n`, in the order `Headers`
 * iterates, lower-case names sorted), compressed as a message frame is when
 * it is that large. Over HTTP/1.1 and HTTP/2 alike.
 */
async function serveGrpcWeb(
  call: Call,
  context: ReturnType<typeof contextFor>["context"],
  compression: Compression | undefined,
  frame: Uint8Array | undefined,
  status: Record<string, string>,
): Promise<boolean> {
  const header: NodeHeaders = { "content-type": WIRE.grpcWebProto };
  if (compression) header[WIRE.grpcEncoding] = compression.name;
  addFields(header, context.responseHeaders());
  // The status set last: it wins over a trailer of the same name the call set.
  const trailer = new Headers(context.responseTrailers());
  for (const name of Object.keys(status)) trailer.set(name, status[name]);
  let data = grpcWebTrailer(trailer);
  let flags = GRPC_WEB_TRAILER_FLAG;
  if (compression && data.byteLength >= call.options.compressMinBytes) {
    data = await compression.compress(data);
    flags |= 1;
  }
  const end = envelope(flags, data);
  answer(call.reply, 200, header, frame ? Buffer.concat([frame, end]) : end);
  return true;
}

/**
 * A gRPC-Web trailer frame's data: each field as an HTTP/1 header line, in the order `Headers` iterates
 * (test/core/connect-tables.test.ts compares it with Connect's own serialization).
 */
export function grpcWebTrailer(trailer: Headers): Uint8Array {
  let text = "";
  trailer.forEach((value, name) => (text += `${name}: ${value}\r\n`));
  return textEncoder.encode(text);
}

/** One frame of gRPC and gRPC-Web: the flags, the length (big-endian), the data. */
function envelope(flags: number, data: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(5 + data.byteLength);
  out[0] = flags;
  out.writeUInt32BE(data.byteLength, 1);
  out.set(data, 5);
  return out;
}

/** Node headers from web `Headers` (lower-case names, repeated values joined, as Connect's adapter writes them). */
export function nodeHeaders(headers: Headers): NodeHeaders {
  const out: NodeHeaders = {};
  addFields(out, headers);
  return out;
}

/**
 * Sets the fields of `headers` (when there are any) in `into`, each name prefixed with `prefix`. `set-cookie`
 * keeps its values apart only as itself: as `trailer-set-cookie` they are joined, as Connect joins them.
 */
function addFields(into: NodeHeaders, headers: Headers | undefined, prefix = ""): void {
  headers?.forEach(
    (v, k) => void (into[prefix + k] = k === "set-cookie" && prefix === "" ? headers.getSetCookie() : v),
  );
}

/**
 * Takes the reply from fastify and writes the answer in one piece. Returns once it is handed to Node: nothing
 * after it waits for the write (fastify leaves a hijacked reply alone, and its response hook runs on the
 * response's own `finish`), so no promise, `close` listener and callbacks are made per call to wait for it.
 */
function answer(
  reply: FastifyReply,
  status: number,
  headers: NodeHeaders,
  body: Uint8Array | string | undefined,
  trailers?: NodeHeaders,
): void {
  void reply.hijack();
  // Fastify keeps the headers set by hooks (`x-request-id`) on the reply until `send`, which is not used here:
  // they go first, and the answer's own fields win over one of the same name, as when the hooks' were set on
  // the response one by one before `writeHead` (one object handed to Node, not a `setHeader` call each).
  const all: NodeHeaders = reply.getHeaders() as NodeHeaders;
  for (const key in all) if (all[key] === undefined) delete all[key];
  Object.assign(all, headers);
  // Typed as HTTP/1.1's; over h2c it is the HTTP/2 compatibility response, which has the same methods.
  const res = reply.raw;
  // A gRPC error (no message): Trailers-Only, its status with the header fields in one HEADERS frame that ends
  // the stream, as grpc-go sends it (`end-response.ts`).
  if (trailers && !(body && body.length > 0)) {
    void endResponse(res, status, Object.assign(all, trailers));
    return;
  }
  res.writeHead(status, all);
  if (trailers) {
    if (body && body.length > 0) res.write(body);
    res.addTrailers(trailers);
    res.end();
  } else {
    res.end(body && body.length > 0 ? body : undefined);
  }
}

function headerValue(v: string | string[] | undefined): string | null {
  return v === undefined ? null : Array.isArray(v) ? v.join(", ") : v;
}
