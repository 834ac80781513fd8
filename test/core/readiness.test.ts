/**
 * `GET /ready` against real dependencies: ready on the embedded default; not
 * ready while the analytics store (MongoDB), SES or Bedrock cannot be reached;
 * ready when Bedrock answers at all (the h2 fixture refusing the call still
 * proves it is there). `/health` stays 200 throughout.
 */
import net from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sharedReadiness } from "../../src/core/readiness.ts";
import { startServer, type TestServer } from "../support/harness.ts";
import { startBedrockFixture, type BedrockFixture } from "../inference/bedrock-fixture.ts";

/** A local port with nothing listening on it. */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

const savedEnv = { ...process.env };
let fixture: BedrockFixture;
const open: TestServer[] = [];
const start = async (env: Record<string, string> = {}) => {
  const t = await startServer({ env });
  open.push(t);
  return t;
};

beforeAll(async () => {
  // The AWS SDK takes credentials from the standard chain; the environment is its first link.
  process.env.AWS_ACCESS_KEY_ID = "AKIDTESTTESTTEST";
  process.env.AWS_SECRET_ACCESS_KEY = "test-secret";
  process.env.AWS_EC2_METADATA_DISABLED = "true";
  fixture = await startBedrockFixture();
});
afterAll(async () => {
  for (const t of open) await t.close();
  await fixture?.close();
  process.env = savedEnv;
});

describe("GET /ready (src/core/readiness.ts)", () => {
  it("is ready on the embedded default, with the database checked", async () => {
    const t = await start();
    expect(await t.request("GET", "/ready")).toMatchObject({
      status: 200,
      body: { status: "ready", checks: { database: "ok" } },
    });
  });

  it("is not ready while MongoDB, SES or Bedrock cannot be reached, and names which; /health stays ok", async () => {
    const port = await closedPort();
    const t = await start({
      MONGODB_URL: `mongodb://127.0.0.1:${port}/?serverSelectionTimeoutMS=300&connectTimeoutMS=300`,
      MAIL_PROVIDER: "ses",
      INFERENCE_PROVIDER: "bedrock",
      AWS_REGION: "us-east-1",
      AWS_ENDPOINT_URL_SES: `http://127.0.0.1:${port}`,
      AWS_ENDPOINT_URL_BEDROCK_RUNTIME: `http://127.0.0.1:${port}`,
    });
    const res = await t.request("GET", "/ready");
    expect(res.status).toBe(503);
    expect(res.headers.get("retry-after")).toBe("5");
    expect(res.body.error.code).toBe("unavailable");
    expect(res.body.error.message).toBe("not ready: analytics, mail, inference");
    expect(res.body.checks).toEqual({
      database: "ok",
      analytics: expect.not.stringMatching(/^ok$/),
      mail: "unreachable",
      inference: "unreachable",
    });
    expect(JSON.stringify(res.body)).not.toContain(String(port));
    expect((await t.request("GET", "/health")).status).toBe(200);
  });

  it("is ready when Bedrock answers, even with an error for the call itself", async () => {
    const t = await start({
      INFERENCE_PROVIDER: "bedrock",
      AWS_REGION: "us-east-1",
      AWS_ENDPOINT_URL_BEDROCK_RUNTIME: fixture.url,
    });
    expect(await t.request("GET", "/ready")).toMatchObject({
      status: 200,
      body: { checks: { database: "ok", inference: "ok" } },
    });
  });
});

describe("sharedReadiness (src/core/readiness.ts)", () => {
  it("runs the checks once for a burst of calls made while a run is under way, and again after", async () => {
    let runs = 0;
    let answer: () => void = () => {};
    const ready = sharedReadiness(() => ({
      database: () => {
        runs++;
        return new Promise<void>((resolve) => (answer = resolve));
      },
    }));
    const burst = Array.from({ length: 50 }, () => ready());
    answer();
    const reports = await Promise.all(burst);
    expect(runs).toBe(1);
    expect(reports.every((r) => r.ready && r.checks.database === "ok")).toBe(true);
    const next = ready();
    answer();
    await next;
    expect(runs).toBe(2);
  });
});
