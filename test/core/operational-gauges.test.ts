/**
 * The gauges /metrics exports for the alerts of deploy/prometheus/alerts.yaml
 * (src/core/operational-gauges.ts, src/queues/queue-gauges.ts), read from a
 * real server after real work: readiness and each dependency's, the
 * PostgreSQL pools (none on PGlite), the highest share of a daily cap used
 * and the apps near one, the messages and dead letters stored, and the age of
 * the longest-waiting message (the platform's `_events` aside). A server whose
 * mail provider cannot be reached exports itself not ready, naming the mail;
 * one whose database hangs still answers /metrics at once, not ready.
 */
import net from "node:net";
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { COLLECT_TIMEOUT_MS } from "../../src/core/metrics.ts";
import { startServer, useTestServer, type TestServer, describeOnPostgres } from "../support/harness.ts";
import { useServerBehindProxy } from "../support/tcp-proxy.ts";

/** Every sample of /metrics as `name{labels}` → value. */
async function scrape(t: TestServer): Promise<Map<string, number>> {
  const res = await t.request("GET", "/metrics");
  expect(res.status).toBe(200);
  const samples = new Map<string, number>();
  for (const line of (res.body as string).split("\n")) {
    const match = /^([a-z_]+(?:\{[^}]*\})?) (\S+)$/.exec(line);
    if (match) samples.set(match[1], Number(match[2]));
  }
  return samples;
}

describe("the operational gauges of /metrics", () => {
  const t = useTestServer();
  let samples: Map<string, number>;
  let startedAt: number;

  beforeAll(async () => {
    const app = await t.createApp();
    const call = async (path: string, body: unknown, method = "POST") => {
      const res = await t.request(method, path, { token: app.token, body });
      expect(res.status, `${path}: ${JSON.stringify(res.body)}`).toBe(200);
      return res.body as { message: unknown };
    };
    // 9 of a cap of 10 events today: 0.9 of the cap, near it.
    await t.admin.updateApp({ appId: app.id, limits: { eventsPerDay: 10, maxDeliveries: 1 } });
    await call("/v1/analytics/types", { name: "signup", properties: {} });
    await call("/v1/analytics/events", { events: Array.from({ length: 9 }, () => ({ type: "signup" })) });
    // Two messages on "later": one waits; the other on "dying" is delivered once, its lease lapses, and the next
    // consume makes it a dead letter (maxDeliveries 1).
    startedAt = Date.now();
    await call("/v1/queues/later", { payload: { n: 1 } });
    await call("/v1/queues/dying", { payload: { n: 2 } });
    expect((await call("/v1/queues/dying/consume", {})).message).not.toBeNull();
    await sql`UPDATE queue_messages SET visible_at = now() - interval '1 millisecond' WHERE queue = 'dying'`.execute(
      t.server.deps.db,
    );
    expect((await call("/v1/queues/dying/consume", {})).message).toBeNull();
    // A platform event no one reads waits on _events, from long ago: it is not a late consumer.
    await t.admin.publishEvent({ appId: app.id, kind: "test.event" });
    await sql`UPDATE queue_messages SET visible_at = now() - interval '1 day' WHERE queue = '_events'`.execute(
      t.server.deps.db,
    );
    samples = await scrape(t);
  });

  it("says the instance is ready, and each dependency", () => {
    expect(samples.get("platform_ready")).toBe(1);
    expect(samples.get('platform_dependency_ready{dependency="database"}')).toBe(1);
  });

  it("reports how full each PostgreSQL pool is (nothing on PGlite, which has no pool)", () => {
    if (t.server.deps.database.kind === "pglite") {
      expect([...samples.keys()].filter((k) => k.startsWith("database_pool_"))).toEqual([]);
      return;
    }
    const max = (pool: string) => samples.get(`database_pool_max_connections{pool="${pool}"}`);
    expect([max("main"), max("relaxed"), max("unbounded")]).toEqual([20, 10, 2]);
    const busy = samples.get('database_pool_connections{pool="main",state="busy"}')!;
    const idle = samples.get('database_pool_connections{pool="main",state="idle"}')!;
    expect(busy).toBeGreaterThanOrEqual(0);
    expect(busy + idle).toBeGreaterThan(0); // the work above opened connections
    expect(busy + idle).toBeLessThanOrEqual(samples.get('database_pool_max_connections{pool="main"}')!);
    // Read before the scrape's own statements borrow connections; the server's own sweeps may be waiting.
    const waiting = samples.get('database_pool_waiting_requests{pool="main"}')!;
    expect(Number.isInteger(waiting) && waiting >= 0 && waiting <= 2).toBe(true);
  });

  it("reports the highest share of a daily cap used today, and the apps near one", () => {
    expect(samples.get('quota_cap_used_ratio{counter="events"}')).toBeCloseTo(0.9, 5);
    expect(samples.get('quota_apps_near_cap{counter="events"}')).toBe(1);
    expect(samples.get('quota_cap_used_ratio{counter="mail"}')).toBe(0);
    expect(samples.get('quota_apps_near_cap{counter="mail"}')).toBe(0);
  });

  it("reports messages and dead letters stored, and how long the longest-waiting message has waited", () => {
    expect(samples.get("queue_messages")).toBe(2); // "later", and the event on _events
    expect(samples.get("queue_dead_letters")).toBe(1);
    const oldest = samples.get("queue_oldest_waiting_seconds")!;
    expect(oldest).toBeGreaterThan(0);
    expect(oldest).toBeLessThanOrEqual((Date.now() - startedAt) / 1000 + 1); // "later", not the day-old event
  });
});

describe("the readiness gauges of a server whose mail provider cannot be reached", () => {
  let t: TestServer;
  const savedEnv = { ...process.env };

  beforeAll(async () => {
    const closed = net.createServer();
    await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const { port } = closed.address() as net.AddressInfo;
    await new Promise((resolve) => closed.close(resolve));
    // The AWS SDK takes credentials from the standard chain; the environment is its first link.
    process.env.AWS_ACCESS_KEY_ID = "AKIDTESTTESTTEST";
    process.env.AWS_SECRET_ACCESS_KEY = "test-secret";
    process.env.AWS_EC2_METADATA_DISABLED = "true";
    t = await startServer({
      env: { MAIL_PROVIDER: "ses", AWS_REGION: "us-east-1", AWS_ENDPOINT_URL_SES: `http://127.0.0.1:${port}` },
    });
  });
  afterAll(async () => {
    await t?.close();
    process.env = savedEnv;
  });

  it("exports not ready, naming the mail provider, as /ready answers", async () => {
    expect((await t.request("GET", "/ready")).status).toBe(503);
    const samples = await scrape(t);
    expect(samples.get("platform_ready")).toBe(0);
    expect(samples.get('platform_dependency_ready{dependency="mail"}')).toBe(0);
    expect(samples.get('platform_dependency_ready{dependency="database"}')).toBe(1);
  });
});

describeOnPostgres("/metrics while the database hangs", "it holds a connection to the server", () => {
  const behind = useServerBehindProxy();

  it("answers within the gauges' bound, not ready, rather than waiting for the database", async () => {
    behind.proxy.hold();
    const started = performance.now();
    const samples = await scrape(behind.t);
    // The bound, plus slack for a loaded machine; the database's own bounds are 5 and 10 s.
    expect(performance.now() - started).toBeLessThan(COLLECT_TIMEOUT_MS + 1500);
    expect(samples.get("platform_ready")).toBe(0);
    expect(samples.has("queue_oldest_waiting_seconds")).toBe(true);
  });
});
