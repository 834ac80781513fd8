/**
 * Calls that last (`StreamMessages`, a waiting `ConsumeMessage`) act on the app
 * as it is at each claim (src/queues/queue-consumers.ts `stream`, `consume`):
 * an app stopped, deleted or whose token was revoked meanwhile, on any
 * instance, ends them as a new call would be refused, instead of leasing on;
 * a waiting consume claims under the limits and policy in force when it
 * wakes. Two instances on one database: the change is made on the other one.
 * Also: a nack on one instance wakes a consume waiting on the other (the nack
 * statement notifies, as a put does).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { AppStatus } from "../../gen/platform/admin/v1/admin_pb.js";
import { QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import { startInstances, type Instances, type TestServer } from "../support/harness.ts";
import { metricValue, until } from "../support/server-state.ts";

let instances: Instances;
let a: TestServer;
let b: TestServer;
beforeAll(async () => {
  instances = await startInstances(2);
  [a, b] = instances.servers as [TestServer, TestServer];
});
afterAll(() => instances?.close());

const num = (i: number) => ({ kind: { case: "numberValue" as const, value: i } });

describe("StreamMessages after the app changed (queue-consumers.ts stream)", () => {
  const changes = {
    stop: { code: Code.PermissionDenied },
    revoke: { code: Code.Unauthenticated },
    delete: { code: Code.Unauthenticated },
  } as const;
  for (const [change, { code }] of Object.entries(changes)) {
    it(`an open stream ends at its next claim once the app is ${change === "stop" ? "stopped" : change === "revoke" ? "without its token" : "deleted"}, leasing nothing more`, async () => {
      const app = await a.createApp();
      const onB = b.client(QueueService, app.token, "grpc");
      // Messages that become visible after the change: the stream waits for them.
      await onB.putMessages({ queue: "q", messages: [0, 1, 2].map((i) => ({ payload: num(i), delaySeconds: 2 })) });
      const stop = new AbortController();
      const got: string[] = [];
      let ended: unknown;
      const reading = (async () => {
        try {
          for await (const res of onB.streamMessages({ queue: "q", window: 10 }, { signal: stop.signal }))
            for (const m of res.messages) got.push(m.id);
        } catch (e) {
          ended = e;
        }
      })();
      await until(() => metricValue(b, "queue_streams") === 1, "the stream to open");
      if (change === "stop") await a.admin.updateApp({ appId: app.id, status: AppStatus.STOPPED });
      if (change === "revoke") {
        const { tokens } = await a.admin.listTokens({ appId: app.id });
        await a.admin.revokeToken({ tokenId: tokens[0].id });
      }
      if (change === "delete") await a.admin.deleteApp({ appId: app.id });
      // The stream wakes when the messages become visible (2 s) and ends; kept open, it would lease them.
      const bound = setTimeout(() => stop.abort(), 8_000);
      await reading;
      clearTimeout(bound);
      expect(got).toEqual([]);
      expect(ConnectError.from(ended).code).toBe(code);
    }, 20_000);
  }
});

describe("a waiting ConsumeMessage after the limits changed (queue-consumers.ts consume)", () => {
  for (const how of ["operator limit", "queue policy"] as const) {
    it(`claims under a maxDeliveries lowered during its wait (${how}): the message dies instead of a second delivery`, async () => {
      const app = await a.createApp();
      const onA = a.client(QueueService, app.token, "connect");
      await onA.putMessage({ queue: "q", payload: num(1) });
      const first = await onA.consumeMessage({ queue: "q", waitSeconds: 0, leaseSeconds: 2 });
      expect(first.message?.deliveries).toBe(1);
      // Waits on B: the one message is leased for 2 s; the consume wakes when that lease lapses.
      const waiting = b.client(QueueService, app.token, "connect").consumeMessage({ queue: "q", waitSeconds: 4 });
      await until(() => metricValue(b, "queue_waiting_consumers") === 1, "the consume to wait");
      if (how === "operator limit") await a.admin.updateApp({ appId: app.id, limits: { maxDeliveries: 1 } });
      else await b.client(QueueService, app.token).updateQueuePolicy({ queue: "q", maxDeliveries: 1 });
      const got = await waiting;
      expect(got.message).toBeUndefined();
      expect((await onA.listQueueDeadLetters({ queue: "q" })).deadLetters).toHaveLength(1);
    }, 20_000);
  }

  it("a waiting consume of an app stopped meanwhile is refused at its next claim", async () => {
    const app = await a.createApp();
    const onB = b.client(QueueService, app.token, "connect");
    await onB.putMessage({ queue: "q", payload: num(1), delaySeconds: 2 });
    const waiting = onB.consumeMessage({ queue: "q", waitSeconds: 10 }).then(
      (r) => r,
      (e: unknown) => ConnectError.from(e),
    );
    await until(() => metricValue(b, "queue_waiting_consumers") === 1, "the consume to wait");
    await a.admin.updateApp({ appId: app.id, status: AppStatus.STOPPED });
    const got = await waiting;
    expect(got instanceof ConnectError ? got.code : "answered").toBe(Code.PermissionDenied);
  }, 20_000);
});

describe("a nack on another instance", () => {
  it("wakes a consume waiting here when the message is back at once, not at the 5 s safety check", async () => {
    const app = await a.createApp();
    const onA = a.client(QueueService, app.token, "connect");
    const onB = b.client(QueueService, app.token, "connect");
    await onA.putMessage({ queue: "q", payload: num(1) });
    const [first] = (await onA.consumeMessage({ queue: "q", waitSeconds: 0, max: 1 })).messages;
    const started = Date.now();
    const waiting = onB.consumeMessage({ queue: "q", waitSeconds: 20, max: 1 });
    await until(() => metricValue(b, "queue_waiting_consumers") === 1, "the consume to wait");
    expect((await onA.nackMessage({ receipt: first.receipt })).nacked).toBe(true);
    const { messages } = await waiting;
    expect(messages.map((m) => [m.id, m.deliveries])).toEqual([[first.id, 2]]);
    expect(Date.now() - started).toBeLessThan(3000);
  }, 20_000);
});
