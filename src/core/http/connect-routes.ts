/**
 * Serves the Connect, gRPC and gRPC-Web protocols on fastify, as
 * `@connectrpc/connect-fastify` does, with a shorter path for the calls
 * internal services make most: unary RPCs over Connect (`application/json`,
 * `application/proto`) and gRPC (`application/grpc`, `+proto`), uncompressed,
 * without a deadline header.
 *
 * Why: the general handler turns every request into web `Headers`, a `URL`
 * and async iterables, negotiates the protocol, pipes the body through
 * several async generators, and aborts a linked signal (a `DOMException`)
 * when the call ends. For a one-message call that costs two to three times
 * what the REST route for the same RPC costs (measured with
 * `npm run bench:http`). The short path reads the body in one piece, parses
 * it with the same serialization, runs the same interceptors and
 * implementation through `invokeUnaryImplementation`, and writes the answer
 * in one piece, with the same status, headers, trailers, error bodies and
 * response compression as the general handler.
 *
 * Anything else (streaming RPCs, gRPC-Web, Connect GET, compressed requests,
 * `connect-timeout-ms` / `grpc-timeout`, a body that is not one plain gRPC
 * frame, bodies over 1 MiB) goes to the general handler, with any body
 * bytes already read handed on.
 */
import type http from "node:http";
import type http2 from "node:http2";
import {
  Code,
  ConnectError,
  createContextValues,
  cors,
  createHandlerContext,
  type ConnectRouter,
  type ContextValues,
  type Interceptor,
} from "@connectrpc/connect";
import {
  compressionNegotiate,
  createMethodSerializationLookup,
  invokeUnaryImplementation,
  mergeNonProtocolHeaders,
  validateUniversalHandlerOptions,
  type Compression,
} from "@connectrpc/connect/protocol";
import * as protoConnect from "@connectrpc/connect/protocol-connect";
import * as protoGrpc from "@connectrpc/connect/protocol-grpc";
import {
  compressionBrotli,
  compressionGzip,
  universalRequestFromNodeRequest,
  universalResponseToNodeResponse,
} from "@connectrpc/connect-node";
import type { DescMethodUnary, DescService, JsonValue } from "@bufbuild/protobuf";
import { fastifyConnectPlugin } from "@connectrpc/connect-fastify";
import fastifyCors from "@fastify/cors";
import type { FastifyInstance, FastifyReply, FastifyRequest, RouteHandlerMethod } from "fastify";
import type { Metrics } from "../metrics.ts";
import { clientGoneSignal } from "./client-gone.ts";
import { plainHeaders } from "./rest-router.ts";
import {
  connectUnaryErrorWithDetail,
  detailed,
  endOfStreamWithDetail,
  grpcStatusWithDetail,
  unimplementedAnswer,
} from "./rpc-errors.ts";

/** Bodies up to this size take the short path; larger ones are streamed by the general handler. */
const FAST_MAX_BYTES = 1 << 20;

export interface ConnectRoutesOptions {
  routes: (router: ConnectRouter) => void;
  /** The services whose unary RPCs may take the short path (the same as `routes` registers). */
  services: readonly { service: DescService; impl: object }[];
  interceptors: Interceptor[];
  readMaxBytes: number;
  shutdownSignal: AbortSignal;
  /** The context values of one call; given the request, e.g. for its id (`requestIdKey`). */
  contextValues?: (req: FastifyRequest) => ContextValues;
  /**
   * Whether unary calls may take the short path in front of the plugin
   * (default true). False: `fastifyConnectPlugin` alone serves every call
   * (`CONNECT_SHORT_PATH=off`; the benchmark's and the differential tests'
   * comparison).
   */
  shortPath?: boolean;
  /** Counts which path served each call (`connect_calls_total{path}`), so tests and operators can tell. */
  metrics: Metrics;
  /**
   * Origins whose browsers may call Connect and gRPC-Web (`CORS_ORIGINS`; `*`
   * for any). Empty (the default): no CORS headers, so other origins cannot.
   */
  corsOrigins?: readonly string[];
}

type NodeRequest = http.IncomingMessage | http2.Http2ServerRequest;
type NodeResponse = http.ServerResponse | http2.Http2ServerResponse;

/** The short path of one unary RPC. */
interface FastMethod {
  method: DescMethodUnary;
  impl: (req: never, context: never) => unknown;
  serialization: ReturnType<typeof createMethodSerializationLookup>;
  url: string;
}

