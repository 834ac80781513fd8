/**
 * Serves the Connect, gRPC and gRPC-Web protocols on fastify with
 * `@connectrpc/connect-fastify`'s `fastifyConnectPlugin`, in a scope of its
 * own (the plugin replaces the body parsers there), with:
 * - the unary short path in front of it (`connect-short-path.ts`), which
 *   answers the commonest calls itself exactly as the plugin would
 *   (`CONNECT_SHORT_PATH=off` turns it off);
 * - an ErrorDetail on every error the protocol layer makes (`rpc-errors.ts`);
 * - `unimplemented` at once, by its protocol, for an unknown service or method;
 * - CORS for browsers on the origins of `CORS_ORIGINS`;
 * - the plugin's failures logged through pino rather than `console.error`.
 * `connect_calls_total{path}` counts which path served each call.
 */
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest, RouteHandlerMethod } from "fastify";
import {
  Code,
  ConnectError,
  createContextValues,
  cors,
  type ConnectRouter,
  type ContextValues,
  type Interceptor,
} from "@connectrpc/connect";
import {
  compressionBrotli,
  compressionGzip,
  universalRequestFromNodeRequest,
  universalResponseToNodeResponse,
} from "@connectrpc/connect-node";
import type { DescMethod, DescService, JsonValue, Registry } from "@bufbuild/protobuf";
import { fastifyConnectPlugin } from "@connectrpc/connect-fastify";
import fastifyCors from "@fastify/cors";
import { deliveryKey } from "../delivery.ts";
import { toPlatformError } from "../errors.ts";
import { sendHeadersKey } from "../stream-headers.ts";
import type { Metrics } from "../metrics.ts";
import { NOT_UTF8_JSON, refused, utf8 } from "./body-parsers.ts";
import { responseClosed } from "./client-gone.ts";
import { watchDelivery } from "./delivery-watch.ts";
import { endResponse, resetIfBodyOpen, type NodeHeaders } from "./end-response.ts";
import { connectShortPath, nodeHeaders } from "./connect-short-path.ts";
import {
  connectUnaryErrorWithDetail,
  endOfStreamWithDetail,
  grpcStatusWithDetail,
  rpcErrorAnswer,
  unimplementedAnswer,
} from "./rpc-errors.ts";

/**
 * Options both paths are given, so that they parse, serialize and compress
 * alike: unknown JSON fields are ignored (Connect's default, stated here so
 * the short path cannot drift from it), JSON is strict UTF-8, responses of at least 1 KiB are
 * compressed when the client accepts gzip or br.
 */
const JSON_OPTIONS = {
  ignoreUnknownFields: true,
  // JSON bodies are decoded strictly, as REST's are: bytes that are not UTF-8 are refused, never read as U+FFFD.
  textDecoder: {
    decode(bytes: Uint8Array): string {
      const text = utf8(bytes);
      if (text === undefined) throw refused(NOT_UTF8_JSON);
      // A leading byte-order mark is dropped, as Connect's own decoder drops it (REST keeps it, and refuses it).
      return text.startsWith("\ufeff") ? text.slice(1) : text;
    },
  },
};
const COMPRESS_MIN_BYTES = 1024;
const ACCEPT_COMPRESSION = [compressionGzip, compressionBrotli];
/** The content types an RPC accepts (Connect unary and streaming, gRPC, gRPC-Web; proto and JSON), for a 415's `Accept-Post`. */
const RPC_CONTENT_TYPES = [
  "application/proto",
  "application/json",
  "application/connect+proto",
  "application/connect+json",
  "application/grpc",
  "application/grpc+proto",
  "application/grpc+json",
  "application/grpc-web",
  "application/grpc-web+proto",
  "application/grpc-web+json",
].join(", ");

