/**
 * The gauges of /metrics that say whether this instance can serve and how
 * close it is to a limit, for the alerts of deploy/prometheus/alerts.yaml:
 *
 * - `platform_ready` and `platform_dependency_ready{dependency}`: the checks of
 *   `/ready`, run when /metrics is scraped (at most once per
 *   `OPERATIONAL_GAUGES_EVERY_MS`), so an instance a load balancer took out of
 *   rotation still says why;
 * - `database_pool_*{pool}`: how many connections of each PostgreSQL pool are
 *   open, in use and waited for, read from `pg`'s own counts (nothing on PGlite);
 * - `quota_cap_used_ratio{counter}` and `quota_apps_near_cap{counter}`: the
 *   highest share of a daily cap any app used today, and how many apps used at
 *   least `NEAR_CAP_SHARE` of theirs (one index probe per app when scraped).
 *
 * - `app_quota_cap_used_ratio{app,counter}`: each app's share of a daily cap
 *   used today, from the same read, for the top `METRICS_APPS_TOP` apps per
 *   counter, the largest of the others in `app="_other"` (`foldTopApps`).
 *
 * Labels are bounded: pool names, dependency names, the four counters, and
 * at most `METRICS_APPS_TOP + 1` apps.
 */
import type { Database } from "./database/index.ts";
import { atMostEvery, foldTopApps, type Metrics } from "./metrics.ts";
import { CAP_LIMITS, type QuotaCounter, type Quotas } from "./quotas/index.ts";
import type { ReadinessReport } from "./readiness.ts";

/** Scrapes closer together than this share one run of the checks and one read of the quotas. */
const OPERATIONAL_GAUGES_EVERY_MS = 10_000;
/** The share of a daily cap from which an app counts as near it. */
const NEAR_CAP_SHARE = 0.8;

export interface OperationalGaugeSources {
  metrics: Metrics;
  quotas: Quotas;
  /** The checks of `/ready`. */
  readiness: () => Promise<ReadinessReport>;
  /** `METRICS_APPS_TOP`: apps with their own series per counter. */
  appsTop: number;
}

/**
 * The pool gauges. Registered before any gauge that queries the database when scraped: a scrape
 * reads the gauges in the order they were registered, so the pools are read before the scrape's own
 * statements borrow connections from them.
 */
export function registerPoolGauges(metrics: Metrics, database: Database): void {
  metrics.gauge("database_pool_max_connections", "Connections a PostgreSQL pool may open.", ["pool"], (g) => {
    for (const p of database.pools()) g.set({ pool: p.pool }, p.max);
  });
  metrics.gauge(
    "database_pool_connections",
    "Connections a PostgreSQL pool has open, by state (busy: lent to a statement).",
    ["pool", "state"],
    (g) => {
      for (const p of database.pools()) {
        g.set({ pool: p.pool, state: "busy" }, p.open - p.idle);
        g.set({ pool: p.pool, state: "idle" }, p.idle);
      }
    },
  );
  metrics.gauge(
    "database_pool_waiting_requests",
    "Requests waiting for a connection of a PostgreSQL pool (every connection busy, or one being made).",
    ["pool"],
    (g) => {
      for (const p of database.pools()) g.set({ pool: p.pool }, p.waiting);
    },
  );
}

/** The readiness and quota gauges (see the file's comment). */
export function registerOperationalGauges({ metrics, quotas, readiness, appsTop }: OperationalGaugeSources): void {
  const report = atMostEvery(OPERATIONAL_GAUGES_EVERY_MS, readiness);
  metrics.gauge("platform_ready", "1 when /ready would answer 200 (every dependency answers), else 0.", [], async (g) =>
    g.set((await report()).ready ? 1 : 0),
  );
  metrics.gauge(
    "platform_dependency_ready",
    "1 when the dependency answers /ready's check, else 0.",
    ["dependency"],
    async (g) => {
      const { checks } = await report();
      g.reset();
      for (const [dependency, state] of Object.entries(checks)) g.set({ dependency }, state === "ok" ? 1 : 0);
    },
  );

  const shares = atMostEvery(OPERATIONAL_GAUGES_EVERY_MS, async () => {
    const byCounter = new Map<QuotaCounter, { app: string; value: number }[]>(
      (Object.keys(CAP_LIMITS) as QuotaCounter[]).map((c) => [c, []]),
    );
    for (const { app, counter, share } of await quotas.capSharesToday())
      byCounter.get(counter)?.push({ app, value: share });
    return byCounter;
  });
  metrics.gauge(
    "quota_cap_used_ratio",
    "The highest share of its daily cap (UTC day) any app has used today, by counter; 1 = reached.",
    ["counter"],
    async (g) => {
      for (const [counter, list] of await shares()) g.set({ counter }, Math.max(0, ...list.map((s) => s.value)));
    },
  );
  metrics.gauge(
    "quota_apps_near_cap",
    `Apps that have used at least ${NEAR_CAP_SHARE * 100} % of a daily cap today, by counter.`,
    ["counter"],
    async (g) => {
      for (const [counter, list] of await shares()) {
        g.set({ counter }, list.filter((s) => s.value >= NEAR_CAP_SHARE).length);
      }
    },
  );
  metrics.gauge(
    "app_quota_cap_used_ratio",
    'The share of its daily cap (UTC day) an app has used today, by counter; 1 = reached. The top METRICS_APPS_TOP apps per counter, the largest of the rest in app="_other".',
    ["app", "counter"],
    async (g) => {
      const byCounter = await shares();
      g.reset();
      for (const [counter, list] of byCounter) {
        for (const { app, value } of foldTopApps(list, appsTop, "max")) g.set({ app, counter }, value);
      }
    },
  );
}
