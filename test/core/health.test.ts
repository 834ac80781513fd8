/**
 * grpc.health.v1 over gRPC, as Kubernetes gRPC probes and grpc-health-probe
 * ask it: the server ("") and each service, following `/ready` (here the
 * analytics store cannot be reached: analytics and the server are
 * NOT_SERVING, the queues SERVING), NOT_FOUND for an unknown service, and a
 * Watch that sends the current status first.
 */
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { Health, HealthCheckResponse_ServingStatus as Status } from "../../gen/grpc/health/v1/health_pb.js";
import { transportFor, useTestServer } from "../support/harness.ts";

const t = useTestServer({ env: { MONGODB_URL: "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=300" } });
const health = () => createClient(Health, transportFor(t.url, "grpc"));

describe("grpc.health.v1", () => {
  it("Check follows /ready for the server and per service", async () => {
    const ready = await fetch(`${t.url}/ready`);
    expect(ready.status).toBe(503);
    expect((await health().check({ service: "" })).status).toBe(Status.NOT_SERVING);
    expect((await health().check({ service: "platform.analytics.v1.AnalyticsService" })).status).toBe(
      Status.NOT_SERVING,
    );
    expect((await health().check({ service: "platform.queues.v1.QueueService" })).status).toBe(Status.SERVING);
    const err = await health()
      .check({ service: "nope.v1.Nope" })
      .catch((e: unknown) => ConnectError.from(e));
    expect((err as ConnectError).code).toBe(Code.NotFound);
  });

  it("Watch sends the current status first, and ends when the client cancels", async () => {
    const abort = new AbortController();
    const seen: Status[] = [];
    try {
      for await (const res of health().watch(
        { service: "platform.queues.v1.QueueService" },
        { signal: abort.signal },
      )) {
        seen.push(res.status);
        abort.abort();
      }
    } catch (e) {
      expect(ConnectError.from(e).code).toBe(Code.Canceled);
    }
    expect(seen).toEqual([Status.SERVING]);
  });

  it("List gives the server and every service", async () => {
    const { statuses } = await health().list({});
    expect(statuses[""]?.status).toBe(Status.NOT_SERVING);
    expect(statuses["platform.queues.v1.QueueService"]?.status).toBe(Status.SERVING);
  });
});