export interface ConnectRoutesOptions<Authenticated = unknown> {
  routes: (router: ConnectRouter) => void;
  /** The services whose unary RPCs may take the short path (the same as `routes` registers). */
  services: readonly { service: DescService; impl: object }[];
  interceptors: Interceptor[];
  readMaxBytes: number;
  /**
   * Authenticates a call when its head arrives, before its body is read (may throw `PlatformError`). What it
   * resolves to is given to `contextValues`, so the interceptors need not authenticate the call again. Without
   * it, a body of 32 MiB, or a gzip body that inflates 1000-fold, was read and decoded for any client first.
   */
  authenticate?: (
    authorization: string | undefined,
    method: DescMethod,
    browser: { cookie: string | undefined; origin: string | undefined },
  ) => Promise<Authenticated>;
  /**
   * What `authenticate` would resolve to, when that is known at once (a remembered token); undefined to
   * ask `authenticate`. Saves a light call the async hook's promises.
   */
  authenticateNow?: (authorization: string | undefined, method: DescMethod) => Authenticated | undefined;
  /**
   * The context values of one call; given the request, e.g. for its id (`requestIdKey`), and what
   * `authenticate` resolved to for it (undefined when it did not, e.g. in an outage: the interceptors decide).
   */
  contextValues?: (req: FastifyRequest, authenticated: Authenticated | undefined) => ContextValues;
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
   * Told of each call refused at its head (bad token, before any interceptor runs), with the HTTP status of
   * its error: the interceptors count every other call for the operator's overview.
   */
  onRefusedAtHead?: (method: DescMethod, status: number) => void;
  /**
   * Origins whose browsers may call Connect and gRPC-Web (`CORS_ORIGINS`; `*`
   * for any). Empty (the default): no CORS headers, so other origins cannot.
   */
  corsOrigins?: readonly string[];
  /**
   * The message types `google.protobuf.Any` fields may hold in JSON, for both paths. The API's messages
   * have no `Any`; the conformance suite's test-only service has (its requests echoed back).
   */
  jsonRegistry?: Registry;
}

