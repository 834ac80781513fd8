/**
 * The composition root: builds every facility from the shared dependencies
 * and serves them on one port, over REST (`/v1`), Connect, gRPC and gRPC-Web.
 */
import crypto from "node:crypto";
import fs from "node:fs";
import Fastify, { LogController, type FastifyError, type FastifyInstance, type FastifyReply } from "fastify";
import { fastifyConnectPlugin } from "@connectrpc/connect-fastify";
import { createContextValues, type ConnectRouter, type Interceptor } from "@connectrpc/connect";
import type { Logger } from "pino";
import { AUTH_CHANGED_CHANNEL, createAuthenticator, principalKey, type Authenticator } from "./auth.ts";
import type { Config } from "./config.ts";
import { openDatabase, migrate, type Database } from "./database.ts";
import { PlatformError, toConnectError, toEnvelope, toPlatformError } from "./errors.ts";
import type { Deps, Facility } from "./facility.ts";
import { createMetrics, type Metrics } from "./metrics.ts";
import { createOnePortServer } from "./one-port.ts";
import { createQuotas } from "./quotas.ts";
import { createRestRouter } from "./rest.ts";
import { createMetaFacility } from "./meta/meta-facility.ts";
import { createReflectionImpl, ServerReflection } from "./meta/reflection.ts";
import { createAdminFacility } from "./admin/admin-facility.ts";
import { createFacilities } from "./facilities.ts";
import { createTokenUsageRecorder } from "./admin/token-usage.ts";
import { registerDashboard } from "./dashboard/dashboard-routes.ts";

export const BODY_LIMIT_BYTES = 32 * 1024 * 1024;
/** JSON nested deeper than this is refused before anything walks it recursively. */
export const MAX_JSON_DEPTH = 64;

export interface ServerOptions {
  config: Config;
  logger: Logger;
  /** The admin token, already resolved (from the environment or DATA_DIR). */
  adminToken: string;
  /** An open database to use instead of opening one from the config (tests). */
  database?: Database;
}

export interface PlatformServer {
  readonly fastify: FastifyInstance;
  readonly deps: Deps;
  readonly authenticator: Authenticator;
  /** Listens on the configured port; resolves to the base URL. */
  listen(): Promise<string>;
  /** Graceful: ends long-polls, finishes requests in flight, closes the database. */
  close(): Promise<void>;
}

