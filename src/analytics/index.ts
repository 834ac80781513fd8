/**
 * The analytics facility (docs/analytics.md): wires its stores (event types
 * always in the platform database; events in SQL or MongoDB), its one
 * implementation and its REST routes.
 */
import { AnalyticsService } from "../../gen/platform/analytics/v1/analytics_pb.js";
import type { Deps, Facility } from "../core/facility.ts";
import { analyticsRoutes } from "./analytics-routes.ts";
import { createAnalyticsService } from "./analytics-service.ts";
import type { EventStore } from "./event-store.ts";
import { createEventTypeStore } from "./event-type-store.ts";
import { createSqlEventStore, POSTGRES_ROLLUP_SLOTS } from "./sql-event-store.ts";
import { readinessOf } from "../core/readiness.ts";
import { orphanSweepTask, retentionTask } from "../core/housekeeping.ts";

/** The analytics facility's operations for the admin API. */
export interface AnalyticsOperations {
  /**
   * Deletes every analytics event of a deleted app that its store keeps outside the platform database's
   * cascade (MongoDB), after the app's row went.
   */
  deleteAppData(appId: string): Promise<void>;
}

export interface AnalyticsFacility extends Facility<typeof AnalyticsService> {
  readonly operations: AnalyticsOperations;
}

export interface AnalyticsFacilityOptions {
  /** Overrides the store chosen from the configuration (tests). */
  store?: EventStore;
}

/**
 * The store of the configuration: MongoDB when MONGODB_URL is set, else the
 * platform database. The MongoDB module (and its driver) is loaded only when configured.
 */
async function createEventStore(deps: Deps): Promise<EventStore> {
  const { config } = deps;
  if (!config.mongodbUrl)
    return createSqlEventStore(deps.db, { slots: deps.database.kind === "postgres" ? POSTGRES_ROLLUP_SLOTS : 1 });
  const { createMongoEventStore } = await import("./mongo-event-store.ts");
  return createMongoEventStore({ url: config.mongodbUrl, dbName: config.mongodbDb });
}

export async function createAnalyticsFacility(
  deps: Deps,
  options: AnalyticsFacilityOptions = {},
): Promise<AnalyticsFacility> {
  const logger = deps.logger.child({ facility: "analytics" });
  const store = options.store ?? (await createEventStore(deps));
  const apps = deps.apps;
  logger.info({ store: store.kind }, "analytics events store");
  return {
    service: AnalyticsService,
    impl: createAnalyticsService({
      types: createEventTypeStore(deps.db),
      store,
      quotas: deps.quotas,
      logger,
      metrics: deps.metrics,
      // PGlite runs one statement at a time: a batch at a time, in turn.
      ingestConcurrency: deps.database.kind === "pglite" ? 1 : 4,
    }),
    routes: analyticsRoutes,
    readiness: () => readinessOf("analytics", store.ping?.bind(store)),
    operations: { deleteAppData: async (appId) => void (await store.deleteApp(appId)) },
    housekeeping: () => [
      retentionTask("analytics retention", apps, (appId, before, batch) => store.deleteBefore(appId, before, batch)),
      ...(store.appIds
        ? [
            orphanSweepTask(
              "analytics of deleted apps",
              () => store.appIds!(),
              apps,
              (appId) => store.deleteApp(appId),
            ),
          ]
        : []),
    ],
    async close() {
      await store.close();
    },
  };
}
