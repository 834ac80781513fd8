/**
 * Prometheus metrics (`GET /metrics`). One registry per server, so tests and
 * several servers in one process never share counters.
 */
import client from "prom-client";
import { createRequestDurations, type RequestDurations } from "./request-durations.ts";

export interface Metrics {
  readonly registry: client.Registry;
  /** Read only: its figures are the duration histogram's counts (see `createMetrics`). */
  readonly httpRequests: Pick<client.Counter<"method" | "route" | "status">, "get">;
  /** Observed once per answered request; `http_requests_total` follows from it. */
  readonly httpDuration: RequestDurations;
  counter<L extends string>(name: string, help: string, labelNames: readonly L[]): client.Counter<L>;
  /**
   * A gauge; with `collect`, one whose value is read when /metrics is scraped (a figure kept
   * elsewhere, such as the database's, costs the requests nothing). A read that fails or takes
   * over `COLLECT_TIMEOUT_MS` leaves the gauge without a figure (`reset`), and /metrics still
   * answers.
   */
  gauge<L extends string>(
    name: string,
    help: string,
    labelNames: readonly L[],
    collect?: (gauge: client.Gauge<L>) => Promise<void> | void,
  ): client.Gauge<L>;
}

/** How long a gauge read at scrape time may take before it is left empty for this scrape. */
export const COLLECT_TIMEOUT_MS = 2000;

/**
 * `load`, run at most once per `ms`: calls within that time (scrapes by several Prometheus
 * servers, several gauges fed by one query) share the last result or the run under way.
 */
export function atMostEvery<T>(ms: number, load: () => Promise<T>): () => Promise<T> {
  let last: { at: number; value: Promise<T> } | undefined;
  return () => {
    if (last && Date.now() - last.at < ms) return last.value;
    const value = load();
    last = { at: Date.now(), value };
    // A failure is not kept: the next scrape tries again.
    value.catch(() => {
      if (last?.value === value) last = undefined;
    });
    return value;
  };
}

/**
 * The `app` label of the series that stands for every app outside the top ones. App names start with a
 * letter (`NAME_PATTERN`), so no app can be named this.
 */
export const OTHER_APPS = "_other";

/**
 * The bound of the per-app series: the `top` apps with the largest values (ties by name) keep their own
 * series, and the rest are folded into one `OTHER_APPS` series (their sum for an amount, their largest for
 * an age or a share), present only when some app was folded. So a metric has at most `top + 1` series
 * whatever the number of apps; apps with a zero value get none.
 */
export function foldTopApps(
  values: Iterable<{ app: string; value: number }>,
  top: number,
  fold: "sum" | "max",
): { app: string; value: number }[] {
  const sorted = [...values].filter((v) => v.value > 0).sort((a, b) => b.value - a.value || (a.app < b.app ? -1 : 1));
  const kept = sorted.slice(0, top);
  const rest = sorted.slice(top);
  if (rest.length === 0) return kept;
  const value = fold === "sum" ? rest.reduce((n, v) => n + v.value, 0) : rest[0].value;
  return [...kept, { app: OTHER_APPS, value }];
}

export function createMetrics(): Metrics {
  const registry = new client.Registry();
  client.collectDefaultMetrics({ register: registry });
  // Every answered request is one observation of the histogram, so each label set's count there is its
  // number of requests: the counter takes it when read (a scrape), and a request updates one metric, not
  // two (each update builds a key from its labels and checks them, on every request).
  const httpRequests = new client.Counter({
    name: "http_requests_total",
    help: "Requests answered, by route template and status.",
    labelNames: ["method", "route", "status"] as const,
    registers: [registry],
    async collect(this: client.Counter<"method" | "route" | "status">) {
      const { values } = await httpDuration.get();
      this.reset();
      for (const v of values)
        if (v.metricName === "http_request_duration_seconds_count")
          this.inc(v.labels as Partial<Record<"method" | "route" | "status", string>>, v.value);
    },
  });
  // Counted in plain numbers, read at a scrape (`request-durations.ts`): prom-client's own histogram costs
  // every request about a microsecond.
  const httpDuration = createRequestDurations({
    name: "http_request_duration_seconds",
    help: "Time to answer a request, by route template and status.",
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
  });
  registry.registerMetric(httpDuration as unknown as client.Metric);
  return {
    registry,
    httpRequests,
    httpDuration,
    counter(name, help, labelNames) {
      return new client.Counter({ name, help, labelNames, registers: [registry] });
    },
    gauge(name, help, labelNames, collect) {
      return new client.Gauge({
        name,
        help,
        labelNames,
        registers: [registry],
        ...(collect && {
          async collect(this: client.Gauge) {
            // A database that does not answer must not hold /metrics past a scraper's timeout.
            let timer: NodeJS.Timeout | undefined;
            const late = new Promise<never>((_, reject) => {
              timer = setTimeout(() => reject(new Error("no answer")), COLLECT_TIMEOUT_MS);
            });
            try {
              await Promise.race([collect(this), late]);
            } catch {
              this.reset();
            } finally {
              clearTimeout(timer);
            }
          },
        }),
      });
    },
  };
}
