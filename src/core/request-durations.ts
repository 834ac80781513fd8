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
 * numbers and one bucket. A scrape gets the same series, in the same text, as
 * prom-client's histogram writes (test/core/http-request-metrics.test.ts).
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

export class RequestDurations {
  readonly type = "histogram";
  readonly aggregator = "sum";
  readonly name: string;
  readonly help: string;
  readonly #bounds: readonly number[];
  /** route template -> method -> status -> tally. */
  #tallies = new Map<string, Map<string, Map<number, Tally>>>();

  constructor(options: { name: string; help: string; buckets: readonly number[] }) {
    this.name = options.name;
    this.help = options.help;
    this.#bounds = [...options.buckets].sort((a, b) => a - b);
  }

  /** One answered request (the hot path: no labels object to make). */
  observeRequest(method: string, route: string, status: number, seconds: number): void {
    if (!Number.isFinite(seconds)) throw new TypeError(`Value is not a valid number: ${seconds}`);
    let byMethod = this.#tallies.get(route);
    if (byMethod === undefined) this.#tallies.set(route, (byMethod = new Map<string, Map<number, Tally>>()));
    let byStatus = byMethod.get(method);
    if (byStatus === undefined) byMethod.set(method, (byStatus = new Map<number, Tally>()));
    let tally = byStatus.get(status);
    if (tally === undefined) {
      tally = {
        labels: { method, route, status: String(status) },
        buckets: new Float64Array(this.#bounds.length + 1),
        sum: 0,
        count: 0,
      };
      byStatus.set(status, tally);
    }
    const bounds = this.#bounds;
    let i = 0;
    while (i < bounds.length && seconds > bounds[i]) i++;
    tally.buckets[i]++;
    tally.sum += seconds;
    tally.count++;
  }

  /** prom-client's `observe(labels, value)`, for callers that have the labels as an object. */
  observe(labels: Record<Label, string>, seconds: number): void {
    this.observeRequest(labels.method, labels.route, Number(labels.status), seconds);
  }

  /** The series as prom-client's histogram gives them: each label set's buckets (cumulative), `+Inf`, sum, count. */
  get(): Promise<client.MetricObjectWithValues<Value>> {
    const values: Value[] = [];
    const bucket = `${this.name}_bucket`;
    for (const byMethod of this.#tallies.values())
      for (const byStatus of byMethod.values())
        for (const tally of byStatus.values()) {
          let acc = 0;
          for (let i = 0; i < this.#bounds.length; i++) {
            acc += tally.buckets[i];
            values.push({ labels: { le: this.#bounds[i], ...tally.labels }, value: acc, metricName: bucket });
          }
          values.push(
            { labels: { le: "+Inf", ...tally.labels }, value: tally.count, metricName: bucket },
            { labels: { ...tally.labels }, value: tally.sum, metricName: `${this.name}_sum` },
            { labels: { ...tally.labels }, value: tally.count, metricName: `${this.name}_count` },
          );
        }
    // prom-client's registry reads `type` as the text it writes (its typings call it a numeric enum).
    const metric = { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator };
    return Promise.resolve(metric as unknown as client.MetricObjectWithValues<Value>);
  }

  reset(): void {
    this.#tallies = new Map();
  }
}
