/**
 * The composition root: opens the database, builds the core (quotas, auth,
 * metrics) and every facility from the shared dependencies, and serves them
 * on one port, over REST (`/v1`), Connect, gRPC and gRPC-Web.
 */
import crypto from "node:crypto";
import fs from "node:fs/promises";
import http from "node:http";
import type { FastifyInstance } from "fastify";
import { createContextValues, type ConnectRouter, type ServiceImpl } from "@connectrpc/connect";
import type { DescService, Registry } from "@bufbuild/protobuf";
import type { Logger } from "pino";
import { createOperatorStore } from "./core/operators/operator-store.ts";
import {
  AUTH_CHANGED_CHANNEL,
  createAuthenticator,
  headPrincipalKey,
  requestIdKey,
  type Authenticator,
} from "./core/auth.ts";
import type { ResolvedConfig } from "./core/data-dir.ts";
import {
  databaseTarget,
  migrate,
  openDatabase,
  pingDatabase,
  waitForDatabase,
  type Database,
} from "./core/database/index.ts";
import { PlatformError, toEnvelope } from "./core/errors.ts";
import { checkReadiness, sharedReadiness, type ReadinessCheck } from "./core/readiness.ts";
import { createHousekeeping, type Housekeeping, type HousekeepingTask } from "./core/housekeeping.ts";
import type { Deps, Facility } from "./core/facility.ts";
import { BODY_LIMIT_BYTES, registerBodyParsers } from "./core/http/body-parsers.ts";
import { createConnectInterceptor } from "./core/http/connect-interceptor.ts";
import { createRequestCountInterceptor } from "./core/http/request-count-interceptor.ts";
import { createRequestCounts, facilityOfService, KEPT_MS, type RequestCounts } from "./core/request-counts/index.ts";
import type { OverviewDependency } from "./admin/index.ts";
import { registerConnectRoutes } from "./core/http/connect-routes.ts";
import { createIdempotency, idempotentImpl } from "./core/http/idempotency.ts";
import { createIdempotencyStore } from "./core/idempotency-store.ts";
import { createHttpServer, createListener, type Listener } from "./core/http/http-server.ts";
import type { TlsOptions } from "./core/http/one-port.ts";
import type { Config } from "./core/config.ts";
import { HOUR_MS } from "./core/time.ts";
import { registerApiDocs } from "./core/http/api-docs.ts";
import { createOpenApiDocument } from "./core/http/openapi.ts";
import { registerRestRoutes } from "./core/http/rest-router.ts";
import { createMetrics } from "./core/metrics.ts";
import {
  createLimitExchange,
  createLimitExchangeStore,
  createRateLimiter,
  createFairShare,
  type LimitExchange,
} from "./core/limits/index.ts";
import { registerOperationalGauges, registerPoolGauges } from "./core/operational-gauges.ts";
import { createQuotas, reservationSweepTask } from "./core/quotas/index.ts";
import { createAdminFacility } from "./admin/index.ts";
import {
  createHealthImpl,
  createMetaFacility,
  Health,
  createReflectionImpl,
  createReflectionV1AlphaImpl,
  packageInfo,
  ServerReflection,
  ServerReflectionV1Alpha,
} from "./meta/index.ts";
import { createFacilities } from "./facilities.ts";
import { verifySharedKeys } from "./core/shared-keys/index.ts";
import { keyringFromConfig } from "./secrets/index.ts";
import { createAuditStore, createTokenUsageRecorder } from "./admin/index.ts";
import { createAppStore } from "./core/apps/app-store.ts";
import { registerDashboard } from "./dashboard/dashboard-routes.ts";
import {
  mappedOperator,
  registerSingleSignOn,
  sessionSweepTask,
  singleSignOnCookies,
} from "./dashboard/sso/single-sign-on.ts";
import { createSessionStore } from "./core/operators/session-store.ts";

export { jsonDepth } from "./core/http/body-parsers.ts";

export interface ServerOptions {
  /** The configuration with its admin token and secrets key resolved (from the environment or DATA_DIR). */
  config: ResolvedConfig;
  logger: Logger;
  /** An open database to use instead of opening one from the config (tests). */
  database?: Database;
  /**
   * The one port, made (and listening, answering through its starting gate) before the database is
   * open: see `startPlatformServer`. Undefined: made here, listening from `listen()`.
   */
  listener?: Listener;
  /**
   * Test-only services served over Connect, gRPC and gRPC-Web beside the facilities, through the same
   * stack (the one port, the short path, the interceptor and its error mapping), callable without a token:
   * the Connect conformance suite's reference service (test/conformance/). The server process never sets it.
   */
  testServices?: {
    services: readonly { service: DescService; impl: Partial<ServiceImpl<DescService>> }[];
    /** The message types their `google.protobuf.Any` fields may hold, for Connect JSON. */
    jsonRegistry?: Registry;
  };
}