/** Registers every RPC of `options.routes` at `/<service>/<method>` on `fastify` (in its own scope: it replaces the body parsers). */
export async function registerConnectRoutes<Authenticated>(
  fastify: FastifyInstance,
  options: ConnectRoutesOptions<Authenticated>,
): Promise<void> {
  // An unknown service or method: `unimplemented` at once, by its protocol, without reading the body.
  fastify.addHook("onRequest", (req, reply, done) => {
    if (!req.is404) return done();
    const answer = unimplementedAnswer(headerValue(req.headers["content-type"]) ?? undefined, req.method, req.url);
    if (!answer) return done();
    answerAtHead(reply, answer);
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
    // A request to an RPC whose content type no protocol here speaks (`image/jpeg`, `application/foo`):
    // 415, as the Connect and gRPC-over-HTTP/2 specifications ask (clients read it as `unknown`), with the
    // types that are accepted. The root's handler would answer the REST envelope's 400 "must be JSON".
    instance.setErrorHandler((err: FastifyError, req, reply) => {
      if (err.code !== "FST_ERR_CTP_INVALID_MEDIA_TYPE") throw err;
      if (req.raw.httpVersionMajor === 2) void reply.removeHeader("connection");
      return reply.code(415).header("accept-post", RPC_CONTENT_TYPES).send();
    });
    const routerOptions = {
      interceptors: options.interceptors,
      readMaxBytes: options.readMaxBytes,
      // No `shutdownSignal`: Connect would abort every call's signal at shutdown, cutting short calls in flight
      // (a model's answer, a claim) that the drain lets finish. What waits (a consume, a stream, the event feed)
      // ends on the server's own shutdown signal, as over REST and the short path.
      acceptCompression: ACCEPT_COMPRESSION,
      compressMinBytes: COMPRESS_MIN_BYTES,
      jsonOptions: options.jsonRegistry ? { ...JSON_OPTIONS, registry: options.jsonRegistry } : JSON_OPTIONS,
    };
    // Every call's values carry the watch on its answer's delivery (see `../delivery.ts`).
    const contextValues = (req: FastifyRequest) =>
      (
        options.contextValues?.(req, (req as AuthenticatedRequest<Authenticated>)[AUTHENTICATED]) ??
        createContextValues()
      ).set(deliveryKey, watchDelivery((req as ResponseOf)[RESPONSE]));
    if (options.shortPath !== false) {
      // In front of the plugin, in its scope: takes the reply only in the narrow case, else lets the plugin serve.
      instance.addHook(
        "preHandler",
        connectShortPath({
          ...routerOptions,
          services: options.services,
          contextValues,
          onServed: () => served.inc({ path: "short" }),
        }),
      );
    }
    const authenticate = options.authenticate;
    instance.decorateRequest(AUTHENTICATED, undefined);
    // The response of the call, for its delivery watch: the context values are made from the request alone.
    instance.decorateRequest(RESPONSE, undefined);
    instance.addHook("onRequest", (req, reply, done) => {
      (req as ResponseOf)[RESPONSE] = reply.raw;
      done();
    });
    if (authenticate) {
      const authenticateNow = options.authenticateNow;
      const checkHead = async (req: FastifyRequest, reply: FastifyReply, handler: Handler) => {
        try {
          (req as AuthenticatedRequest<Authenticated>)[AUTHENTICATED] = await authenticate(
            headerValue(req.headers.authorization) ?? undefined,
            handler.method,
            {
              cookie: headerValue(req.headers.cookie) ?? undefined,
              origin: headerValue(req.headers.origin) ?? undefined,
            },
          );
        } catch (err) {
          const refused = toPlatformError(err);
          // An outage or a fault is the interceptor's to answer and report, as for any call.
          if (refused.code === "unavailable" || refused.code === "internal") return;
          const answer = rpcErrorAnswer(headerValue(req.headers["content-type"]) ?? undefined, req.method, refused);
          // Not an RPC's content type: the plugin refuses it as it does.
          if (!answer) return;
          options.onRefusedAtHead?.(handler.method, refused.status);
          answerAtHead(reply, answer);
        }
      };
      // A callback hook: a call whose caller is known at once goes on without a promise.
      instance.addHook("onRequest", (req, reply, done) => {
        const handler = byPath.get(req.routeOptions.url ?? "");
        if (!handler) return done();
        const known = authenticateNow?.(headerValue(req.headers.authorization) ?? undefined, handler.method);
        if (known !== undefined) {
          (req as AuthenticatedRequest<Authenticated>)[AUTHENTICATED] = known;
          return done();
        }
        // As an async hook: fastify goes on, or stops at a reply answered at the head (`answerAtHead`).
        checkHead(req, reply, handler).then(() => done(), done);
      });
    }
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

/** The request's decoration holding its response (for `watchDelivery`). */
const RESPONSE = "connectResponse";
type ResponseOf = FastifyRequest & { [RESPONSE]: FastifyReply["raw"] };

/** The request's decoration holding what `authenticate` resolved to at the call's head. */
const AUTHENTICATED = "connectAuthenticated";
type AuthenticatedRequest<A> = FastifyRequest & { [AUTHENTICATED]: A | undefined };

/**
 * Writes `answer` in place of the route, its body unread, with the headers hooks set (`x-request-id`), in one
 * piece: without a body, a gRPC answer is Trailers-Only (see `end-response.ts`).
 */
function answerAtHead(
  reply: FastifyReply,
  answer: { status: number; headers: Record<string, string>; body?: Uint8Array },
) {
  void reply.hijack();
  void endResponse(reply.raw, answer.status, { ...hookHeaders(reply), ...answer.headers }, answer.body);
}

/** The header fields hooks set on the reply (`x-request-id`): fastify keeps them until `send`, not used here. */
function hookHeaders(reply: FastifyReply): NodeHeaders {
  return nodeHeaders(new Headers(reply.getHeaders() as Record<string, string>));
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
        if (fixed.acceptEncoding !== undefined) header.set("accept-encoding", fixed.acceptEncoding);
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
  const streaming = handler.method.methodKind !== "unary";
  return async (req, reply) => {
    try {
      const values = contextValues(req);
      if (streaming) values.set(sendHeadersKey, (header) => sendHeadersNow(reply, header));
      const res = await handler(
        universalRequestFromNodeRequest(req.raw, reply.raw, req.body as JsonValue | undefined, values),
      );
      if (await answeredTrailersOnly(res, reply)) return;
      // Headers set by hooks (`x-request-id`) are on the reply until `send`, which is not used here. (A stream
      // that sent its headers early sent these with them.)
      if (!reply.raw.headersSent) {
        for (const [key, value] of Object.entries(reply.getHeaders())) {
          if (value !== undefined) reply.raw.setHeader(key, value);
        }
      }
      await universalResponseToNodeResponse(res, reply.raw);
      resetIfBodyOpen(reply.raw);
    } catch (err) {
      const rpc = `${handler.service.typeName}/${handler.method.name}`;
      const code = ConnectError.from(err).code;
      if (code === Code.Aborted || code === Code.Canceled || responseClosed(reply.raw) || req.raw.destroyed) {
        req.log.debug({ rpc, err: (err as Error).message }, "call ended: the client went away");
        return;
      }
      req.log.error({ rpc, err }, "rpc handler failed");
    }
  };
}

type UniversalResponse = Awaited<ReturnType<Handler>>;

/**
 * A gRPC error without a message (an error before any) written as Trailers-Only: its header
 * and trailer fields in one HEADERS frame with END_STREAM, as grpc-go and the gRPC spec send it, rather than
 * connect-node's HEADERS then trailers. True if it was; otherwise the body is left as it was, to be written.
 * (gRPC-Web's status is in its body, and Connect's in its body or its HTTP status: theirs are already one piece.)
 */
async function answeredTrailersOnly(res: UniversalResponse, reply: FastifyReply): Promise<boolean> {
  const header = res.header instanceof Headers ? res.header : new Headers(res.header);
  const type = header.get("content-type") ?? "";
  if (!type.startsWith("application/grpc") || type.startsWith("application/grpc-web") || reply.raw.headersSent)
    return false;
  const body = res.body;
  if (body === undefined || !(Symbol.asyncIterator in body)) return false;
  const it = body[Symbol.asyncIterator]();
  // Connect resolved the call once its first chunk was there: this does not wait.
  const first = await it.next();
  if (first.done !== true) {
    // The same iterator, its first chunk given again. Its `throw` and `return` are kept: through them
    // connect-node tells the call that writing failed or the client went away (the call's signal aborts).
    let again: IteratorResult<Uint8Array> | undefined = first;
    const rest: AsyncIterator<Uint8Array> = {
      next: () => {
        const chunk = again;
        again = undefined;
        return chunk ? Promise.resolve(chunk) : it.next();
      },
      throw: (e: unknown) => (it.throw ? it.throw(e) : Promise.reject(e instanceof Error ? e : new Error(String(e)))),
      return: (value?: unknown) => (it.return ? it.return(value) : Promise.resolve({ done: true, value })),
    };
    res.body = { [Symbol.asyncIterator]: () => rest };
    return false;
  }
  const trailer = res.trailer instanceof Headers ? res.trailer : new Headers(res.trailer);
  if (trailer.get("grpc-status") === "0") {
    // A stream that succeeded with no message keeps its headers apart from its trailers: a client reads the
    // response headers its handler set (the Connect conformance suite's grpc-go client found them missing).
    res.body = (async function* () {})();
    return false;
  }
  const fields = { ...hookHeaders(reply), ...nodeHeaders(header), ...nodeHeaders(trailer) };
  await endResponse(reply.raw, res.status, fields);
  return true;
}

/**
 * Sends a stream's response headers now, before its first message: a stream that waits (an idle queue) would
 * otherwise send nothing until then, and proxies and clients take a long silence before headers for a dead
 * upstream. `header` is the call's (`context.responseHeader`: its content type and encoding, as Connect set
 * them). Once sent, connect-node's own `writeHead` after the first message does nothing.
 */
function sendHeadersNow(reply: FastifyReply, header: Headers): void {
  const res = reply.raw;
  if (res.headersSent || res.writableEnded) return;
  res.writeHead(200, { ...hookHeaders(reply), ...nodeHeaders(header) });
  // HTTP/1.1 holds the head until the first write; HTTP/2 sent its HEADERS at `writeHead`.
  if (!("stream" in res)) res.flushHeaders();
  res.writeHead = function (this: typeof res) {
    return this;
  };
}

function headerValue(v: string | string[] | undefined): string | null {
  return v === undefined ? null : Array.isArray(v) ? v.join(", ") : v;
}
