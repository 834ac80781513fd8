/**
 * Prometheus metrics (`GET /metrics`). One registry per server, so tests and
 * several servers in one process never share counters.
 */
import client from "prom-client";

export interface Metrics {
  readonly registry: client.Registry;
  readonly httpRequests: client.Counter<"method" | "route" | "status">;
  readonly httpDuration: client.Histogram<"method" | "route" | "status">;
  counter<L extends string>(name: string, help: string, labelNames: readonly L[]): client.Counter<L>;
  /** A gauge; with `collect`, set by it at each scrape (a value read from elsewhere, e.g. a pool's counts). */
  gauge<L extends string>(
    name: string,
    help: string,
    labelNames: readonly L[],
    collect?: (gauge: client.Gauge<L>) => void,
  ): client.Gauge<L>;
}

export function createMetrics(): Metrics {
  const registry = new client.Registry();
  client.collectDefaultMetrics({ register: registry });
  const httpRequests = new client.Counter({
    name: "http_requests_total",
    help: "Requests answered, by route template and status.",
    labelNames: ["method", "route", "status"] as const,
    registers: [registry],
  });
  const httpDuration = new client.Histogram({
    name: "http_request_duration_seconds",
    help: "Time to answer a request, by route template and status.",
    labelNames: ["method", "route", "status"] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [registry],
  });
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
        ...(collect
          ? {
              collect(this: client.Gauge<(typeof labelNames)[number]>) {
                collect(this);
              },
            }
          : {}),
      });
    },
  };
}
