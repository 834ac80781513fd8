/**
 * OpenTelemetry traces, only when `OTEL_EXPORTER_OTLP_ENDPOINT` is set
 * (docs/operations.md#traces). `createTracing` is then called once per server,
 * and everything here is hooked in behind that one check: a server without
 * the variable registers no hook, no interceptor and no query log, so its
 * requests run exactly the code they ran before.
 *
 * What is traced, named by the semantic conventions:
 * - HTTP (`registerHttp`): one SERVER span per request, `{method} {route}`,
 *   a child of the caller's W3C `traceparent` when it sent one;
 * - RPC (`interceptor`): a Connect or gRPC call renames that span
 *   `{service}/{method}` and adds `rpc.*`;
 * - database (`queryLog`): one CLIENT span per statement run on behalf of a
 *   traced request (statements of no request, such as housekeeping, make
 *   none), with the statement's text: its parameters are never in it;
 * - messaging (`messaging`): `send {queue}` (PRODUCER) around a put, whose
 *   `traceparent` is stored with the message; `receive {queue}` (CLIENT)
 *   around a consume, linked to each received message's put; `ack` (CLIENT).
 *
 * Spans leave in batches over OTLP/HTTP (JSON) to `<endpoint>/v1/traces`.
 */
import {
  context,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Link,
  type Span,
  type TextMapGetter,
} from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { BatchSpanProcessor, TracerProvider, type SpanExporter } from "@opentelemetry/sdk-trace";
import {
  ATTR_DB_QUERY_SUMMARY,
  ATTR_DB_QUERY_TEXT,
  ATTR_DB_SYSTEM_NAME,
  ATTR_ERROR_TYPE,
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
  ATTR_HTTP_ROUTE,
  ATTR_SERVICE_NAME,
  ATTR_SERVICE_VERSION,
  ATTR_URL_PATH,
  ATTR_URL_SCHEME,
  ATTR_USER_AGENT_ORIGINAL,
} from "@opentelemetry/semantic-conventions";
import { ConnectError, type Interceptor } from "@connectrpc/connect";
import type { FastifyInstance, FastifyRequest } from "fastify";
import type { TracingConfig } from "./config.ts";

/**
 * The RPC and messaging attributes are still "incubating" in the conventions' package (its
 * `/incubating` entry may change in any release, so it advises copying them): written out here.
 */
const RPC_SYSTEM = "rpc.system";
const RPC_SERVICE = "rpc.service";
const RPC_METHOD = "rpc.method";
const RPC_GRPC_STATUS_CODE = "rpc.grpc.status_code";
const RPC_CONNECT_ERROR_CODE = "rpc.connect_rpc.error_code";
const MESSAGING_SYSTEM = "messaging.system";
const MESSAGING_OPERATION_TYPE = "messaging.operation.type";
const MESSAGING_OPERATION_NAME = "messaging.operation.name";
const MESSAGING_DESTINATION_NAME = "messaging.destination.name";
const MESSAGING_MESSAGE_ID = "messaging.message.id";
const MESSAGING_BATCH_MESSAGE_COUNT = "messaging.batch.message_count";

/** `messaging.system` of this platform's queues (not one of the conventions' listed brokers). */
export const MESSAGING_SYSTEM_NAME = "platform_batteries";

/** What the database layer tells of a statement that ended (Kysely's `LogEvent`, of which this reads no more). */
export interface StatementEnd {
  level: "query" | "error";
  query: { sql: string };
  queryDurationMillis: number;
  error?: unknown;
}

export interface Tracing {
  /** The SERVER span of each request (fastify hooks). */
  registerHttp(fastify: FastifyInstance): void;
  /** Names the request's span after the RPC, for Connect and gRPC calls. */
  readonly interceptor: Interceptor;
  /** Kysely's `log` option: a span per statement run within a traced request. */
  readonly queryLog: (event: StatementEnd) => void;
  readonly messaging: MessagingTracing;
  /** Sends the spans ended so far. */
  flush(): Promise<void>;
  /** Sends what is left and stops. */
  shutdown(): Promise<void>;
}

export interface MessagingTracing {
  /** A put: `run` gets the `traceparent` to store with the message. */
  send<T extends { id: string }>(queue: string, run: (traceParent: string) => Promise<T>): Promise<T>;
  /** A consume: the span links to the put of each message received. */
  receive<T extends { id: string; traceParent?: string }>(queue: string, run: () => Promise<T[]>): Promise<T[]>;
  /** An acknowledgement of the messages `ids`. */
  settle<T>(operation: "ack", ids: readonly string[], run: () => Promise<T>): Promise<T>;
}

