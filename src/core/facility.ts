/**
 * What a facility is to the server: one Connect service implemented once
 * (`impl`), the table of its `/v1` REST routes (docs/api.md) mapped onto that implementation
 * (`routes`), and optional start/close hooks. The composition root
 * (`src/platform-server.ts`, `src/facilities.ts`) builds every facility from the shared
 * `Deps`, and hands a facility the public API of another only through its
 * factory's arguments, never its internals.
 */
import type { DescService } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import type { FastifyInstance } from "fastify";
import type { Logger } from "pino";
import type { Config } from "./config.ts";
import type { Database, Db } from "./database/index.ts";
import type { Quotas } from "./quotas/index.ts";
import type { Metrics } from "./metrics.ts";
import type { AnyRestRoute } from "./http/rest-router.ts";
import type { ReadinessCheck } from "./readiness.ts";
import type { HousekeepingTask } from "./housekeeping.ts";
import type { AppStore } from "./apps/app-store.ts";
import type { Tracing } from "./tracing.ts";

export interface Deps {
  readonly config: Config;
  readonly database: Database;
  readonly db: Db;
  readonly quotas: Quotas;
  /** The apps and tokens SQL (`apps/app-store.ts`), built once for everyone. */
  readonly apps: AppStore;
  readonly logger: Logger;
  readonly metrics: Metrics;
  /** Aborted when the server starts shutting down: long-polls end at once. */
  readonly shutdownSignal: AbortSignal;
  /** Traces, when `OTEL_EXPORTER_OTLP_ENDPOINT` is set; undefined otherwise (then nothing is traced). */
  readonly tracing?: Tracing;
}

export interface Facility<S extends DescService = DescService> {
  readonly service: S;
  readonly impl: ServiceImpl<S>;
  /** The `/v1` routes (docs/api.md), each calling `impl` (see `http/rest-router.ts`). */
  readonly routes?: readonly AnyRestRoute[];
  /** Routes outside `/v1` and outside Connect (e.g. web pages). */
  registerRoutes?(fastify: FastifyInstance): void;
  start?(): Promise<void>;
  close?(): Promise<void>;
  /** Its periodic jobs (retention, expired rows), run by the one scheduler of `housekeeping.ts`. */
  housekeeping?(): HousekeepingTask[];
  /** What `/ready` asks of this facility beyond the platform database (its store or provider), by name. */
  readiness?(): Record<string, ReadinessCheck>;
}
