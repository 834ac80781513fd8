/**
 * Queue policies for operators (AdminService GetQueuePolicy / SetQueuePolicy
 * and the policies in ListQueues), over Connect against the real server on
 * both backends: what the app set is what the operator reads, and the other
 * way round; the app's maxDeliveries limit bounds an operator's change as it
 * bounds the app's, and the answer says where maxDeliveries comes from; a
 * change is audited (`queue.policy`, with what was asked) in its transaction,
 * a refused one as `failed`, and a viewer reads but is refused the change
 * (audited as `denied`); a dead letter dies by the policy the operator set.
 */
import { describe, expect, it } from "vitest";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { AdminService, OperatorRole } from "../../gen/platform/admin/v1/admin_pb.js";
import { transportFor, useTestServer } from "../support/harness.ts";

const t = useTestServer();

async function failure(p: Promise<unknown>): Promise<ConnectError> {
  try {
    await p;
  } catch (err) {
    return ConnectError.from(err);
  }
  throw new Error("expected the call to fail");
}

describe("queue policies in AdminService", () => {
  it("reads what the app set, and the app reads what the operator set", async () => {
    const app = await t.createApp();
    const put = await t.request("PUT", "/v1/queues/flaky/policy", { token: app.token, body: { maxDeliveries: 1 } });
    expect(put.status).toBe(200);
    const got = await t.admin.getQueuePolicy({ appId: app.name, queue: "flaky" });
    expect(got.policy).toMatchObject({ queue: "flaky", maxDeliveries: 1, retryDelaySeconds: 1 });
    expect(got.maxDeliveriesSource).toBe("queue");
    expect(got.appMaxDeliveries).toBe(0);

    const set = await t.admin.setQueuePolicy({
      appId: app.id,
      queue: "flaky",
      maxDeliveries: 3,
      retryDelaySeconds: 7,
      deadLetterQueue: "flaky-dead",
    });
    expect(set.policy).toMatchObject({ maxDeliveries: 3, retryDelaySeconds: 7, deadLetterQueue: "flaky-dead" });
    // The app sees the operator's change at once (the same instance's policy cache).
    const seen = await t.request("GET", "/v1/queues/flaky/policy", { token: app.token });
    expect(seen.body).toMatchObject({ maxDeliveries: 3, retryDelaySeconds: 7, deadLetterQueue: "flaky-dead" });
    // Fields not given stay: an empty dead-letter queue sets it back to the list.
    const back = await t.admin.setQueuePolicy({ appId: app.id, queue: "flaky", deadLetterQueue: "" });
    expect(back.policy).toMatchObject({ maxDeliveries: 3, retryDelaySeconds: 7 });
    expect(back.policy?.deadLetterQueue).toBeUndefined();

    // A queue nobody set: the defaults, and the listing carries each listed queue's policy.
    expect((await t.admin.getQueuePolicy({ appId: app.id, queue: "other" })).maxDeliveriesSource).toBe("default");
    await t.request("POST", "/v1/queues/flaky", { token: app.token, body: { payload: 1 } });
    await t.request("POST", "/v1/queues/plain", { token: app.token, body: { payload: 2 } });
    const listed = await t.admin.listQueues({ appId: app.id });
    expect(listed.queues.map((q) => q.name)).toEqual(["flaky", "plain"]);
    expect(listed.policies.map((p) => [p.queue, p.maxDeliveries])).toEqual([
      ["flaky", 3],
      ["plain", 0],
    ]);
  });

  it("is bounded by the app's maxDeliveries limit, as the app's own change is, and says which applies", async () => {
    const app = await t.createApp();
    await t.admin.updateApp({ appId: app.id, limits: { maxDeliveries: 5 } });
    const fromApp = await t.admin.getQueuePolicy({ appId: app.id, queue: "jobs" });
    expect(fromApp.policy?.maxDeliveries).toBe(5);
    expect(fromApp.maxDeliveriesSource).toBe("app");
    expect(fromApp.appMaxDeliveries).toBe(5);
    const over = await failure(t.admin.setQueuePolicy({ appId: app.id, queue: "jobs", maxDeliveries: 6 }));
    expect(over.code).toBe(Code.InvalidArgument);
    expect(over.rawMessage).toContain("maxDeliveries: must be an integer from 1 to 5");
    const lower = await t.admin.setQueuePolicy({ appId: app.id, queue: "jobs", maxDeliveries: 2 });
    expect(lower.policy?.maxDeliveries).toBe(2);
    expect(lower.maxDeliveriesSource).toBe("queue");
    // Nothing to change, a bad queue name, a bad backoff: refused with the field named.
    expect((await failure(t.admin.setQueuePolicy({ appId: app.id, queue: "jobs" }))).code).toBe(Code.InvalidArgument);
    expect((await failure(t.admin.getQueuePolicy({ appId: app.id, queue: "Bad Name" }))).code).toBe(
      Code.InvalidArgument,
    );
    const backoff = await failure(t.admin.setQueuePolicy({ appId: app.id, queue: "jobs", retryBackoff: 0.5 }));
    expect(backoff.rawMessage).toContain("retryBackoff");
    expect((await failure(t.admin.getQueuePolicy({ appId: "no-such-app", queue: "jobs" }))).code).toBe(Code.NotFound);

    const { entries } = await t.admin.listAuditEntries({ appId: app.id, action: "queue.policy", pageSize: 20 });
    expect(entries.map((e) => e.outcome)).toEqual(["failed", "failed", "ok", "failed"]);
    const ok = entries.find((e) => e.outcome === "ok")!;
    expect(ok.detail).toEqual({ queue: "jobs", maxDeliveries: 2 });
    expect(entries[3].detail).toMatchObject({ queue: "jobs", maxDeliveries: 6, error: "invalid_argument" });
  });

  it("is read by a viewer, and a viewer's change is refused and audited as denied", async () => {
    const app = await t.createApp();
    const created = await t.admin.createOperator({ name: "policy-viewer", role: OperatorRole.VIEWER });
    const viewer = createClient(AdminService, transportFor(t.url, "connect", created.token));
    expect((await viewer.getQueuePolicy({ appId: app.id, queue: "jobs" })).policy?.queue).toBe("jobs");
    const denied = await failure(viewer.setQueuePolicy({ appId: app.id, queue: "jobs", maxDeliveries: 1 }));
    expect(denied.code).toBe(Code.PermissionDenied);
    expect((await t.admin.getQueuePolicy({ appId: app.id, queue: "jobs" })).policy?.maxDeliveries).toBe(0);
    const { entries } = await t.admin.listAuditEntries({ operatorId: created.operator!.id, pageSize: 10 });
    expect(entries.map((e) => `${e.action}:${e.outcome}:${e.appId}`)).toEqual([`queue.policy:denied:${app.id}`]);
  });

  it("makes a message a dead letter by the policy the operator set", async () => {
    const app = await t.createApp();
    await t.admin.setQueuePolicy({ appId: app.id, queue: "once", maxDeliveries: 1 });
    await t.request("POST", "/v1/queues/once", { token: app.token, body: { payload: { n: 1 } } });
    const consumed = await t.request("POST", "/v1/queues/once/consume", {
      token: app.token,
      body: { waitSeconds: 0 },
    });
    const nack = await t.request("POST", "/v1/queues/_nack", {
      token: app.token,
      body: { receipt: consumed.body.message.receipt },
    });
    expect(nack.status, JSON.stringify([consumed.body, nack.body])).toBe(200);
    // The last delivery's nack makes it visible, so dead, at once: the next consume buries it.
    await t.request("POST", "/v1/queues/once/consume", { token: app.token, body: { waitSeconds: 0 } });
    await expect
      .poll(async () => (await t.admin.listDeadLetters({ appId: app.id, queue: "once" })).deadLetters.length, {
        timeout: 20_000,
      })
      .toBe(1);
  });
});