/** Registers every RPC of `options.routes` at `/<service>/<method>` on `fastify` (in its own scope: it replaces the body parsers). */
export async function registerConnectRoutes(fastify: FastifyInstance, options: ConnectRoutesOptions): Promise<void> {
  // An unknown service or method: `unimplemented` at once, by its protocol, without reading the body.
  fastify.addHook("onRequest", (req, reply, done) => {
    if (!req.is404) return done();
    const answer = unimplementedAnswer(headerValue(req.headers["content-type"]) ?? undefined, req.method, req.url);
    if (!answer) return done();
    void reply.hijack();
    const res = reply.raw;
    res.writeHead(answer.status, {
      ...nodeHeaders(new Headers(reply.getHeaders() as Record<string, string>)),
      ...answer.headers,
    });
    res.end(answer.body);
  });
  const served = options.metrics.counter(
    "connect_calls_total",
    "Connect, gRPC and gRPC-Web calls by the path that served them: short (unary short path) or plugin.",
    ["path"],
  );
  await fastify.register(async (instance) => {
    const origins = options.corsOrigins ?? [];
    if (origins.length > 0) {
      // The headers Connect documents for Connect and gRPC-Web from browsers, plus the bearer token.
      await instance.register(fastifyCors, {
        origin: origins.includes("*") ? true : [...origins],
        methods: [...cors.allowedMethods],
        allowedHeaders: [...cors.allowedHeaders, "Authorization"],
        exposedHeaders: [...cors.exposedHeaders],
        maxAge: 7200,
      });
    }
    const acceptCompression = [compressionGzip, compressionBrotli];
    const routerOptions = {
      interceptors: options.interceptors,
      readMaxBytes: options.readMaxBytes,
      shutdownSignal: options.shutdownSignal,
      acceptCompression,
    };
    if (options.shortPath !== false) {
      const opt = validateUniversalHandlerOptions(routerOptions);
      const fast = new Map<string, FastMethod>();
      for (const { service, impl } of options.services) {
        for (const method of service.methods) {
          const fn = (impl as Record<string, unknown>)[method.localName];
          if (method.methodKind !== "unary" || typeof fn !== "function") continue;
          fast.set(`/${service.typeName}/${method.name}`, {
            method: method as DescMethodUnary,
            impl: (fn as (req: never, context: never) => unknown).bind(impl),
            serialization: createMethodSerializationLookup(method, opt.binaryOptions, opt.jsonOptions, opt),
            url: `/${service.typeName}/${method.name}`,
          });
        }
      }
      // In front of the plugin, in its scope: takes the reply only in the narrow case, else lets the plugin serve.
      instance.addHook("preHandler", async (req: FastifyRequest, reply: FastifyReply) => {
        const shortPath = req.method === "POST" ? fast.get(req.url) : undefined;
        const kind = shortPath ? fastKind(req.headers) : undefined;
        if (!shortPath || !kind) return;
        const read = await readBody(req.raw, FAST_MAX_BYTES);
        if (read.complete) {
          const serve = kind.grpc ? serveGrpc : serveConnect;
          // Decided before anything is written: a gRPC body that is not one plain frame goes to the plugin.
          const done = await serve(
            shortPath,
            kind.binary,
            read.bytes,
            req,
            reply,
            options,
            acceptCompression,
            opt.compressMinBytes,
          );
          if (done) {
            served.inc({ path: "short" });
            return reply;
          }
        }
        // The plugin takes `req.body` as the body when it is set: what was read, then the rest.
        req.body = bodyAgain(read, req.raw);
      });
    }
    const contextValues = (req: FastifyRequest) => options.contextValues?.(req) ?? createContextValues();
    // The plugin's route for each RPC runs the same handler, but a failure goes to the request's log, never to the
    // plugin's `console.error` (see `logFailures`).
    const byPath = new Map<string, Handler>();
    instance.addHook("onRoute", (route) => {
      const handler = byPath.get(route.url ?? "");
      if (handler) route.handler = logFailures(handler, contextValues);
    });
    await instance.register(fastifyConnectPlugin, {
      ...routerOptions,
      routes(router) {
        options.routes(router);
        const handlers = router.handlers;
        handlers.forEach((h, i) => {
          handlers[i] = withErrorDetails(h, () => served.inc({ path: "plugin" }));
          byPath.set(h.requestPath, handlers[i]);
        });
      },
      contextValues,
    });
  });
}

