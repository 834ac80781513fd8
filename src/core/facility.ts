/**
 * What a facility is to the server: one Connect service implemented once,
 * the SPEC.md REST routes mapped onto that implementation, and optional
 * start/close hooks. The composition root (`src/server.ts`) builds every
 * facility from the shared `Deps`, and hands a facility the public API of
 * another only through its factory's arguments, never its internals.
 */
import type { DescService } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import type { FastifyInstance } from "fastify";
import type { Logger } from "pino";
import type { Config } from "./config.ts";
import type { Database, Db } from "./database/database.ts";
import type { Quotas } from "./quotas/quotas.ts";
import type { Metrics } from "./metrics.ts";
import type { RestRouter } from "./http/rest-router.ts";

export interface Deps {
  readonly config: Config;
  readonly database: Database;
  readonly db: Db;
  readonly quotas: Quotas;
  readonly logger: Logger;
  readonly metrics: Metrics;
  /** Aborted when the server starts shutting down: long-polls end at once. */
  readonly shutdownSignal: AbortSignal;
}

export interface Facility<S extends DescService = DescService> {
  readonly service: S;
  readonly impl: ServiceImpl<S>;
  /** Registers the SPEC.md `/v1` routes, each calling `impl`. */
  restRoutes?(rest: RestRouter): void;
  /** Routes outside `/v1` and outside Connect (e.g. web pages). */
  registerRoutes?(fastify: FastifyInstance): void;
  start?(): Promise<void>;
  close?(): Promise<void>;
}

/**
 * The public API of the queues facility that others use to put a platform
 * event `{ kind, at, data }` on an app's reserved `_events` queue (for
 * example `secret.set`). Never refused for depth: the oldest is dropped.
 */
export interface PlatformEvents {
  publish(appId: string, kind: string, data: import("@bufbuild/protobuf").JsonValue): Promise<{ id: string }>;
}
