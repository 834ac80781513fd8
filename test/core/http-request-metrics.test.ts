/**
 * The HTTP metrics (src/core/metrics.ts): `http_requests_total` is read from
 * the duration histogram's counts, so a request updates one metric; scraped,
 * it must still count each label set's requests exactly, scrape after scrape.
 */
import client from "prom-client";
import { describe, expect, it } from "vitest";
import { createMetrics } from "../../src/core/metrics.ts";

/** The HTTP metrics' lines of a scrape (the process's own metrics move between scrapes). */
const httpLines = (text: string) => text.split("\n").filter((l) => l.startsWith("http_"));
const line = (text: string, labels: string) =>
  text.split("\n").find((l) => l.startsWith(`http_requests_total{${labels}} `));

describe("http_requests_total", () => {
  it("counts the requests of each method, route and status, as the histogram observed them", async () => {
    const metrics = createMetrics();
    const text0 = await metrics.registry.metrics();
    expect(text0).toContain("# TYPE http_requests_total counter");
    expect(line(text0, 'method="GET",route="/v1/queues",status="200"')).toBeUndefined();

    const ok = { method: "GET", route: "/v1/queues", status: "200" };
    const refused = { method: "POST", route: "/v1/queues/:queue", status: "429" };
    for (let i = 0; i < 3; i++) metrics.httpDuration.observe(ok, 0.002);
    metrics.httpDuration.observe(refused, 0.5);
    const text1 = await metrics.registry.metrics();
    expect(line(text1, 'method="GET",route="/v1/queues",status="200"')).toBe(
      'http_requests_total{method="GET",route="/v1/queues",status="200"} 3',
    );
    expect(line(text1, 'method="POST",route="/v1/queues/:queue",status="429"')).toBe(
      'http_requests_total{method="POST",route="/v1/queues/:queue",status="429"} 1',
    );
    // A second scrape with nothing new says the same; new requests add to it.
    expect(httpLines(await metrics.registry.metrics())).toEqual(httpLines(text1));
    metrics.httpDuration.observe(ok, 0.02);
    const text2 = await metrics.registry.metrics();
    expect(line(text2, 'method="GET",route="/v1/queues",status="200"')).toBe(
      'http_requests_total{method="GET",route="/v1/queues",status="200"} 4',
    );
    expect(text2).toMatch(/^http_request_duration_seconds_count\{method="GET",route="\/v1\/queues",status="200"\} 4$/m);
    const values = (await metrics.httpRequests.get()).values;
    expect(values.reduce((n, v) => n + v.value, 0)).toBe(5);
  });

  it("writes http_request_duration_seconds as prom-client's own histogram writes the same observations", async () => {
    const metrics = createMetrics();
    const theirs = new client.Registry();
    const histogram = new client.Histogram({
      name: "http_request_duration_seconds",
      help: "Time to answer a request, by route template and status.",
      labelNames: ["method", "route", "status"] as const,
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers: [theirs],
    });
    // On a bound, between bounds, past the last one (only +Inf), several label sets and methods.
    const observations: [string, string, number, number][] = [
      ["GET", "/v1/queues", 200, 0.0025],
      ["GET", "/v1/queues", 200, 0.0004],
      ["GET", "/v1/queues", 503, 31],
      ["POST", "/v1/queues/:queue", 201, 0.07],
      ["GET", "/v1/queues", 200, 1.5],
      ["GET", "unmatched", 404, 0],
    ];
    for (const [method, route, status, seconds] of observations) {
      metrics.httpDuration.observeRequest(method, route, status, seconds);
      histogram.observe({ method, route, status: String(status) }, seconds);
    }
    const ours = await metrics.registry.getSingleMetricAsString("http_request_duration_seconds");
    const expected = await theirs.getSingleMetricAsString("http_request_duration_seconds");
    expect(ours.split("\n").sort()).toEqual(expected.split("\n").sort());
    expect(ours).toContain(
      'http_request_duration_seconds_bucket{le="+Inf",method="GET",route="/v1/queues",status="503"} 1',
    );
    expect(() => metrics.httpDuration.observeRequest("GET", "/v1/queues", 200, Number.NaN)).toThrow(TypeError);
  });

  it("forgets every series at the registry's reset, as prom-client's histogram does, and counts anew after it", async () => {
    const metrics = createMetrics();
    metrics.httpDuration.observeRequest("GET", "/v1/queues", 200, 0.002);
    expect(await metrics.registry.getSingleMetricAsString("http_request_duration_seconds")).toContain(
      'http_request_duration_seconds_count{method="GET",route="/v1/queues",status="200"} 1',
    );
    metrics.registry.resetMetrics();
    const reset = await metrics.registry.getSingleMetricAsString("http_request_duration_seconds");
    expect(reset.split("\n").filter((l) => !l.startsWith("#") && l !== "")).toEqual([]);
    metrics.httpDuration.observeRequest("GET", "/v1/queues", 200, 0.5);
    expect(await metrics.registry.getSingleMetricAsString("http_request_duration_seconds")).toContain(
      'http_request_duration_seconds_count{method="GET",route="/v1/queues",status="200"} 1',
    );
  });
});