/** Fastify keeps the headers set by hooks (`x-request-id`) on the reply until `send`, which these routes do not use. */
function copyReplyHeaders(reply: FastifyReply): void {
  for (const [key, value] of Object.entries(reply.getHeaders())) {
    if (value !== undefined) reply.raw.setHeader(key, value);
  }
}

/** Whether a request may take the short path, and as which protocol and encoding. */
function fastKind(h: FastifyRequest["headers"]): { grpc: boolean; binary: boolean } | undefined {
  const type = h["content-type"];
  let kind: { grpc: boolean; binary: boolean };
  if (type === "application/json") kind = { grpc: false, binary: false };
  else if (type === "application/proto") kind = { grpc: false, binary: true };
  else if (type === "application/grpc" || type === "application/grpc+proto") kind = { grpc: true, binary: true };
  else return undefined;
  if (kind.grpc) {
    if (h["grpc-timeout"] !== undefined || (h["grpc-encoding"] !== undefined && h["grpc-encoding"] !== "identity"))
      return undefined;
  } else if (
    h["connect-timeout-ms"] !== undefined ||
    (h["content-encoding"] !== undefined && h["content-encoding"] !== "identity")
  ) {
    return undefined;
  }
  const length = h["content-length"];
  if (length !== undefined && Number(length) > FAST_MAX_BYTES) return undefined;
  return kind;
}

type ReadResult = { complete: true; bytes: Buffer } | { complete: false; chunks: Buffer[] };

/** Reads the whole body if it is at most `max` bytes; otherwise stops (paused) after the chunk that went over. */
function readBody(raw: NodeRequest, max: number): Promise<ReadResult> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const cleanup = () => {
      raw.off("data", onData);
      raw.off("end", onEnd);
      raw.off("error", onEnd);
      raw.off("close", onEnd);
    };
    const onData = (chunk: Buffer) => {
      chunks.push(chunk);
      size += chunk.length;
      if (size > max) {
        raw.pause();
        cleanup();
        resolve({ complete: false, chunks });
      }
    };
    // An error or a close before the end: the general handler meets it again on the stream and answers as it does.
    const onEnd = () => {
      cleanup();
      if (raw.readableEnded)
        resolve({ complete: true, bytes: chunks.length === 1 ? chunks[0] : Buffer.concat(chunks) });
      else resolve({ complete: false, chunks });
    };
    raw.on("data", onData);
    raw.once("end", onEnd);
    raw.once("error", onEnd);
    raw.once("close", onEnd);
  });
}

/** The body for the general handler: what was read, then the rest of the stream. */
async function* bodyAgain(read: ReadResult, raw: NodeRequest): AsyncIterable<Uint8Array> {
  if (read.complete) {
    yield read.bytes;
    return;
  }
  yield* read.chunks;
  if (raw.readableEnded || raw.destroyed) return;
  for await (const chunk of raw as AsyncIterable<Buffer>) yield chunk;
}

/** The handler context and the request's abort signal, as the general handler builds them. */
function contextFor(
  m: FastMethod,
  protocolName: string,
  req: FastifyRequest,
  reply: FastifyReply,
  options: ConnectRoutesOptions,
  responseHeader: Record<string, string>,
  responseTrailer?: Record<string, string>,
) {
  // A client that goes away ends the call (a waiting consume stops waiting), also one gone before this point.
  const call = clientGoneSignal(reply.raw, () => new ConnectError("operation was aborted", Code.Aborted));
  const authority = String("authority" in req.raw ? req.raw.authority : (req.headers.host ?? ""));
  const context = createHandlerContext({
    service: m.method.parent,
    method: m.method,
    protocolName,
    requestMethod: "POST",
    url: `${"encrypted" in req.raw.socket && req.raw.socket.encrypted ? "https" : "http"}://${authority}${req.url}`,
    requestHeader: plainHeaders(req.headers),
    responseHeader,
    ...(responseTrailer ? { responseTrailer } : {}),
    contextValues: options.contextValues?.(req) ?? createContextValues(),
    // Not the shutdown signal: the context is never aborted at the end of a
    // call (that costs a DOMException each), so a listener on the server's
    // long-lived signal would stay behind. As on the REST routes, a waiting
    // call ends at shutdown through the facility's own signal.
    requestSignal: call.signal,
  });
  return { context, end: () => call.done() };
}

function toConnectErrorOf(e: unknown): ConnectError {
  return detailed(e);
}

type Handler = ConnectRouter["handlers"][number];

