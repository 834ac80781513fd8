/**
 * Per-app rate and concurrency limits (docs/api.md#rate-limits): 429
 * `rate_limited` with `Retry-After` and the `RateLimit` / `RateLimit-Policy`
 * headers over REST, RESOURCE_EXHAUSTED with the `rate_limited` detail over
 * Connect and gRPC; events and queue messages count one each; consumes and
 * streams are bounded while they last. Before, no rate was limited at all.
 */
import { describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { AnalyticsService } from "../../gen/platform/analytics/v1/analytics_pb.js";
import { QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import { ErrorDetailSchema } from "../../gen/platform/meta/v1/error_pb.js";
import { DEFAULT_LIMITS } from "../../src/core/apps/apps.ts";
import { useTestServer, type TestApp } from "../support/harness.ts";

const t = useTestServer();

/** An app whose limits are the defaults but `limits`. */
async function appWith(limits: Record<string, number>): Promise<TestApp> {
  const app = await t.createApp();
  await t.admin.updateApp({ appId: app.id, limits });
  return app;
}

async function refusal(call: Promise<unknown>): Promise<ConnectError> {
  const err = await call.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ConnectError);
  return err as ConnectError;
}

describe("the admin API", () => {
  it("shows the rate and concurrency limits with their defaults, and changes them", async () => {
    const app = await t.createApp();
    const { app: got } = await t.admin.getApp({ appId: app.id });
    expect(got!.limits).toMatchObject({
      eventsPerSecond: DEFAULT_LIMITS.eventsPerSecond,
      eventsBurst: DEFAULT_LIMITS.eventsBurst,
      queuePutsPerSecond: DEFAULT_LIMITS.queuePutsPerSecond,
      queuePutsBurst: DEFAULT_LIMITS.queuePutsBurst,
      requestsPerSecond: DEFAULT_LIMITS.requestsPerSecond,
      requestsBurst: DEFAULT_LIMITS.requestsBurst,
      maxWaitingConsumes: DEFAULT_LIMITS.maxWaitingConsumes,
      maxOpenStreams: DEFAULT_LIMITS.maxOpenStreams,
      maxInFlightRequests: DEFAULT_LIMITS.maxInFlightRequests,
    });
    const { app: changed } = await t.admin.updateApp({ appId: app.id, limits: { requestsPerSecond: 7 } });
    expect(changed!.limits!.requestsPerSecond).toBe(7);
    expect(changed!.limits!.requestsBurst).toBe(DEFAULT_LIMITS.requestsBurst);
    const err = await refusal(t.admin.updateApp({ appId: app.id, limits: { maxOpenStreams: -1 } }));
    expect(err.code).toBe(Code.InvalidArgument);
  });
});

describe("REST", () => {
  it("answers 429 rate_limited with Retry-After and the RateLimit headers past the burst", async () => {
    const app = await appWith({ requestsPerSecond: 1, requestsBurst: 3 });
    const answers = [];
    for (let i = 0; i < 4; i++) answers.push(await t.request("GET", "/v1/queues", { token: app.token }));
    expect(answers.slice(0, 3).map((a) => a.status)).toEqual([200, 200, 200]);
    expect(answers[0].headers.get("ratelimit-policy")).toBe('"requests";q=3;w=3');
    expect(answers[0].headers.get("ratelimit")).toMatch(/^"requests";r=2;t=[01]$/);
    const refused = answers[3];
    expect(refused.status).toBe(429);
    expect((refused.body as { error: { code: string } }).error.code).toBe("rate_limited");
    expect(Number(refused.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(refused.headers.get("ratelimit")).toMatch(/^"requests";r=0;t=[1-9]/);
    expect(await t.server.deps.metrics.registry.getSingleMetricAsString("rate_limited_total")).toMatch(
      /rate_limited_total\{limit="requestsPerSecond"\} [1-9]/,
    );
    // Another app is not touched by this one's limit.
    const other = await t.createApp();
    expect((await t.request("GET", "/v1/queues", { token: other.token })).status).toBe(200);
  });

  it("counts each logged event and each put message against their own buckets", async () => {
    const app = await appWith({ eventsPerSecond: 1, eventsBurst: 50, queuePutsPerSecond: 1, queuePutsBurst: 5 });
    const token = app.token;
    expect(
      (await t.request("POST", "/v1/analytics/types", { token, body: { name: "click", properties: {} } })).status,
    ).toBe(200);
    const events = (n: number) => ({ events: Array.from({ length: n }, () => ({ type: "click" })) });
    const first = await t.request("POST", "/v1/analytics/events", { token, body: events(50) });
    expect(first.status).toBe(200);
    expect(first.headers.get("ratelimit-policy")).toBe('"events";q=50;w=50');
    const second = await t.request("POST", "/v1/analytics/events", { token, body: events(2) });
    expect(second.status).toBe(429);
    expect((second.body as { error: { code: string } }).error.code).toBe("rate_limited");

    const batch = await t.request("POST", "/v1/queues/jobs/batch", {
      token,
      body: { messages: [1, 2, 3, 4, 5].map((n) => ({ payload: n })) },
    });
    expect(batch.status).toBe(200);
    expect((await t.request("POST", "/v1/queues/jobs", { token, body: { payload: 6 } })).status).toBe(429);
    // Other requests have their own bucket, untouched.
    expect((await t.request("GET", "/v1/queues", { token })).status).toBe(200);
  });

  it("bounds the consumes an app has running at once, and frees the place when one ends", async () => {
    const app = await appWith({ maxWaitingConsumes: 2 });
    const stop = new AbortController();
    const consume = () =>
      t.request("POST", "/v1/queues/idle/consume", {
        token: app.token,
        body: { waitSeconds: 20 },
        signal: stop.signal,
      });
    const waiting = [consume(), consume()].map((p) => p.catch(() => undefined));
    // Once both hold their places, a third is refused at once.
    const third = () => t.request("POST", "/v1/queues/idle/consume", { token: app.token, body: { waitSeconds: 0 } });
    await expect.poll(async () => (await third()).status).toBe(429);
    expect(((await third()).body as { error: { message: string } }).error.message).toContain("2 consumes at once");
    stop.abort();
    await Promise.all(waiting);
    await expect.poll(async () => (await third()).status).toBe(200);
  });
});

describe("Connect and gRPC", () => {
  for (const protocol of ["connect", "grpc"] as const) {
    it(`${protocol}: RESOURCE_EXHAUSTED with the rate_limited detail and its retry hint`, async () => {
      const app = await appWith({ requestsPerSecond: 1, requestsBurst: 2 });
      const queues = t.client(QueueService, app.token, protocol);
      await queues.listQueues({});
      await queues.listQueues({});
      const err = await refusal(queues.listQueues({}));
      expect(err.code).toBe(Code.ResourceExhausted);
      const detail = err.findDetails(ErrorDetailSchema)[0];
      expect(detail?.code).toBe("rate_limited");
      expect(detail?.retryAfterSeconds).toBeGreaterThanOrEqual(1);
    });
  }

  it("LogEvents counts its events", async () => {
    const app = await appWith({ eventsPerSecond: 1, eventsBurst: 10 });
    const analytics = t.client(AnalyticsService, app.token, "grpc");
    await analytics.registerEventType({ name: "view" });
    await analytics.logEvents({ events: Array.from({ length: 10 }, () => ({ type: "view" })) });
    const err = await refusal(analytics.logEvents({ events: [{ type: "view" }] }));
    expect(err.findDetails(ErrorDetailSchema)[0]?.code).toBe("rate_limited");
  });

  it("bounds the open streams of an app; a stream that ends gives its place back", async () => {
    const app = await appWith({ maxOpenStreams: 1 });
    const queues = t.client(QueueService, app.token, "grpc");
    const first = new AbortController();
    const open = (async () => {
      for await (const _ of queues.streamMessages({ queue: "s", window: 1 }, { signal: first.signal })) void _;
    })().catch((e: unknown) => e);
    const second = async () => {
      const stop = new AbortController();
      const run = (async () => {
        for await (const _ of queues.streamMessages({ queue: "s", window: 1 }, { signal: stop.signal })) void _;
      })().catch((e: unknown) => e);
      const outcome = await Promise.race([run, new Promise((r) => setTimeout(() => r("open"), 300))]);
      stop.abort();
      await run;
      return outcome;
    };
    // Once the first holds its place, a second is refused.
    await expect
      .poll(async () => {
        const outcome = await second();
        return outcome instanceof ConnectError ? outcome.findDetails(ErrorDetailSchema)[0]?.code : outcome;
      })
      .toBe("rate_limited");
    first.abort();
    await open;
    await expect.poll(second).toBe("open");
  });
});
