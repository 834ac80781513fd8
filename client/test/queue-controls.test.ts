/**
 * The client's use of the queue controls, against the real service: the
 * worker's heartbeat keeps a slow job's lease (no second delivery), a
 * failing handler's message is nacked and comes back at once (or after the
 * policy's retry delay) instead of after its lease, batches are taken with
 * `{ max }`, and `extend`, `nack`, `context.nack`, `dedupKey` and the policy
 * are exposed; so are `priority`, `purge`, `message` (a message's status) and
 * a nack's `reason` (a failing handler's error).
 */
import { urlOf } from "./support.ts";
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { backend, startServer, type TestApp, type TestServer } from "../../test/support/harness.ts";
import { tables } from "../../test/support/tables.ts";
import { createClient, type LeaseLost, type PlatformClient, type QueueMessage, type Worker } from "../src/index.ts";

let t: TestServer;
let app: TestApp;
let client: PlatformClient;

beforeAll(async () => {
  t = await startServer();
  app = await t.createApp();
  client = createClient({ baseUrl: t.url, token: app.token });
});
afterAll(async () => {
  await client?.close();
  await t?.close();
});

async function queueEntry(queue: string) {
  const q = (await client.queues.list()).find((e) => e.name === queue);
  return { depth: q?.depth ?? 0, inFlight: q?.inFlight ?? 0 };
}