export interface PlatformServer {
  readonly fastify: FastifyInstance;
  readonly deps: Deps;
  readonly authenticator: Authenticator;
  /** The periodic jobs of every facility (`runAll` runs each once, now). */
  readonly housekeeping: Housekeeping;
  /** The facilities' requests counted for the overview (`flush` writes them now, e.g. in tests). */
  readonly requestCounts: RequestCounts;
  /** Every facility served (meta, admin, then the five of `facilities.ts`), e.g. to walk their route tables. */
  readonly facilities: readonly Facility[];
  /** How this instance shares out every app's limits with the others (`exchangeNow` in tests). */
  readonly limitExchange: LimitExchange;
  /** Listens on the configured port (and METRICS_PORT); resolves to the base URL. */
  listen(): Promise<string>;
  /** The base URL of the METRICS_PORT listener, once listening; undefined without one. */
  readonly metricsUrl: string | undefined;
  /**
   * Reads TLS_KEY_FILE and TLS_CERT_FILE again (SIGHUP): new handshakes get them, open connections keep
   * theirs. A pair that does not load keeps the one in use, with one line in the log saying why.
   */
  reloadTls(): Promise<void>;
  /** Graceful: ends long-polls, finishes requests in flight, closes the database. */
  close(): Promise<void>;
}

/** The key and certificate of TLS_KEY_FILE and TLS_CERT_FILE, or undefined without TLS. */
async function readTls(config: Config): Promise<TlsOptions | undefined> {
  if (!config.tls) return undefined;
  const [key, cert] = await Promise.all([fs.readFile(config.tls.keyFile), fs.readFile(config.tls.certFile)]);
  return { key, cert };
}

/**
 * The server process's start: listening first (`/health` 200, `/ready` 503,
 * every other request 503 `unavailable` with Retry-After), then the database
 * opened (waited for up to DATABASE_WAIT_SECONDS), migrated and every
 * facility built; then the routes take over the port. A process manager or
 * an orchestrator sees a live process while its database is still starting.
 */
export async function startPlatformServer(options: Omit<ServerOptions, "listener">): Promise<PlatformServer> {
  const { config, logger } = options;
  const listener = createListener({ tls: await readTls(config), timeouts: config.http });
  const url = await listener.listen(config.port, config.host);
  logger.info({ url }, "listening; ready once the database is open");
  try {
    const server = await createPlatformServer({ ...options, listener });
    await server.listen();
    return server;
  } catch (err) {
    listener.server.closeAllConnections();
    listener.server.close();
    throw err;
  }
}

/** What serves each dependency, for the overview (its state comes from the readiness checks). */
function dependenciesOf(config: Config): OverviewDependency[] {
  return [
    { name: "database", provider: config.databaseUrl ? "PostgreSQL" : "PGlite (embedded)", check: "database" },
    {
      name: "analytics",
      provider: config.mongodbUrl ? "MongoDB" : "SQL (the platform database)",
      check: config.mongodbUrl ? "analytics" : undefined,
    },
    {
      name: "mail",
      provider: config.mailProvider === "ses" ? "Amazon SES" : "outbox (embedded, never delivers)",
      check: config.mailProvider === "ses" ? "mail" : undefined,
    },
    {
      name: "inference",
      provider: config.inferenceProvider === "bedrock" ? "Amazon Bedrock" : "offline provider (built in)",
      check: config.inferenceProvider === "bedrock" ? "inference" : undefined,
    },
  ];
}

/** Deletes the overview's request counts older than they are read. */
function requestCountsPrune(counts: RequestCounts): HousekeepingTask {
  return {
    name: "request counts",
    intervalMs: HOUR_MS,
    run: () => {
      const before = new Date(Date.now() - KEPT_MS);
      return counts.store.prune(before, before.toISOString().slice(0, 10));
    },
  };
}

/** Whether `authorization` is `Bearer <token>`, compared in constant time. */
function bearerMatches(authorization: string | undefined, token: string): boolean {
  const given = /^Bearer (\S+)$/i.exec(authorization ?? "")?.[1] ?? "";
  const digest = (text: string) => crypto.createHash("sha256").update(text).digest();
  return crypto.timingSafeEqual(digest(given), digest(token));
}