/**
 * The handler, with every error it answers carrying an ErrorDetail: errors
 * made by Connect itself (a body that does not parse, one over the read
 * limit) get the one the application's errors have (see `rpc-errors.ts`).
 */
function withErrorDetails(handler: Handler, onCall: () => void): Handler {
  const wrapped = async (req: Parameters<Handler>[0]) => {
    onCall();
    const res = await handler(req);
    const header = res.header instanceof Headers ? res.header : new Headers(res.header);
    res.header = header;
    const type = header.get("content-type") ?? "";
    const body = res.body;
    const iterable = typeof body === "object" && body !== null && Symbol.asyncIterator in body;
    if (type.startsWith("application/grpc-web")) {
      grpcStatusWithDetail(header);
      if (iterable) res.body = endOfStreamWithDetail(body, "grpc-web");
    } else if (type.startsWith("application/grpc")) {
      grpcStatusWithDetail(header);
      const trailer = res.trailer instanceof Headers ? res.trailer : new Headers(res.trailer);
      res.trailer = trailer;
      // The status is in the trailers once the body has ended.
      if (iterable)
        res.body = (async function* () {
          yield* body;
          grpcStatusWithDetail(trailer);
        })();
      else grpcStatusWithDetail(trailer);
    } else if (type.startsWith("application/connect+")) {
      if (iterable) res.body = endOfStreamWithDetail(body, "connect");
    } else if (res.status !== 200 && iterable) {
      // A Connect unary error: a small JSON body.
      const chunks: Uint8Array[] = [];
      for await (const chunk of body) chunks.push(chunk);
      const bytes = Buffer.concat(chunks);
      const fixed = connectUnaryErrorWithDetail(bytes);
      res.body = (async function* () {
        yield fixed ? fixed.body : bytes;
      })();
      if (fixed) {
        res.status = fixed.status;
        if (header.has("content-length")) header.set("content-length", String(fixed.body.byteLength));
      }
    }
    return res;
  };
  return Object.assign(wrapped, handler);
}

/**
 * The plugin's route handler, with its failures logged through pino: it hands
 * the call to Connect and writes the answer as the plugin does (the same
 * public functions of connect-node), but where the plugin writes
 * `console.error` when that fails, this logs. A failure to write the answer
 * because the client went away (a cancelled stream, a connection cut by a
 * balancer: `write ECANCELED`, a reset stream) is the normal end of that call,
 * logged at debug; any other is the server's and logged as an error.
 */
function logFailures(handler: Handler, contextValues: (req: FastifyRequest) => ContextValues): RouteHandlerMethod {
  return async (req, reply) => {
    try {
      const res = await handler(
        universalRequestFromNodeRequest(req.raw, reply.raw, req.body as JsonValue | undefined, contextValues(req)),
      );
      // Headers set by hooks (`x-request-id`) are on the reply until `send`, which is not used here.
      for (const [key, value] of Object.entries(reply.getHeaders())) {
        if (value !== undefined) reply.raw.setHeader(key, value);
      }
      await universalResponseToNodeResponse(res, reply.raw);
    } catch (err) {
      const rpc = `${handler.service.typeName}/${handler.method.name}`;
      const code = ConnectError.from(err).code;
      if (code === Code.Aborted || code === Code.Canceled || reply.raw.destroyed || req.raw.destroyed) {
        req.log.debug({ rpc, err: (err as Error).message }, "call ended: the client went away");
        return;
      }
      req.log.error({ rpc, err }, "rpc handler failed");
    }
  };
}

/** Node headers from web `Headers` (lower-case names, repeated values joined, as Connect's adapter writes them). */
function nodeHeaders(headers: Headers): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  headers.forEach((v, k) => void (out[k] = k === "set-cookie" ? headers.getSetCookie() : v));
  return out;
}

function end(
  nodeResponse: NodeResponse,
  status: number,
  headers: Headers,
  body: Uint8Array | undefined,
  trailers?: Headers,
): Promise<void> {
  // One shape for both: the HTTP/2 compatibility response has the same methods.
  const res = nodeResponse as http.ServerResponse;
  return new Promise((resolve) => {
    res.once("close", () => resolve());
    res.writeHead(status, nodeHeaders(headers));
    if (body && body.length > 0) res.write(body);
    if (trailers) res.addTrailers(nodeHeaders(trailers));
    res.end(() => resolve());
  });
}

