/**
 * A worker stopped while its queue is busy strands nothing: every consume in
 * flight at the stop that may bring a message is let finish, and what it
 * brings is given back at once (nack, no delay) instead of being dropped with
 * the aborted call and staying leased, to nobody, for a whole lease.
 *
 * Twenty runs of: a queue kept full by a producer, a worker of 8 slots (and
 * one taking batches), stopped after some messages were handled. Once `stop()`
 * has resolved, nothing of the queue is leased.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startServer, type TestServer } from "../../test/support/harness.ts";
import { createClient } from "../src/index.ts";

let t: TestServer;
beforeAll(async () => {
  t = await startServer();
});
afterAll(() => t?.close());

const RUNS = 20;

async function inFlight(token: string, queue: string): Promise<number> {
  const c = createClient({ baseUrl: t.url, token });
  const q = (await c.queues.list()).find((e) => e.name === queue);
  await c.close();
  return q?.inFlight ?? 0;
}

describe("a stop under load", () => {
  for (const batchSize of [1, 10])
    it(`leaves no message leased, in ${RUNS} runs (batchSize ${batchSize})`, async () => {
      const a = await t.createApp();
      const producer = createClient({ baseUrl: t.url, token: a.token });
      const stranded: number[] = [];
      for (let run = 0; run < RUNS; run++) {
        const queue = `busy-${run}`;
        await producer.queues.putBatch(
          queue,
          Array.from({ length: 100 }, (_, i) => ({ payload: i })),
        );
        // Puts keep coming while the worker runs and stops.
        let producing = true;
        const feeding = (async () => {
          while (producing) await producer.queues.put(queue, "more");
        })();
        const worker = createClient({ baseUrl: t.url, token: a.token });
        let handled = 0;
        let enough!: () => void;
        const reached = new Promise<void>((resolve) => (enough = resolve));
        const w = worker.queues.work(
          queue,
          async () => {
            if (++handled === 20 + run) enough();
            await new Promise((resolve) => setImmediate(resolve));
          },
          { concurrency: 8, batchSize, leaseSeconds: 120, onError: () => {} },
        );
        await reached;
        const result = await w.stop();
        expect(result.abandoned).toEqual([]);
        producing = false;
        await feeding;
        await worker.close();
        stranded.push(await inFlight(a.token, queue));
      }
      await producer.close();
      expect(stranded).toEqual(Array.from({ length: RUNS }, () => 0));
    });
});
