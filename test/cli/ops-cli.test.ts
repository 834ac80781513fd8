/**
 * `queues policy` and `overview` in the CLI, as a real child process against
 * the real server: without options the policy is shown as it applies (and
 * where its max deliveries comes from); with options those fields change, as
 * the app reads them through /v1; a value the server refuses is its message
 * and exit 1, a malformed one a usage error (exit 2); the overview prints the
 * apps and every facility's requests.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { cliAgainst } from "../support/service-process.ts";
import { startServer, type TestServer } from "../support/harness.ts";

// Every test spawns the CLI several times; on a busy machine a spawn takes seconds.
vi.setConfig({ testTimeout: 180_000 });

let t: TestServer;
const run = cliAgainst(() => t);
const ok = async (...args: string[]) => {
  const out = await run(args);
  expect(out.code, out.stderr).toBe(0);
  return JSON.parse(out.stdout) as Record<string, unknown>;
};

beforeAll(async () => {
  t = await startServer();
});
afterAll(() => t?.close());

describe("queues policy", () => {
  it("shows the policy without options, changes the fields given with them", async () => {
    const app = await t.createApp("cli-policy");
    const shown = await ok("queues", "policy", "cli-policy", "jobs");
    expect(shown).toMatchObject({ policy: { queue: "jobs", maxDeliveries: 0 }, maxDeliveriesSource: "default" });

    const set = await ok(
      "queues",
      "policy",
      "cli-policy",
      "jobs",
      "--max-deliveries",
      "4",
      "--retry-delay-seconds",
      "10",
      "--dead-letter-queue",
      "jobs-dead",
      "--retry-backoff",
      "1.5",
    );
    expect(set).toMatchObject({
      policy: { maxDeliveries: 4, retryDelaySeconds: 10, deadLetterQueue: "jobs-dead", retryBackoff: 1.5 },
      maxDeliveriesSource: "queue",
    });
    const seen = await t.request("GET", "/v1/queues/jobs/policy", { token: app.token });
    expect(seen.body).toMatchObject({ maxDeliveries: 4, retryDelaySeconds: 10, deadLetterQueue: "jobs-dead" });

    const refused = await run(["queues", "policy", "cli-policy", "jobs", "--lease-seconds", "0"]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain("leaseSeconds: must be an integer from 1 to 43200");
    const usage = await run(["queues", "policy", "cli-policy", "jobs", "--max-deliveries", "many"]);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toContain("--max-deliveries: must be a whole number");
  });

  it("sets and removes the queue's delivery rate limit", async () => {
    const app = await t.createApp("cli-rate");
    const set = await ok("queues", "policy", "cli-rate", "jobs", "--max-deliveries-per-second", "12.5");
    expect(set).toMatchObject({ policy: { queue: "jobs", maxDeliveriesPerSecond: 12.5 } });
    const seen = await t.request("GET", "/v1/queues/jobs/policy", { token: app.token });
    expect(seen.body.maxDeliveriesPerSecond).toBe(12.5);
    const removed = await ok("queues", "policy", "cli-rate", "jobs", "--max-deliveries-per-second", "0");
    // proto3 JSON leaves out a zero.
    expect((removed.policy as { maxDeliveriesPerSecond?: number }).maxDeliveriesPerSecond ?? 0).toBe(0);
    const usage = await run(["queues", "policy", "cli-rate", "jobs", "--max-deliveries-per-second", "fast"]);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toContain("--max-deliveries-per-second: must be a number");
  });
});

describe("overview", () => {
  it("prints the apps and every facility's requests", async () => {
    const app = await t.createApp("cli-overview");
    await t.request("GET", "/v1/analytics/types", { token: app.token });
    await t.server.requestCounts.flush();
    const o = await ok("overview");
    expect(o.appsRunning).toBeGreaterThanOrEqual(1);
    const facilities = o.facilities as { facility: string; requestsLastDay: number }[];
    expect(facilities.map((f) => f.facility)).toEqual(["analytics", "inference", "mail", "queues", "secrets"]);
    expect(Number(facilities[0].requestsLastDay)).toBeGreaterThanOrEqual(1);
  });
});
