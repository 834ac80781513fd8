/**
 * The analytics facility (SPEC.md "Analytics"): wires its stores (event types
 * always in the platform database; events in SQL or MongoDB), its one
 * implementation and its REST routes.
 */
import { AnalyticsService } from "../../gen/platform/analytics/v1/analytics_pb.js";
import type { Deps, Facility } from "../core/facility.ts";
import { analyticsRoutes } from "./analytics-routes.ts";
import { createAnalyticsService } from "./analytics-service.ts";
import type { EventStore } from "./event-store.ts";
import { createEventTypeStore } from "./event-type-store.ts";
import { createMongoEventStore } from "./mongo-event-store.ts";
import { createSqlEventStore } from "./sql-event-store.ts";

export interface AnalyticsFacilityOptions {
  /** Overrides the store chosen from the configuration (tests). */
  store?: EventStore;
}

/** The store of the configuration: MongoDB when MONGODB_URL is set, else the platform database. */
export function createEventStore(deps: Deps): EventStore {
  const { config } = deps;
  return config.mongodbUrl
    ? createMongoEventStore({ url: config.mongodbUrl, dbName: config.mongodbDb })
    : createSqlEventStore(deps.db);
}

export function createAnalyticsFacility(deps: Deps, options: AnalyticsFacilityOptions = {}): Facility<typeof AnalyticsService> {
  const logger = deps.logger.child({ facility: "analytics" });
  const store = options.store ?? createEventStore(deps);
  logger.info({ store: store.kind }, "analytics events store");
  return {
    service: AnalyticsService,
    impl: createAnalyticsService({ types: createEventTypeStore(deps.db), store, quotas: deps.quotas, logger, metrics: deps.metrics }),
    routes: analyticsRoutes,
    async close() {
      await store.close();
    },
  };
}