/**
 * A unary Connect call: the body is the message. Answers as the general
 * handler's `createUnaryHandler` does; returns true (it always answers).
 */
async function serveConnect(
  m: FastMethod,
  binary: boolean,
  bytes: Buffer,
  req: FastifyRequest,
  reply: FastifyReply,
  options: ConnectRoutesOptions,
  accept: Compression[],
  compressMinBytes: number,
): Promise<boolean> {
  const { context, end: ended } = contextFor(m, "connect", req, reply, options, {
    [protoConnect.headerContentType]: binary ? protoConnect.contentTypeUnaryProto : protoConnect.contentTypeUnaryJson,
  });
  const compression = compressionNegotiate(
    accept,
    null,
    req.headers["accept-encoding"] ?? null,
    protoConnect.headerUnaryAcceptEncoding,
  );
  let status = 200;
  let body: Uint8Array;
  try {
    const input = m.serialization.getI(binary).parse(bytes);
    const output = await invokeUnaryImplementation(
      { kind: "unary", method: m.method, impl: m.impl } as never,
      context,
      input,
      options.interceptors,
    );
    body = m.serialization.getO(binary).serialize(output);
  } catch (e) {
    const error = toConnectErrorOf(e);
    status = protoConnect.codeToHttpStatus(error.code);
    context.responseHeader.set(protoConnect.headerContentType, protoConnect.contentTypeUnaryJson);
    if (!error.isWireError) mergeNonProtocolHeaders(context.responseHeader, error.metadata);
    body = protoConnect.errorToJsonBytes(error, {});
  } finally {
    ended();
  }
  if (compression.response && body.byteLength >= compressMinBytes) {
    body = await compression.response.compress(body);
    context.responseHeader.set(protoConnect.headerUnaryEncoding, compression.response.name);
  }
  const header = protoConnect.trailerMux(context.responseHeader, context.responseTrailer);
  header.set(protoConnect.headerUnaryContentLength, body.byteLength.toString(10));
  void reply.hijack();
  copyReplyHeaders(reply);
  await end(reply.raw, status, header, body);
  return true;
}

/**
 * A unary gRPC call: the body must be exactly one uncompressed frame
 * (otherwise false: the general handler takes it, with its own errors).
 * Answers as the general handler's gRPC handler does.
 */
async function serveGrpc(
  m: FastMethod,
  binary: boolean,
  bytes: Buffer,
  req: FastifyRequest,
  reply: FastifyReply,
  options: ConnectRoutesOptions,
  accept: Compression[],
  compressMinBytes: number,
): Promise<boolean> {
  if (bytes.length < 5 || bytes[0] !== 0 || bytes.readUInt32BE(1) !== bytes.length - 5) return false;
  const { context, end: ended } = contextFor(
    m,
    "grpc",
    req,
    reply,
    options,
    { [protoGrpc.headerContentType]: binary ? protoGrpc.contentTypeProto : protoGrpc.contentTypeJson },
    { [protoGrpc.headerGrpcStatus]: protoGrpc.grpcStatusOk },
  );
  const compression = compressionNegotiate(
    accept,
    null,
    headerValue(req.headers["grpc-accept-encoding"]),
    protoGrpc.headerAcceptEncoding,
  );
  if (compression.response) context.responseHeader.set(protoGrpc.headerEncoding, compression.response.name);
  let frame: Uint8Array | undefined;
  try {
    const input = m.serialization.getI(binary).parse(bytes.subarray(5));
    const output = await invokeUnaryImplementation(
      { kind: "unary", method: m.method, impl: m.impl } as never,
      context,
      input,
      options.interceptors,
    );
    let data = m.serialization.getO(binary).serialize(output);
    let flags = 0;
    if (compression.response && data.byteLength >= compressMinBytes) {
      data = await compression.response.compress(data);
      flags = 1;
    }
    const out = Buffer.allocUnsafe(5 + data.byteLength);
    out[0] = flags;
    out.writeUInt32BE(data.byteLength, 1);
    out.set(data, 5);
    frame = out;
  } catch (e) {
    protoGrpc.setTrailerStatus(context.responseTrailer, toConnectErrorOf(e));
  } finally {
    ended();
  }
  void reply.hijack();
  copyReplyHeaders(reply);
  await end(reply.raw, 200, context.responseHeader, frame, context.responseTrailer);
  return true;
}

function headerValue(v: string | string[] | undefined): string | null {
  return v === undefined ? null : Array.isArray(v) ? v.join(", ") : v;
}