const headerGetter: TextMapGetter<FastifyRequest["headers"]> = {
  keys: (headers) => Object.keys(headers),
  get: (headers, key) => headers[key],
};

const propagator = new W3CTraceContextPropagator();

type Carrier = Record<string, string | undefined>;
const carrierGetter: TextMapGetter<Carrier> = { keys: (c) => Object.keys(c), get: (c, k) => c[k] };

/** The W3C `traceparent` of `span`: what a put stores with its message. */
export function traceParentOf(span: Span): string {
  const carrier: Carrier = {};
  propagator.inject(trace.setSpan(ROOT_CONTEXT, span), carrier, {
    set: (c: Carrier, k: string, v: string) => {
      c[k] = v;
    },
  });
  return carrier.traceparent ?? "";
}

/** The span context a stored `traceparent` names, as a link; undefined when it is not one. */
function linkTo(traceParent: string | undefined): Link | undefined {
  if (traceParent === undefined) return undefined;
  const spanContext = trace.getSpanContext(
    propagator.extract(ROOT_CONTEXT, { traceparent: traceParent }, carrierGetter),
  );
  return spanContext ? { context: spanContext } : undefined;
}

/**
 * The summary of a statement (`db.query.summary`): its operation and first table, such as
 * `INSERT queue_messages`, or the operation alone.
 */
export function querySummary(text: string): string {
  const bare = text.replace(/\/\*[\s\S]*?\*\//g, " ");
  // Not the `UPDATE` of `FOR UPDATE`, a lock taken by a read.
  const write = /\b(INSERT\s+INTO|(?<!\bFOR\s+)UPDATE|DELETE\s+FROM)\s+"?([a-z_][a-z0-9_]*)/i.exec(bare);
  if (write) return `${write[1].split(/\s+/)[0].toUpperCase()} ${write[2]}`;
  const read = /\bSELECT\b[\s\S]*?\bFROM\s+"?([a-z_][a-z0-9_]*)/i.exec(bare);
  if (read && /^\s*(SELECT|WITH)\b/i.test(bare)) return `SELECT ${read[1]}`;
  return (/^\s*([a-z]+)/i.exec(bare)?.[1] ?? "query").toUpperCase();
}

function failed(span: Span, err: unknown): void {
  span.recordException(err instanceof Error ? err : String(err));
  span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : undefined });
  span.setAttribute(ATTR_ERROR_TYPE, err instanceof Error ? err.constructor.name : "Error");
}

let contextManagerSet = false;

export interface TracingOptions {
  version: string;
  /** Where spans go; default the OTLP/HTTP exporter to `config.endpoint`. */
  exporter?: SpanExporter;
}

