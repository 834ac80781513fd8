/**
 * The fastify instance every protocol is served by, on one port (HTTP/1.1
 * and h2c, see `one-port.ts`): request ids, the request log line and HTTP
 * metrics, and the one error rendering (`error-handler.ts`). Routes are added
 * by the composition root.
 */
import crypto from "node:crypto";
import Fastify, { LogController, type FastifyInstance } from "fastify";
import type { Logger } from "pino";
import type { Metrics } from "../metrics.ts";
import { BODY_LIMIT_BYTES } from "./body-parsers.ts";
import { registerErrorHandlers, renderFrameworkError } from "./error-handler.ts";
import { createOnePortServer, type OnePortServer, type TlsOptions } from "./one-port.ts";
import { createStartingGate, type RequestHandler, type StartingGate } from "./starting-gate.ts";
import { createRequestLogger } from "./request-logger.ts";
import type { HttpTimeouts } from "../config.ts";
import type { DatabaseHealth } from "../database/index.ts";
import type { Principal } from "../auth.ts";
import { facilityOfRoute, type RequestCounts } from "../request-counts/index.ts";

/**
 * The one port, made (and possibly listening) before the routes exist: the
 * server starts listening before its database is open, and its starting gate
 * answers until fastify is ready (`starting-gate.ts`).
 */
export interface Listener {
  readonly server: OnePortServer;
  readonly gate: StartingGate;
  readonly tls: boolean;
  /** Listens on `port` and `host` (once; later calls give the same URL); resolves to the base URL. */
  listen(port: number, host: string): Promise<string>;
}

export function createListener(options: { tls: TlsOptions | undefined; timeouts: HttpTimeouts }): Listener {
  const gate = createStartingGate();
  const server = createOnePortServer(gate.handler, options);
  let listening: Promise<string> | undefined;
  return {
    server,
    gate,
    tls: options.tls !== undefined,
    listen(port, host) {
      listening ??= new Promise<void>((resolve, reject) => {
        server.once("error", reject);
        server.listen({ port, host }, () => {
          server.off("error", reject);
          resolve();
        });
      }).then(() => {
        const address = server.address();
        const bound = typeof address === "object" && address ? address.port : port;
        return `${options.tls ? "https" : "http"}://${host.includes(":") ? `[${host}]` : host}:${bound}`;
      });
      return listening;
    },
  };
}

export interface HttpServerOptions {
  logger: Logger;
  metrics: Metrics;
  /** The one port; its gate is opened to the routes once fastify is ready. */
  listener: Listener;
  /** Errors that are the database being unreachable are reported here (once per outage) and answered 503. */
  databaseHealth: DatabaseHealth;
  /** Counts the answers of the facilities' REST routes (`/v1/<facility>/...`) for the operator's overview. */
  requestCounts?: RequestCounts;
}

export function createHttpServer(options: HttpServerOptions): FastifyInstance {
  const { logger, metrics, listener } = options;
  let routes: RequestHandler | undefined;
  const fastify = Fastify({
    // fastify never listens itself: the listener may be listening already (answering through its gate).
    serverFactory: ((handler: RequestHandler) => {
      routes = handler;
      return listener.server;
    }) as never,
    bodyLimit: BODY_LIMIT_BYTES,
    // Path parameters up to 128-character secret names (find-my-way's default of 100 would answer 414).
    routerOptions: { maxParamLength: 512 },
    loggerInstance: logger,
    logController: new LogController({ disableRequestLogging: true }),
    childLoggerFactory: createRequestLogger,
    requestIdHeader: false,
    genReqId: (req) => {
      const given = req.headers["x-request-id"];
      return typeof given === "string" && /^[\w.:-]{1,128}$/.test(given) ? given : crypto.randomUUID();
    },
    return503OnClosing: false,
    frameworkErrors: renderFrameworkError,
    forceCloseConnections: "idle",
  }) as unknown as FastifyInstance;

  // Callback hooks, not async ones: every request runs them, and an async hook costs a promise and a turn.
  fastify.addHook("onRequest", (req, reply, done) => {
    void reply.header("x-request-id", req.id);
    done();
  });
  fastify.addHook("onResponse", (req, reply, done) => {
    const route = req.routeOptions.url ?? "unmatched";
    // One observation, which `http_requests_total` is read from too (`metrics.ts`).
    metrics.httpDuration.observeRequest(req.method, route, reply.statusCode, reply.elapsedTime / 1000);
    const facility = options.requestCounts && facilityOfRoute(route);
    if (facility) {
      // The caller the route authenticated (`rest-router.ts`), when it got that far.
      const principal = (req as { principal?: Principal }).principal;
      options.requestCounts!.record(
        facility,
        principal?.kind === "app" ? principal.app.id : undefined,
        reply.statusCode,
      );
    }
    // The route template, never the raw URL: a secret link's token is in its path.
    req.log.info(
      { method: req.method, route, status: reply.statusCode, ms: Math.round(reply.elapsedTime * 10) / 10 },
      "request",
    );
    done();
  });
  registerErrorHandlers(fastify, options.databaseHealth);
  fastify.addHook("onReady", (done) => {
    listener.gate.open(routes!);
    done();
  });
  // What fastify does at close for a server it listened on itself: stop taking connections, drain the open ones.
  fastify.addHook("preClose", (done) => {
    if (!listener.server.listening) return done();
    listener.server.closeIdleConnections();
    listener.server.close(() => done());
  });
  return fastify;
}