describe("queue controls in the client", () => {
  it("the heartbeat keeps a handler's lease while it outlives leaseSeconds: no second delivery", async () => {
    const queue = "slow-job";
    const put = await client.queues.put(queue, { job: 1 });
    const other = createClient({ baseUrl: t.url, token: app.token });
    const lost: LeaseLost[] = [];
    const errors: unknown[] = [];
    let stolen: QueueMessage | null | undefined;
    let worker!: Worker;
    const finished = new Promise<QueueMessage>((resolve) => {
      worker = client.queues.work(
        queue,
        async (m) => {
          // While this runs 3 leases long, another consumer waits for the message in vain.
          stolen = await other.queues.consume(queue, { waitSeconds: 3 });
          resolve(m);
        },
        { leaseSeconds: 1, onLeaseLost: (info) => lost.push(info), onError: (e) => errors.push(e) },
      );
    });
    const m = await finished;
    await worker.stop();
    expect(m.id).toBe(put.id);
    expect(stolen).toBeNull();
    await other.close();
    expect(lost).toEqual([]);
    expect(errors).toEqual([]);
    expect(await queueEntry(queue)).toEqual({ depth: 0, inFlight: 0 });
  });

  it.skipIf(backend !== "postgres")(
    `the heartbeat extends by the queue's lease when this machine's clock runs ahead of the server's${backend === "postgres" ? "" : " (skipped: PGlite runs on this process's clock, so the two cannot differ; needs DATABASE_URL)"}`,
    async () => {
      const queue = "skewed";
      const put = await client.queues.put(queue, { job: 2 });
      /** The message's lease as the database sees it: its end (ms) and what is left of it (s). */
      const lease = async () => {
        const { rows } = await sql<{ until_ms: number; left_s: number }>`
          SELECT (extract(epoch FROM lease_until) * 1000)::float8 AS until_ms,
                 extract(epoch FROM lease_until - now())::float8 AS left_s
          FROM queue_messages WHERE id = ${put.id}`.execute(tables(t.server.deps.db));
        return rows[0];
      };
      // 29 s ahead of the database, whose clock the message's leaseExpiresAt (30 s on) is on. Only Date is
      // faked (timers are real), and it keeps running.
      vi.useFakeTimers({ toFake: ["Date"], now: Date.now() + 29_000, shouldAdvanceTime: true });
      let worker!: Worker;
      try {
        const left = await new Promise<number>((resolve, reject) => {
          worker = client.queues.work(
            queue,
            async () => {
              const granted = (await lease()).until_ms;
              // Once a beat moved the lease's end: what it left.
              await expect
                .poll(async () => Math.abs((await lease()).until_ms - granted), { timeout: 15_000 })
                .toBeGreaterThan(100);
              resolve((await lease()).left_s);
            },
            { onError: reject },
          );
        });
        // The queue's 30 s lease, not the second the two clocks made of it (every beat cut it to 1 s before).
        expect(left).toBeGreaterThan(20);
      } finally {
        vi.useRealTimers();
        await worker?.stop();
      }
      expect(await queueEntry(queue)).toEqual({ depth: 0, inFlight: 0 });
    },
  );

  it("a handler that throws gives its message back at once (nack), not after its 60 s lease", async () => {
    const queue = "flaky";
    await client.queues.put(queue, "x");
    const seen: number[] = [];
    const errors: unknown[] = [];
    let worker!: Worker;
    const second = new Promise<void>((resolve) => {
      worker = client.queues.work(
        queue,
        (m) => {
          seen.push(m.deliveries);
          if (m.deliveries === 1) throw new Error("first attempt fails");
          resolve();
        },
        { leaseSeconds: 60, waitSeconds: 25, onError: (e) => errors.push(e) },
      );
    });
    const started = Date.now();
    await second;
    await worker.stop();
    // Well under the 60 s lease (the test's own timeout is 60 s).
    expect(Date.now() - started).toBeLessThan(20_000);
    expect(seen).toEqual([1, 2]);
    expect(errors).toHaveLength(1);
    expect(await queueEntry(queue)).toEqual({ depth: 0, inFlight: 0 });
  });

  it("the nack follows the queue policy's retry delay", async () => {
    const queue = "delayed-retry";
    const policy = await client.queues.setPolicy(queue, { retryDelaySeconds: 2 });
    expect(policy).toMatchObject({ queue, retryDelaySeconds: 2 });
    expect((await client.queues.policy(queue)).retryDelaySeconds).toBe(2);
    await client.queues.put(queue, "x");
    const at: number[] = [];
    let worker!: Worker;
    const second = new Promise<void>((resolve) => {
      worker = client.queues.work(
        queue,
        (m) => {
          at.push(Date.now());
          if (m.deliveries === 1) throw new Error("fails once");
          resolve();
        },
        { leaseSeconds: 60, onError: () => {} },
      );
    });
    await second;
    await worker.stop();
    expect(at[1] - at[0]).toBeGreaterThanOrEqual(1_900);
  });

  it("takes batches with { max } and works each message once", async () => {
    const queue = "batched";
    const total = 30;
    const put = await client.queues.putBatch(
      queue,
      Array.from({ length: total }, (_, n) => ({ payload: { n } })),
    );
    expect(put.messages).toHaveLength(total);
    const maxes: number[] = [];
    const sizes: number[] = [];
    const c = createClient({
      baseUrl: t.url,
      token: app.token,
      fetch: async (input, init) => {
        const res = await fetch(input, init);
        if (urlOf(input).endsWith(`/${queue}/consume`)) {
          maxes.push((JSON.parse(init!.body as string) as { max: number }).max);
          sizes.push(((await res.clone().json()) as { messages: unknown[] }).messages.length);
        }
        return res;
      },
    });
    const handled: number[] = [];
    let worker!: Worker<{ n: number }>;
    await new Promise<void>((resolve) => {
      worker = c.queues.work<{ n: number }>(
        queue,
        (m) => {
          handled.push(m.payload.n);
          if (handled.length === total) resolve();
        },
        { concurrency: 10, batchSize: 10, waitSeconds: 1 },
      );
    });
    await worker.stop();
    await c.close();
    expect(handled.sort((a, b) => a - b)).toEqual(Array.from({ length: total }, (_, n) => n));
    expect(Math.max(...maxes)).toBe(10);
    expect(maxes.every((m) => m >= 1 && m <= 10)).toBe(true);
    expect(Math.max(...sizes)).toBeGreaterThan(1);
    expect(await queueEntry(queue)).toEqual({ depth: 0, inFlight: 0 });
  });

  it("extend and nack by receipt, and context.nack(delay) from a handler", async () => {
    const queue = "manual";
    await client.queues.put(queue, "m");
    const m = (await client.queues.consume(queue, { waitSeconds: 5, leaseSeconds: 5 }))!;
    const extended = await client.queues.extend(m.receipt, 120);
    expect(extended.extended).toBe(true);
    expect(extended.leaseExpiresAt).toBeGreaterThan(Date.now() + 100_000);
    expect(await client.queues.nack(m.receipt, { delaySeconds: 0 })).toBe(true);
    expect(await client.queues.nack(m.receipt)).toBe(false);
    expect((await client.queues.extend(m.receipt, 10)).extended).toBe(false);

    const deliveries: number[] = [];
    let worker!: Worker;
    await new Promise<void>((resolve) => {
      worker = client.queues.work(queue, (msg, context) => {
        deliveries.push(msg.deliveries);
        if (msg.deliveries === 2) return context.nack(0);
        resolve();
      });
    });
    await worker.stop();
    expect(deliveries).toEqual([2, 3]);
    expect(await queueEntry(queue)).toEqual({ depth: 0, inFlight: 0 });
  });

  it("a put with a dedupKey used within the window adds nothing and answers the first id", async () => {
    const queue = "dedup";
    const first = await client.queues.put(queue, { order: 7 }, { dedupKey: "order-7" });
    const again = await client.queues.put(queue, { order: 7 }, { dedupKey: "order-7" });
    expect(again).toMatchObject({ id: first.id, deduplicated: true });
    expect(await queueEntry(queue)).toEqual({ depth: 1, inFlight: 0 });
  });
});

