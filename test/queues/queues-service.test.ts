/**
 * QueueService's own rules (src/queues/queues-service.ts), over Connect with the app's token: a policy
 * change replaces the fields it gives and keeps the others (queue-policy.ts's `policyChangeOf`), the
 * answer is the effective policy (`policyMessage`), and the effective policy is what a consume leases
 * for; a put, a consume and an ack are one delivery.
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import { useTestApp, useTestServer } from "../support/harness.ts";

const t = useTestServer();
const app = useTestApp(t);
const client = () => t.client(QueueService, app.token, "connect");

describe("QueueService policies", () => {
  it("an update replaces only the fields it gives, and answers the effective policy", async () => {
    const before = (await client().getQueuePolicy({ queue: "policed" })).policy!;
    const first = (await client().updateQueuePolicy({ queue: "policed", maxDeliveries: 3, leaseSeconds: 45 })).policy!;
    expect([first.queue, first.maxDeliveries, first.leaseSeconds]).toEqual(["policed", 3, 45]);
    expect(first.retryDelaySeconds).toBe(before.retryDelaySeconds);
    const second = (await client().updateQueuePolicy({ queue: "policed", retryJitter: 0.25 })).policy!;
    expect([second.maxDeliveries, second.leaseSeconds, second.retryJitter]).toEqual([3, 45, 0.25]);
    expect((await client().getQueuePolicy({ queue: "policed" })).policy).toEqual(second);
    // The dead-letter queue left unset is absent, not an empty name.
    expect(second.deadLetterQueue).toBeUndefined();
  });

  it("a consume leases for the policy's lease, unless the call asks for its own", async () => {
    await client().updateQueuePolicy({ queue: "leased", leaseSeconds: 120 });
    await client().putMessage({ queue: "leased", payload: { kind: { case: "stringValue", value: "a" } } });
    await client().putMessage({ queue: "leased", payload: { kind: { case: "stringValue", value: "b" } } });
    const at = Date.now();
    const byPolicy = (await client().consumeMessage({ queue: "leased", waitSeconds: 0 })).message!;
    const leaseMs = (m: typeof byPolicy) =>
      Number(m.leaseExpiresAt!.seconds) * 1000 + Math.floor(m.leaseExpiresAt!.nanos / 1e6) - at;
    expect(leaseMs(byPolicy)).toBeGreaterThan(110_000);
    expect(leaseMs(byPolicy)).toBeLessThan(130_000);
    const own = (await client().consumeMessage({ queue: "leased", waitSeconds: 0, leaseSeconds: 10 })).message!;
    expect(leaseMs(own)).toBeLessThan(20_000);
  });

  it("refuses a value out of its range, naming the field, and keeps the policy as it was", async () => {
    const before = (await client().getQueuePolicy({ queue: "policed" })).policy;
    const err = await client()
      .updateQueuePolicy({ queue: "policed", retryJitter: 2, maxDeliveries: 9 })
      .then(
        () => undefined,
        (e: unknown) => ConnectError.from(e),
      );
    expect(err?.code).toBe(Code.InvalidArgument);
    expect(err?.rawMessage).toContain("retryJitter");
    expect((await client().getQueuePolicy({ queue: "policed" })).policy).toEqual(before);
  });
});

describe("QueueService deliveries", () => {
  it("a put, a consume and an ack: the message is handed out once and is gone after its ack", async () => {
    const put = await client().putMessage({ queue: "once", payload: { kind: { case: "numberValue", value: 7 } } });
    const { message } = await client().consumeMessage({ queue: "once", waitSeconds: 0 });
    expect([message?.id, message?.deliveries]).toEqual([put.id, 1]);
    expect((await client().ackMessage({ receipt: message!.receipt })).acked).toBe(true);
    expect((await client().consumeMessage({ queue: "once", waitSeconds: 0 })).message).toBeUndefined();
  });
});