export async function createPlatformServer(options: ServerOptions): Promise<PlatformServer> {
  const { config, logger } = options;
  const ownsDatabase = options.database === undefined;
  const database =
    options.database ??
    (await openDatabase({
      databaseUrl: config.databaseUrl,
      dataDir: config.dataDir,
      onError: (err) => logger.warn({ err: err.message }, "database connection error"),
    }));
  await migrate(database.db);

  const shutdown = new AbortController();
  const metrics: Metrics = createMetrics();
  const deps: Deps = {
    config,
    database,
    db: database.db,
    quotas: createQuotas(database.db),
    logger,
    metrics,
    shutdownSignal: shutdown.signal,
  };
  const authenticator = createAuthenticator({
    db: database.db,
    adminToken: options.adminToken,
    onTokenLookedUp: createTokenUsageRecorder(database.db, logger),
  });
  // Another instance (or the CLI's direct database work) changed an app or a
  // token: forget what this one remembers; after a lost connection, too.
  const unlistenAuth = await database.listen(
    AUTH_CHANGED_CHANNEL,
    () => authenticator.invalidate(),
    () => authenticator.invalidate(),
  );

  const facilities = await createFacilities(deps);
  const meta = createMetaFacility();
  const admin = createAdminFacility(deps, facilities.adminHooks, () => authenticator.invalidate());
  const all: Facility[] = [meta, admin, ...facilities.list];

  const tls = config.tls
    ? { key: fs.readFileSync(config.tls.keyFile), cert: fs.readFileSync(config.tls.certFile) }
    : undefined;

  const fastify = Fastify({
    serverFactory: ((handler: never) => createOnePortServer(handler, tls)) as never,
    bodyLimit: BODY_LIMIT_BYTES,
    // Path parameters up to 128-character secret names (find-my-way's default of 100 would answer 414).
    routerOptions: { maxParamLength: 512 },
    loggerInstance: logger,
    logController: new LogController({ disableRequestLogging: true }),
    requestIdHeader: false,
    genReqId: (req) => {
      const given = req.headers["x-request-id"];
      return typeof given === "string" && /^[\w.:-]{1,128}$/.test(given) ? given : crypto.randomUUID();
    },
    return503OnClosing: false,
    // A path that is not valid percent-encoding never reaches a route: answer it with the envelope too.
    frameworkErrors: (err, req, reply) => {
      const body = toEnvelope(new PlatformError("invalid_argument", "path: not a valid URL (bad percent-encoding)", { details: [`path: ${err.code}`] }));
      void (reply as unknown as FastifyReply).code(400).header("x-request-id", req.id).send(body);
    },
    forceCloseConnections: "idle",
  }) as unknown as FastifyInstance;

  fastify.addHook("onRequest", async (req, reply) => {
    reply.header("x-request-id", req.id);
  });
  fastify.addHook("onResponse", async (req, reply) => {
    const route = req.routeOptions.url ?? "unmatched";
    const labels = { method: req.method, route, status: String(reply.statusCode) };
    const seconds = reply.elapsedTime / 1000;
    metrics.httpRequests.inc(labels);
    metrics.httpDuration.observe(labels, seconds);
    // The route template, never the raw URL: a secret link's token is in its path.
    req.log.info({ method: req.method, route, status: reply.statusCode, ms: Math.round(reply.elapsedTime * 10) / 10 }, "request");
  });

  fastify.setErrorHandler((err: FastifyError | PlatformError, req, reply) => {
    const platformError = fromFastifyError(err);
    if (platformError.code === "internal") {
      req.log.error({ reqId: req.id, err }, "unexpected error");
    }
    if (platformError.retryAfterSeconds !== undefined) reply.header("retry-after", String(platformError.retryAfterSeconds));
    return reply.code(platformError.status).send(toEnvelope(platformError));
  });
  fastify.setNotFoundHandler((req, reply) => {
    const err = new PlatformError("not_found", `no route ${req.method} ${req.url.split("?")[0]}`);
    return reply.code(404).send(toEnvelope(err));
  });

  // Connect first: its scope replaces every content-type parser, which it can
  // only do while the root still has the built-in ones.
  const interceptor: Interceptor = (next) => async (req) => {
    try {
      const principal = await authenticator.authenticate(req.header.get("authorization"), req.method);
      req.contextValues.set(principalKey, principal);
      return await next(req);
    } catch (err) {
      const platformError = toPlatformError(err);
      if (platformError.code === "internal") {
        logger.error({ err, rpc: `${req.method.parent.typeName}/${req.method.name}` }, "unexpected error");
      }
      throw toConnectError(platformError);
    }
  };

  await fastify.register(fastifyConnectPlugin, {
    routes: (router: ConnectRouter) => {
      for (const facility of all) router.service(facility.service, facility.impl);
      router.service(ServerReflection, createReflectionImpl(all.map((f) => f.service)));
    },
    interceptors: [interceptor],
    readMaxBytes: BODY_LIMIT_BYTES,
    shutdownSignal: shutdown.signal,
    contextValues: () => createContextValues(),
  });

  // JSON bodies: an empty body is "no body" (consume takes none), depth is bounded.
  fastify.removeContentTypeParser(["application/json", "text/plain"]);
  fastify.addContentTypeParser("application/json", { parseAs: "string" }, (_req, text, done) => {
    const body = String(text);
    if (body.trim() === "") return done(null, undefined);
    let value: unknown;
    try {
      value = JSON.parse(body);
    } catch {
      return done(new PlatformError("invalid_argument", "body: malformed JSON", { details: ["body: is not valid JSON"] }), undefined);
    }
    if (jsonDepth(value) > MAX_JSON_DEPTH) {
      return done(new PlatformError("invalid_argument", `body: nested deeper than ${MAX_JSON_DEPTH} levels`), undefined);
    }
    done(null, value);
  });
  fastify.addContentTypeParser("application/x-www-form-urlencoded", { parseAs: "string" }, (_req, text, done) => {
    done(null, Object.fromEntries(new URLSearchParams(String(text))));
  });
  // Any other content type: an empty body is "no body" (fetch sends `text/plain` with `body: ""`, and a
  // consume needs none); anything else is not JSON.
  fastify.addContentTypeParser("*", { parseAs: "string" }, (_req, text, done) => {
    if (String(text).trim() === "") return done(null, undefined);
    done(new PlatformError("invalid_argument", "content-type: must be application/json", { details: ["content-type: must be application/json"] }), undefined);
  });

  for (const facility of all) {
    if (facility.restRoutes) facility.restRoutes(createRestRouter(fastify, authenticator, facility.impl));
    facility.registerRoutes?.(fastify);
  }
  await registerDashboard(fastify);
  fastify.get("/metrics", async (_req, reply) => {
    reply.header("content-type", metrics.registry.contentType);
    return metrics.registry.metrics();
  });

  for (const facility of all) await facility.start?.();

  let closed = false;
  return {
    fastify,
    deps,
    authenticator,
    async listen() {
      await fastify.listen({ port: config.port, host: config.host });
      const address = fastify.server.address();
      const port = typeof address === "object" && address ? address.port : config.port;
      const host = config.host.includes(":") ? `[${config.host}]` : config.host;
      return `${tls ? "https" : "http"}://${host}:${port}`;
    },
    async close() {
      if (closed) return;
      closed = true;
      shutdown.abort(new PlatformError("internal", "server shutting down"));
      await fastify.close();
      for (const facility of all.slice().reverse()) await facility.close?.();
      await unlistenAuth();
      if (ownsDatabase) await database.close();
    },
  };
}

function fromFastifyError(err: FastifyError | PlatformError): PlatformError {
  if (err instanceof PlatformError) return err;
  const code = (err as FastifyError).code;
  if (code === "FST_ERR_CTP_BODY_TOO_LARGE") {
    return new PlatformError("payload_too_large", `body: larger than ${BODY_LIMIT_BYTES} bytes`);
  }
  if (code === "FST_ERR_CTP_INVALID_MEDIA_TYPE") {
    return new PlatformError("invalid_argument", "content-type: must be application/json", {
      details: ["content-type: must be application/json"],
    });
  }
  const status = (err as FastifyError).statusCode;
  if (typeof code === "string" && code.startsWith("FST_") && status !== undefined && status >= 400 && status < 500) {
    return new PlatformError("invalid_argument", "request: malformed", { details: [`request: ${code}`], cause: err });
  }
  return toPlatformError(err);
}

/** Depth of a parsed JSON value, walked without recursion so no input can overflow the stack. */
export function jsonDepth(value: unknown): number {
  let max = 0;
  const stack: [unknown, number][] = [[value, 1]];
  while (stack.length > 0) {
    const [v, d] = stack.pop()!;
    if (v === null || typeof v !== "object") continue;
    if (d > max) max = d;
    if (max > MAX_JSON_DEPTH) return max;
    for (const child of Array.isArray(v) ? v : Object.values(v)) stack.push([child, d + 1]);
  }
  return max;
}
