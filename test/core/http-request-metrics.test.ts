/**
 * The HTTP metrics (src/core/metrics.ts): `http_requests_total` is read from
 * the duration histogram's counts, so a request updates one metric; scraped,
 * it must still count each label set's requests exactly, scrape after scrape.
 */
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
});