export async function createPlatformServer(options: ServerOptions): Promise<PlatformServer> {
  const { config, logger } = options;
  const listener = options.listener ?? createListener({ tls: await readTls(config), timeouts: config.http });
  // Traces only with OTEL_EXPORTER_OTLP_ENDPOINT: without it, none of the hooks below is added and the
  // OpenTelemetry SDK is not even loaded.
  const tracing =
    config.tracing &&
    (await import("./core/tracing.ts")).createTracing(config.tracing, { version: packageInfo.version });
  const ownsDatabase = options.database === undefined;
  const database =
    options.database ??
    (await openDatabase({
      databaseUrl: config.databaseUrl,
      dataDir: config.dataDir,
      onError: (err) => logger.warn({ err: err.message }, "database connection error"),
      log: logger,
      statementTimeoutMs: config.databaseTimeouts.statementMs,
      poolWaitMs: config.databaseTimeouts.poolWaitMs,
      poolAppShare: config.databasePoolAppShare,
      queryLog: tracing?.queryLog,
    }));
  try {
    if (ownsDatabase && config.databaseUrl !== undefined) {
      await waitForDatabase(database.unboundedDb, {
        waitSeconds: config.databaseWaitSeconds,
        target: databaseTarget(config.databaseUrl),
        log: logger,
      });
    }
    await migrate(database.unboundedDb);
    await verifySharedKeys(database.db, { keyring: keyringFromConfig(config), adminToken: config.adminToken });
  } catch (err) {
    if (ownsDatabase) await database.close();
    await tracing?.shutdown();
    throw err;
  }

  const shutdown = new AbortController();
  const metrics = createMetrics();
  registerPoolGauges(metrics, database);
  const apps = createAppStore(database.db);
  const deps: Deps = {
    config,
    database,
    db: database.db,
    quotas: createQuotas(database.db),
    apps,
    logger,
    metrics,
    shutdownSignal: shutdown.signal,
    tracing,
  };
  const sessions = createSessionStore(database.db);
  const oidc = config.oidc;
  const ssoCookies = oidc ? singleSignOnCookies(oidc) : undefined;
  const authenticator = createAuthenticator({
    db: database.db,
    sessions:
      oidc && ssoCookies
        ? {
            cookieName: ssoCookies.sessionCookie,
            origin: ssoCookies.origin,
            store: sessions,
            operatorOf: (identity) => mappedOperator(oidc, identity),
          }
        : undefined,
    apps,
    adminToken: config.adminToken,
    onTokenLookedUp: createTokenUsageRecorder(apps, logger),
    onOperatorTokenLookedUp: createTokenUsageRecorder(createOperatorStore(database.db), logger),
    publicServices: options.testServices?.services.map(({ service }) => service.typeName),
  });
  // Another instance (or the CLI's direct database work) changed an app or a
  // token: forget what this one remembers; after a lost connection, too.
  const unlistenAuth = await database.listen(
    AUTH_CHANGED_CHANNEL,
    () => authenticator.invalidate(),
    () => authenticator.invalidate(),
  );

  // Every app's rate and concurrency limits, shared out between the instances of this database.
  const rateLimited = metrics.counter(
    "rate_limited_total",
    "Calls answered 429 rate_limited, by the app limit they met, or fairShare (docs/api.md#rate-limits).",
    ["limit"] as const,
  );
  // When the process is saturated, the apps making more than their share of the calls are refused first.
  const fairShare =
    config.fairShareUtilization > 0
      ? createFairShare({ busyAbove: config.fairShareUtilization, minRate: config.fairShareMinRate })
      : undefined;
  const limiter = createRateLimiter({ onRefused: (limit) => rateLimited.inc({ limit }), fairShare });
  const limitExchange = createLimitExchange({
    store: createLimitExchangeStore(database.db),
    limiter,
    logger,
    periodMs: config.limitExchangeMs,
  });

  // Every facility request, counted for the operator's overview (REST here and in the interceptor below).
  const requestCounts = createRequestCounts(database.db, logger);
  const facilities = await createFacilities(deps);
  const meta = createMetaFacility();
  /** The one list of readiness checks: the database and each of `facilities`' own (all of them by default). */
  const readinessChecks = (of: readonly Facility[] = all): Record<string, ReadinessCheck> => {
    const checks: Record<string, ReadinessCheck> = { database: (signal) => pingDatabase(database.db, signal) };
    for (const facility of of) Object.assign(checks, facility.readiness?.());
    return checks;
  };
  const admin = createAdminFacility(deps, facilities.operations, () => authenticator.invalidate(), {
    version: packageInfo.version,
    startedAt: new Date(),
    readiness: () => checkReadiness(readinessChecks()),
    requestCounts: requestCounts.store,
    dependencies: dependenciesOf(config),
  });
  const all: Facility[] = [meta, admin, ...facilities.list];
  // Each facility's implementation as every protocol calls it: the RPCs of its
  // `idempotent` routes honour the Idempotency-Key header.
  const idempotency = createIdempotency({
    store: createIdempotencyStore(database.db),
    logger,
    metrics,
    answerSecrets: keyringFromConfig(config).deriveKeys("idempotent answers"),
  });
  const served = all.map((facility) => ({
    facility,
    service: facility.service,
    impl: idempotentImpl(facility.service, facility.impl, facility.routes ?? [], idempotency),
  }));

  const fastify = createHttpServer({ logger, metrics, listener, databaseHealth: database.health, requestCounts });
  // Before any route, so its preHandler runs ahead of the Connect short path's.
  tracing?.registerHttp(fastify);

  // Connect first: its scope replaces every content-type parser, which it can
  // only do while the root still has the built-in ones.
  await registerConnectRoutes(fastify, {
    routes: (router: ConnectRouter) => {
      for (const { service, impl } of served) router.service(service, impl);
      for (const { service, impl } of options.testServices?.services ?? []) router.service(service, impl);
      // Reflection lists every service served (it adds itself): the facilities' and the health service.
      const reflected = [...all.map((f) => f.service), Health];
      router.service(ServerReflection, createReflectionImpl(reflected));
      router.service(ServerReflectionV1Alpha, createReflectionV1AlphaImpl(reflected));
      router.service(
        Health,
        createHealthImpl(
          async (service) => {
            const facility = service === "" ? undefined : all.find((f) => f.service.typeName === service);
            if (service !== "" && !facility) return undefined;
            return (await checkReadiness(readinessChecks(facility ? [facility] : all))).ready;
          },
          () => all.map((f) => f.service.typeName),
        ),
      );
    },
    services: [...served, ...(options.testServices?.services ?? [])],
    jsonRegistry: options.testServices?.jsonRegistry,
    interceptors: [
      ...(tracing ? [tracing.interceptor] : []),
      createRequestCountInterceptor(requestCounts),
      createConnectInterceptor(authenticator, logger, database.health, limiter),
    ],
    authenticate: (authorization, method, browser) => authenticator.authenticate(authorization, method, browser),
    authenticateNow: (authorization, method) => authenticator.authenticateNow?.(authorization, method),
    readMaxBytes: BODY_LIMIT_BYTES,
    contextValues: (req, principal) => createContextValues().set(requestIdKey, req.id).set(headPrincipalKey, principal),
    shortPath: config.connectShortPath,
    metrics,
    corsOrigins: config.corsOrigins,
    onRefusedAtHead: (method, status) => {
      const facility = facilityOfService(method.parent.typeName);
      if (facility) requestCounts.record(facility, undefined, status);
    },
  });
  registerBodyParsers(fastify);

  for (const { facility, impl } of served) {
    if (facility.routes) registerRestRoutes(fastify, authenticator, impl, facility.routes, limiter);
    facility.registerRoutes?.(fastify);
  }
  const readiness = sharedReadiness(readinessChecks);
  registerOperationalGauges({ metrics, quotas: deps.quotas, readiness, appsTop: config.metrics.appsTop });
  fastify.get("/ready", async (_req, reply) => {
    const report = await readiness();
    if (report.ready) return { status: "ready", checks: report.checks };
    const failing = Object.entries(report.checks).filter(([, state]) => state !== "ok");
    void reply.code(503).header("retry-after", "5");
    return {
      ...toEnvelope(
        new PlatformError("unavailable", `not ready: ${failing.map(([name]) => name).join(", ")}`, {
          details: failing.map(([n, s]) => `${n}: ${s}`),
        }),
      ),
      checks: report.checks,
    };
  });
  await registerDashboard(fastify);
  const auditLog = createAuditStore(database.db);
  await registerSingleSignOn(fastify, {
    oidc: config.oidc,
    sessions,
    logger,
    audit: (entry) => auditLog.record(entry),
  });
  // The document describes the routes just registered, from their own schemas
  // (made at its first request: most starts never serve it).
  await registerApiDocs(fastify, () =>
    createOpenApiDocument(
      {
        title: "Platform Batteries API",
        version: packageInfo.version,
        description:
          "Analytics, mail, inference, queues and secrets for hosted apps, behind one base URL and one service token.",
      },
      all.flatMap((facility) => (facility.routes ? [facility.routes] : [])),
    ),
  );
  // `/metrics` on the public port, or only on METRICS_PORT; with METRICS_TOKEN, only to its bearer.
  const metricsToken = config.metrics.token;
  const mayReadMetrics = (authorization: string | undefined) =>
    metricsToken === undefined || bearerMatches(authorization, metricsToken);
  const noMetricsToken = () =>
    new PlatformError("unauthenticated", "/metrics needs the metrics bearer token (METRICS_TOKEN)");
  if (config.metrics.port === undefined) {
    fastify.get("/metrics", async (req, reply) => {
      if (!mayReadMetrics(req.headers.authorization)) {
        void reply.header("www-authenticate", "Bearer");
        throw noMetricsToken();
      }
      void reply.header("content-type", metrics.registry.contentType);
      return metrics.registry.metrics();
    });
  }
  const metricsServer =
    config.metrics.port === undefined
      ? undefined
      : http.createServer(
          {
            headersTimeout: config.http.headersTimeoutMs,
            requestTimeout: config.http.requestTimeoutMs,
            keepAliveTimeout: config.http.keepAliveTimeoutMs,
          },
          (req, res) => {
            const send = (status: number, contentType: string, body: string, headers: Record<string, string> = {}) => {
              res.writeHead(status, { "content-type": contentType, ...headers });
              res.end(body);
            };
            const json = "application/json; charset=utf-8";
            if (req.method !== "GET" || (req.url ?? "").split("?")[0] !== "/metrics") {
              return send(
                404,
                json,
                JSON.stringify(toEnvelope(new PlatformError("not_found", "only GET /metrics here"))),
              );
            }
            if (!mayReadMetrics(req.headers.authorization)) {
              return send(401, json, JSON.stringify(toEnvelope(noMetricsToken())), { "www-authenticate": "Bearer" });
            }
            metrics.registry.metrics().then(
              (text) => send(200, metrics.registry.contentType, text),
              (err: unknown) => {
                logger.error({ err }, "metrics failed");
                send(500, json, JSON.stringify(toEnvelope(new PlatformError("internal", "internal error"))));
              },
            );
          },
        );
  let metricsUrl: string | undefined;

  for (const facility of all) await facility.start?.();
  await limitExchange.start();
  const housekeeping = createHousekeeping(
    [
      ...all.flatMap((f) => f.housekeeping?.() ?? []),
      idempotency.housekeeping(),
      reservationSweepTask(deps.quotas),
      sessionSweepTask(sessions),
      requestCountsPrune(requestCounts),
    ],
    { logger, health: database.health },
  );
  housekeeping.start();
  requestCounts.start();

  // The routes take over the port (from its starting gate) once fastify is ready.
  await fastify.ready();

  let closed = false;
  return {
    fastify,
    deps,
    authenticator,
    housekeeping,
    requestCounts,
    facilities: all,
    get metricsUrl() {
      return metricsUrl;
    },
    limitExchange,
    async listen() {
      const url = await listener.listen(config.port, config.host);
      if (metricsServer && !metricsServer.listening) {
        await new Promise<void>((resolve, reject) => {
          metricsServer.once("error", reject);
          metricsServer.listen({ port: config.metrics.port, host: config.host }, () => {
            metricsServer.off("error", reject);
            resolve();
          });
        });
        const address = metricsServer.address();
        const port = typeof address === "object" && address ? address.port : config.metrics.port;
        metricsUrl = `http://${config.host.includes(":") ? `[${config.host}]` : config.host}:${port}`;
      }
      return url;
    },
    async reloadTls() {
      if (!config.tls || !listener.server.setTls) return;
      try {
        const next = await readTls(config);
        listener.server.setTls(next!);
        logger.info({ certFile: config.tls.certFile }, "TLS certificate reloaded");
      } catch (err) {
        logger.error(
          { certFile: config.tls.certFile, reason: err instanceof Error ? err.message : String(err) },
          "TLS certificate not reloaded; serving the one loaded before",
        );
      }
    },
    async close() {
      if (closed) return;
      closed = true;
      shutdown.abort(new PlatformError("internal", "server shutting down"));
      await housekeeping.stop();
      if (metricsServer?.listening) {
        metricsServer.closeAllConnections();
        await new Promise((resolve) => metricsServer.close(resolve));
      }
      await fastify.close();
      await requestCounts.close();
      await limitExchange.close();
      fairShare?.stop();
      for (const facility of all.slice().reverse()) await facility.close?.();
      await unlistenAuth();
      if (ownsDatabase) await database.close();
      await tracing?.shutdown();
    },
  };
}
