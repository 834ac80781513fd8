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
 * Labels are bounded: pool names, dependency names and the four counters.
 */
import type { Database } from "./database/index.ts";
import { atMostEvery, type Metrics } from "./metrics.ts";
import { CAP_LIMITS, type QuotaCounter, type Quotas } from "./quotas/index.ts";
import type { ReadinessReport } from "./readiness.ts";

/** Scrapes closer together than this share one run of the checks and one read of the quotas. */
export const OPERATIONAL_GAUGES_EVERY_MS = 10_000;
/** The share of a daily cap from which an app counts as near it. */
export const NEAR_CAP_SHARE = 0.8;

export interface OperationalGaugeSources {
  metrics: Metrics;
  quotas: Quotas;
  /** The checks of `/ready`. */
  readiness: () => Promise<ReadinessReport>;
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
export function registerOperationalGauges({ metrics, quotas, readiness }: OperationalGaugeSources): void {
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
    const byCounter = new Map<QuotaCounter, number[]>((Object.keys(CAP_LIMITS) as QuotaCounter[]).map((c) => [c, []]));
    for (const { counter, share } of await quotas.capSharesToday()) byCounter.get(counter)?.push(share);
    return byCounter;
  });
  metrics.gauge(
    "quota_cap_used_ratio",
    "The highest share of its daily cap (UTC day) any app has used today, by counter; 1 = reached.",
    ["counter"],
    async (g) => {
      for (const [counter, list] of await shares()) g.set({ counter }, Math.max(0, ...list));
    },
  );
  metrics.gauge(
    "quota_apps_near_cap",
    `Apps that have used at least ${NEAR_CAP_SHARE * 100} % of a daily cap today, by counter.`,
    ["counter"],
    async (g) => {
      for (const [counter, list] of await shares()) g.set({ counter }, list.filter((s) => s >= NEAR_CAP_SHARE).length);
    },
  );
}
