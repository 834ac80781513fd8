/**
 * Priorities (docs/queues.md "Priorities"): a put (and each message of a batch put) may carry `priority`
 * 0 to 9; among the visible messages of a queue the higher ones are delivered first, and within one
 * priority the oldest first. Under real concurrency (racing consumers over REST and Connect) no claim takes
 * a lower priority while a higher one was there for it to take: every message of a higher priority was
 * taken by a claim that had started before that claim ended.
 */
import { describe, expect, it } from "vitest";
import { QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import { restAs, useTestServer } from "../support/harness.ts";

const t = useTestServer();

const rest = restAs(t);

interface Claimed {
  startedAt: number;
  endedAt: number;
  /** [priority, put order] of each message, as the claim answered them. */
  messages: [number, number][];
}

describe("priorities", () => {
  it("hands out higher priorities first, the oldest first within one; plain puts are priority 0", async () => {
    const app = await t.createApp();
    const put = async (payload: number, priority?: number) => {
      const res = await rest(app, "POST", "/v1/queues/p", { payload, ...(priority === undefined ? {} : { priority }) });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
    };
    await put(1);
    await put(2, 5);
    await put(3, 9);
    await put(4, 0);
    await put(5, 5);
    const batch = await rest(app, "POST", "/v1/queues/p/batch", {
      messages: [{ payload: 6, priority: 9 }, { payload: 7 }, { payload: 8, priority: 1 }],
    });
    expect(batch.status).toBe(200);
    const first = await rest(app, "POST", "/v1/queues/p/consume", { waitSeconds: 0, max: 3 });
    expect((first.body.messages as { payload: number }[]).map((m) => m.payload)).toEqual([3, 6, 2]);
    const order: number[] = [];
    for (;;) {
      const res = await rest(app, "POST", "/v1/queues/p/consume", { waitSeconds: 0 });
      if (!res.body.message) break;
      order.push(res.body.message.payload as number);
    }
    expect(order).toEqual([5, 8, 1, 4, 7]);
  });

  it("a delayed or leased message of a higher priority does not hold back visible lower ones", async () => {
    const app = await t.createApp();
    await rest(app, "POST", "/v1/queues/d", { payload: "later", priority: 9, delaySeconds: 600 });
    await rest(app, "POST", "/v1/queues/d", { payload: "now" });
    const res = await rest(app, "POST", "/v1/queues/d/consume", { waitSeconds: 0 });
    expect(res.body.message.payload).toBe("now");
  });

  it("refuses a priority outside 0..9 naming the field (REST and Connect)", async () => {
    const app = await t.createApp();
    for (const priority of [-1, 10, 1.5, "9"]) {
      const res = await rest(app, "POST", "/v1/queues/bad", { payload: 1, priority });
      expect(res.status).toBe(400);
      expect(res.body.error.message).toContain("priority");
    }
    const batch = await rest(app, "POST", "/v1/queues/bad/batch", {
      messages: [{ payload: 1 }, { payload: 2, priority: 11 }],
    });
    expect(batch.status).toBe(400);
    expect(batch.body.error.message).toContain("messages[1].priority");
    const c = t.client(QueueService, app.token);
    await expect(
      c.putMessage({ queue: "bad", payload: { kind: { case: "numberValue", value: 1 } }, priority: 10 }),
    ).rejects.toThrow(/priority/);
  });

  it("racing consumers never take a lower priority while a higher one was there to take", async () => {
    const app = await t.createApp();
    const c = t.client(QueueService, app.token);
    const total = 400;
    // Put in batches of 50 with mixed priorities, racing each other; the payload records its put order per batch.
    const puts = await Promise.all(
      Array.from({ length: total / 50 }, (_, b) =>
        c.putMessages({
          queue: "race",
          messages: Array.from({ length: 50 }, (_, i) => {
            const n = b * 50 + i;
            return {
              payload: { kind: { case: "numberValue" as const, value: n } },
              priority: (n * 7) % 10,
            };
          }),
        }),
      ),
    );
    expect(puts.flatMap((p) => p.messages)).toHaveLength(total);

    // 8 consumers (4 over REST, 4 over Connect), each taking up to 5 at a time, until the queue is empty.
    const claims: Claimed[] = [];
    const consumer = async (viaRest: boolean) => {
      for (;;) {
        const startedAt = performance.now();
        let taken: [number, number][];
        if (viaRest) {
          const res = await rest(app, "POST", "/v1/queues/race/consume", { waitSeconds: 0, max: 5, leaseSeconds: 600 });
          taken = (res.body.messages as { payload: number }[]).map((m) => [(m.payload * 7) % 10, m.payload]);
        } else {
          const res = await c.consumeMessage({ queue: "race", waitSeconds: 0, max: 5, leaseSeconds: 600 });
          taken = res.messages.map((m) => {
            const n = m.payload?.kind.value as number;
            return [(n * 7) % 10, n];
          });
        }
        const endedAt = performance.now();
        if (taken.length === 0) return;
        claims.push({ startedAt, endedAt, messages: taken });
      }
    };
    await Promise.all([true, true, true, true, false, false, false, false].map((r) => consumer(r)));

    const all = claims.flatMap((cl) => cl.messages.map(([, n]) => n));
    expect(all.sort((a, b) => a - b)).toEqual(Array.from({ length: total }, (_, i) => i));
    for (const a of claims) {
      // Within one claim: priorities descending. (Put order within a priority is checked above with puts in
      // sequence; the racing batches here commit in any order, and one batch's messages share their put time.)
      for (let i = 1; i < a.messages.length; i++)
        expect(a.messages[i - 1][0], JSON.stringify(a.messages)).toBeGreaterThanOrEqual(a.messages[i][0]);
      // Across claims: a claim that started after this one ended found nothing this one could have taken first.
      const lowest = Math.min(...a.messages.map(([p]) => p));
      for (const b of claims) {
        if (b.startedAt <= a.endedAt) continue;
        const highest = Math.max(...b.messages.map(([p]) => p));
        expect(highest, `a later claim took priority ${highest} after one took ${lowest}`).toBeLessThanOrEqual(lowest);
      }
    }
  }, 60_000);
});