export function createTracing(config: TracingConfig, options: TracingOptions): Tracing {
  // The active span follows the request through awaits (AsyncLocalStorage). One per process: the API's
  // context manager is global; it costs nothing to code that never asks for the active context.
  if (!contextManagerSet) {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    contextManagerSet = true;
  }
  const exporter = options.exporter ?? new OTLPTraceExporter({ url: `${config.endpoint}/v1/traces` });
  // A provider per server, not the global one: several servers in one process (tests) keep their own.
  const provider = new TracerProvider({
    resource: resourceFromAttributes({
      [ATTR_SERVICE_NAME]: config.serviceName,
      [ATTR_SERVICE_VERSION]: options.version,
    }),
    spanProcessors: [new BatchSpanProcessor({ exporter })],
  });
  const tracer = provider.getTracer("platform-batteries", options.version);
  const spans = new WeakMap<FastifyRequest, { span: Span; context: Context }>();

  /** `run` in a span of `name`, made active so the statements it runs are its children. */
  function inSpan<T>(
    name: string,
    kind: SpanKind,
    attributes: Attributes,
    run: (span: Span) => Promise<T>,
  ): Promise<T> {
    return tracer.startActiveSpan(name, { kind, attributes }, async (span) => {
      try {
        return await run(span);
      } catch (err) {
        failed(span, err);
        throw err;
      } finally {
        span.end();
      }
    });
  }

  const messagingAttributes = (operation: string, type: string, queue?: string): Attributes => ({
    [MESSAGING_SYSTEM]: MESSAGING_SYSTEM_NAME,
    [MESSAGING_OPERATION_NAME]: operation,
    [MESSAGING_OPERATION_TYPE]: type,
    ...(queue !== undefined && { [MESSAGING_DESTINATION_NAME]: queue }),
  });

  return {
    registerHttp(fastify) {
      fastify.addHook("onRequest", (req, _reply, done) => {
        const parent = propagator.extract(ROOT_CONTEXT, req.headers, headerGetter);
        const route = req.routeOptions.url;
        const userAgent = req.headers["user-agent"];
        const span = tracer.startSpan(
          route ? `${req.method} ${route}` : req.method,
          {
            kind: SpanKind.SERVER,
            attributes: {
              [ATTR_HTTP_REQUEST_METHOD]: req.method,
              [ATTR_URL_PATH]: req.url.split("?")[0],
              [ATTR_URL_SCHEME]: req.protocol,
              ...(route && { [ATTR_HTTP_ROUTE]: route }),
              ...(userAgent && { [ATTR_USER_AGENT_ORIGINAL]: userAgent }),
            },
          },
          parent,
        );
        spans.set(req, { span, context: trace.setSpan(parent, span) });
        done();
      });
      // After the body is read (its stream's callbacks run outside this request's context): the handler,
      // and what it awaits, run with the request's span active.
      fastify.addHook("preHandler", (req, _reply, done) => {
        const traced = spans.get(req);
        if (traced) context.with(traced.context, done);
        else done();
      });
      const end = (req: FastifyRequest, status: number | undefined) => {
        const traced = spans.get(req);
        if (!traced) return;
        spans.delete(req);
        if (status !== undefined) {
          traced.span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, status);
          // A server span is an error for 5xx only: a 4xx is the caller's.
          if (status >= 500) {
            traced.span.setStatus({ code: SpanStatusCode.ERROR });
            traced.span.setAttribute(ATTR_ERROR_TYPE, String(status));
          }
        } else {
          traced.span.setAttribute(ATTR_ERROR_TYPE, "aborted");
        }
        traced.span.end();
      };
      fastify.addHook("onResponse", (req, reply, done) => {
        end(req, reply.statusCode);
        done();
      });
      fastify.addHook("onRequestAbort", (req, done) => {
        end(req, undefined);
        done();
      });
    },

    interceptor: (next) => async (req) => {
      const span = trace.getActiveSpan();
      if (!span) return next(req);
      const grpc = (req.header.get("content-type") ?? "").startsWith("application/grpc");
      span.updateName(`${req.method.parent.typeName}/${req.method.name}`);
      span.setAttributes({
        [RPC_SYSTEM]: grpc ? "grpc" : "connect_rpc",
        [RPC_SERVICE]: req.method.parent.typeName,
        [RPC_METHOD]: req.method.name,
      });
      try {
        const res = await next(req);
        if (grpc) span.setAttribute(RPC_GRPC_STATUS_CODE, 0);
        return res;
      } catch (err) {
        if (err instanceof ConnectError) {
          span.setAttribute(grpc ? RPC_GRPC_STATUS_CODE : RPC_CONNECT_ERROR_CODE, grpc ? err.code : String(err.code));
        }
        throw err;
      }
    },

    queryLog(event) {
      const parent = context.active();
      if (!trace.getSpan(parent)) return;
      const end = Date.now();
      const text = event.query.sql;
      const summary = querySummary(text);
      const span = tracer.startSpan(
        summary,
        {
          kind: SpanKind.CLIENT,
          startTime: end - event.queryDurationMillis,
          attributes: {
            [ATTR_DB_SYSTEM_NAME]: "postgresql",
            [ATTR_DB_QUERY_SUMMARY]: summary,
            [ATTR_DB_QUERY_TEXT]: text,
          },
        },
        parent,
      );
      if (event.level === "error") failed(span, event.error);
      span.end(end);
    },

    messaging: {
      send(queue, run) {
        return inSpan(`send ${queue}`, SpanKind.PRODUCER, messagingAttributes("send", "send", queue), async (span) => {
          const result = await run(traceParentOf(span));
          span.setAttribute(MESSAGING_MESSAGE_ID, result.id);
          return result;
        });
      },
      receive(queue, run) {
        return inSpan(
          `receive ${queue}`,
          SpanKind.CLIENT,
          messagingAttributes("receive", "receive", queue),
          async (span) => {
            const messages = await run();
            span.setAttribute(MESSAGING_BATCH_MESSAGE_COUNT, messages.length);
            if (messages.length === 1) span.setAttribute(MESSAGING_MESSAGE_ID, messages[0].id);
            span.addLinks(messages.map((m) => linkTo(m.traceParent)).filter((l): l is Link => l !== undefined));
            return messages;
          },
        );
      },
      settle(operation, ids, run) {
        const attributes = messagingAttributes(operation, "settle");
        if (ids.length === 1) attributes[MESSAGING_MESSAGE_ID] = ids[0];
        else attributes[MESSAGING_BATCH_MESSAGE_COUNT] = ids.length;
        return inSpan(operation, SpanKind.CLIENT, attributes, () => run());
      },
    },

    flush: () => provider.forceFlush(),
    shutdown: () => provider.shutdown(),
  };
}