describe("purge, a message's status, priorities and failure reasons in the client", () => {
  it("puts by priority, tells a message's status (null once acked), purges, and a failing handler's reason is kept", async () => {
    const queue = "typed-controls";
    const low = await client.queues.put(queue, { n: 1 });
    const high = await client.queues.put(queue, { n: 2 }, { priority: 7 });
    await client.queues.putBatch(queue, [{ payload: { n: 3 }, priority: 9 }]);
    expect(await client.queues.message(queue, low.id)).toMatchObject({ status: "waiting", deliveries: 0 });

    const first = (await client.queues.consume<{ n: number }>(queue, { waitSeconds: 0 }))!;
    expect(first.payload).toEqual({ n: 3 });
    const second = (await client.queues.consume<{ n: number }>(queue, { waitSeconds: 0, leaseSeconds: 300 }))!;
    expect(second.id).toBe(high.id);
    expect(await client.queues.message(queue, high.id)).toMatchObject({ status: "leased", deliveries: 1 });
    expect(await client.queues.ack(first.receipt)).toBe(true);
    expect(await client.queues.message(queue, first.id)).toBeNull();
    expect(await client.queues.nack(second.receipt, { delaySeconds: 600, reason: "not today" })).toBe(true);
    expect(await client.queues.message(queue, high.id)).toMatchObject({
      status: "delayed",
      failureReason: "not today",
    });

    // A worker whose handler throws nacks with the error as the reason.
    const failed = new Promise<void>((resolve) => {
      const worker = client.queues.work(
        queue,
        () => {
          throw new TypeError("no such user");
        },
        {
          onError: () => {
            resolve();
            void worker.stop();
          },
        },
      );
    });
    await failed;
    await vi.waitFor(async () =>
      expect(await client.queues.message(queue, low.id)).toMatchObject({ failureReason: "TypeError: no such user" }),
    );

    expect(await client.queues.purge(queue)).toBe(2);
    expect(await client.queues.purge(queue, { includeLeased: true })).toBe(0);
    expect(await client.queues.message(queue, low.id)).toBeNull();
  });
});
