/**
 * `http_request_duration_seconds`: the histogram every answered request is
 * observed in, counted in plain numbers and read by prom-client when
 * `/metrics` is scraped.
 *
 * Why not prom-client's `Histogram`: its `observe` builds, per call, a
 * closure, a copy of the labels, a key string from them, and checks every
 * label name; about a microsecond and several objects on every request, which
 * on a light call is a percent of all its work. Here a request finds its
 * tally through three maps (route template, method, status) and adds to two
 * numbers and one bucket. A scrape gets the same lines as prom-client's histogram writes (grouped
 * by route rather than in the order first seen, which Prometheus does not
 * read; test/core/http-request-metrics.test.ts).
 */
import type client from "prom-client";

type Label = "method" | "route" | "status";
type Value = client.MetricValueWithName<Label | "le">;

interface Tally {
  labels: Record<Label, string>;
  /** Observations per bucket (not cumulative), the last one past every bound (`+Inf` only). */
  buckets: Float64Array;
  sum: number;
  count: number;
}

/** A histogram prom-client's registry reads as its own (`registerMetric`): the same fields and methods. */
export interface RequestDurations {
  readonly name: string;
  readonly help: string;
  readonly type: "histogram";
  readonly aggregator: "sum";
  /** One answered request (the hot path: no labels object to make). */
  observeRequest(method: string, route: string, status: number, seconds: number): void;
  /** prom-client's `observe(labels, value)`, for callers that have the labels as an object. */
  observe(labels: Record<Label, string>, seconds: number): void;
  /** The series as prom-client's histogram gives them: each label set's buckets (cumulative), `+Inf`, sum, count. */
  get(): Promise<client.MetricObjectWithValues<Value>>;
  /** Forgets every series (prom-client's `registry.resetMetrics()`). */
  reset(): void;
}

export function createRequestDurations(options: {
  name: string;
  help: string;
  buckets: readonly number[];
}): RequestDurations {
  const { name, help } = options;
  const bounds = [...options.buckets].sort((a, b) => a - b);
  /** route template -> method -> status -> tally. */
  let tallies = new Map<string, Map<string, Map<number, Tally>>>();

  const observeRequest = (method: string, route: string, status: number, seconds: number): void => {
    if (!Number.isFinite(seconds)) throw new TypeError(`Value is not a valid number: ${seconds}`);
    let byMethod = tallies.get(route);
    if (byMethod === undefined) tallies.set(route, (byMethod = new Map<string, Map<number, Tally>>()));
    let byStatus = byMethod.get(method);
    if (byStatus === undefined) byMethod.set(method, (byStatus = new Map<number, Tally>()));
    let tally = byStatus.get(status);
    if (tally === undefined) {
      tally = {
        labels: { method, route, status: String(status) },
        buckets: new Float64Array(bounds.length + 1),
        sum: 0,
        count: 0,
      };
      byStatus.set(status, tally);
    }
    let i = 0;
    while (i < bounds.length && seconds > bounds[i]) i++;
    tally.buckets[i]++;
    tally.sum += seconds;
    tally.count++;
  };

  return {
    name,
    help,
    type: "histogram",
    aggregator: "sum",
    observeRequest,
    observe(labels, seconds) {
      observeRequest(labels.method, labels.route, Number(labels.status), seconds);
    },
    get() {
      const values: Value[] = [];
      const bucket = `${name}_bucket`;
      for (const byMethod of tallies.values())
        for (const byStatus of byMethod.values())
          for (const tally of byStatus.values()) {
            let acc = 0;
            for (let i = 0; i < bounds.length; i++) {
              acc += tally.buckets[i];
              values.push({ labels: { le: bounds[i], ...tally.labels }, value: acc, metricName: bucket });
            }
            values.push(
              { labels: { le: "+Inf", ...tally.labels }, value: tally.count, metricName: bucket },
              { labels: { ...tally.labels }, value: tally.sum, metricName: `${name}_sum` },
              { labels: { ...tally.labels }, value: tally.count, metricName: `${name}_count` },
            );
          }
      // prom-client's registry reads `type` as the text it writes (its typings call it a numeric enum).
      const metric = { name, help, type: "histogram", values, aggregator: "sum" };
      return Promise.resolve(metric as unknown as client.MetricObjectWithValues<Value>);
    },
    reset() {
      tallies = new Map();
    },
  };
}
