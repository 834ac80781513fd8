/**
 * The composition root: opens the database, builds the core (quotas, auth,
 * metrics) and every facility from the shared dependencies, and serves them
 * on one port, over REST (`/v1`), Connect, gRPC and gRPC-Web.
 */
import fs from "node:fs";
import type { FastifyInstance } from "fastify";
import { createContextValues, type ConnectRouter } from "@connectrpc/connect";
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
import { migrate, openDatabase, pingDatabase, type Database } from "./core/database/index.ts";
import { PlatformError, toEnvelope } from "./core/errors.ts";
import { checkReadiness, sharedReadiness, type ReadinessCheck } from "./core/readiness.ts";
import { createHousekeeping, type Housekeeping } from "./core/housekeeping.ts";
import type { Deps, Facility } from "./core/facility.ts";
import { BODY_LIMIT_BYTES, registerBodyParsers } from "./core/http/body-parsers.ts";
import { createConnectInterceptor } from "./core/http/connect-interceptor.ts";
import { registerConnectRoutes } from "./core/http/connect-routes.ts";
import { createIdempotency, idempotentImpl } from "./core/http/idempotency.ts";
import { createIdempotencyStore } from "./core/idempotency-store.ts";
import { createHttpServer } from "./core/http/http-server.ts";
import { registerApiDocs } from "./core/http/api-docs.ts";
import { createOpenApiDocument } from "./core/http/openapi.ts";
import { registerRestRoutes } from "./core/http/rest-router.ts";
import { createMetrics } from "./core/metrics.ts";
import { createQuotas } from "./core/quotas/index.ts";
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
import { createTokenUsageRecorder } from "./admin/index.ts";
import { createAppStore } from "./core/apps/app-store.ts";
import { registerDashboard } from "./dashboard/dashboard-routes.ts";

export { jsonDepth } from "./core/http/body-parsers.ts";

export interface ServerOptions {
  /** The configuration with its admin token and secrets key resolved (from the environment or DATA_DIR). */
  config: ResolvedConfig;
  logger: Logger;
  /** An open database to use instead of opening one from the config (tests). */
  database?: Database;
}

export interface PlatformServer {
  readonly fastify: FastifyInstance;
  readonly deps: Deps;
  readonly authenticator: Authenticator;
  /** The periodic jobs of every facility (`runAll` runs each once, now). */
  readonly housekeeping: Housekeeping;
  /** Every facility served (meta, admin, then the five of `facilities.ts`), e.g. to walk their route tables. */
  readonly facilities: readonly Facility[];
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
      log: logger,
      statementTimeoutMs: config.databaseTimeouts.statementMs,
      poolWaitMs: config.databaseTimeouts.poolWaitMs,
    }));
  try {
    await migrate(database.unboundedDb);
    await verifySharedKeys(database.db, { keyring: keyringFromConfig(config), adminToken: config.adminToken });
  } catch (err) {
    if (ownsDatabase) await database.close();
    throw err;
  }

  const shutdown = new AbortController();
  const metrics = createMetrics();
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
  };
  const authenticator = createAuthenticator({
    db: database.db,
    apps,
    adminToken: config.adminToken,
    onTokenLookedUp: createTokenUsageRecorder(apps, logger),
    onOperatorTokenLookedUp: createTokenUsageRecorder(createOperatorStore(database.db), logger),
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
  const readinessChecks = (): Record<string, ReadinessCheck> => {
    const checks: Record<string, ReadinessCheck> = { database: (signal) => pingDatabase(database.db, signal) };
    for (const facility of all) Object.assign(checks, facility.readiness?.());
    return checks;
  };
  const admin = createAdminFacility(deps, facilities.adminHooks, () => authenticator.invalidate(), {
    version: packageInfo.version,
    startedAt: new Date(),
    readiness: () => checkReadiness(readinessChecks()),
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

  const tls = config.tls
    ? { key: fs.readFileSync(config.tls.keyFile), cert: fs.readFileSync(config.tls.certFile) }
    : undefined;
  const fastify = createHttpServer({ logger, metrics, tls, timeouts: config.http, databaseHealth: database.health });

  // Connect first: its scope replaces every content-type parser, which it can
  // only do while the root still has the built-in ones.
  await registerConnectRoutes(fastify, {
    routes: (router: ConnectRouter) => {
      for (const { service, impl } of served) router.service(service, impl);
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
            const checks: Record<string, ReadinessCheck> = {
              database: (signal) => pingDatabase(database.db, signal),
            };
            for (const f of facility ? [facility] : all) Object.assign(checks, f.readiness?.());
            return (await checkReadiness(checks)).ready;
          },
          () => all.map((f) => f.service.typeName),
        ),
      );
    },
    services: served,
    interceptors: [createConnectInterceptor(authenticator, logger, database.health)],
    authenticate: (authorization, method) => authenticator.authenticate(authorization, method),
    readMaxBytes: BODY_LIMIT_BYTES,
    contextValues: (req, principal) => createContextValues().set(requestIdKey, req.id).set(headPrincipalKey, principal),
    shortPath: config.connectShortPath,
    metrics,
    corsOrigins: config.corsOrigins,
  });
  registerBodyParsers(fastify);

  for (const { facility, impl } of served) {
    if (facility.routes) registerRestRoutes(fastify, authenticator, impl, facility.routes);
    facility.registerRoutes?.(fastify);
  }
  const readiness = sharedReadiness(readinessChecks);
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
  fastify.get("/metrics", async (_req, reply) => {
    void reply.header("content-type", metrics.registry.contentType);
    return metrics.registry.metrics();
  });

  for (const facility of all) await facility.start?.();
  const housekeeping = createHousekeeping(
    [...all.flatMap((f) => f.housekeeping?.() ?? []), idempotency.housekeeping()],
    { logger, health: database.health },
  );
  housekeeping.start();

  let closed = false;
  return {
    fastify,
    deps,
    authenticator,
    housekeeping,
    facilities: all,
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
      await housekeeping.stop();
      await fastify.close();
      for (const facility of all.slice().reverse()) await facility.close?.();
      await unlistenAuth();
      if (ownsDatabase) await database.close();
    },
  };
}
