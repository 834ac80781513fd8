/**
 * `queues.work` against the real service, with real concurrency: many
 * messages over two workers of several slots each (no message handled twice
 * while its lease lasts), a graceful abort in the middle of work, a failing
 * handler's message coming back after its lease, and `onLeaseLost` for a
 * handler that outlives a short lease. Nothing sleeps: every step awaits an
 * answer of the server or a promise the handlers resolve.
 */
import { urlOf } from "./support.ts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startServer, type TestApp, type TestServer } from "../../test/support/harness.ts";
import { createClient, PlatformError, type LeaseLost, type PlatformClient, type QueueMessage } from "../src/index.ts";

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

/** Resolves once `condition()` holds, re-checked whenever `poke()` is called. */
function createProbe() {
  const waiters = new Set<() => void>();
  return {
    poke() {
      for (const w of [...waiters]) w();
    },
    until(condition: () => boolean): Promise<void> {
      return new Promise((resolve) => {
        const check = () => {
          if (!condition()) return;
          waiters.delete(check);
          resolve();
        };
        waiters.add(check);
        check();
      });
    },
  };
}

/** A promise with its resolve function, to hold handlers until the test lets them go. */
function gate() {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { open, opened };
}

/** Consumes long-polling on the server right now (its /metrics gauge). */
async function waitingConsumers(): Promise<number> {
  const text = await (await fetch(`${t.url}/metrics`)).text();
  return Number(/^queue_waiting_consumers (\S+)$/m.exec(text)?.[1]);
}

async function queueEntry(queue: string) {
  const q = (await client.queues.list()).find((e) => e.name === queue);
  return { depth: q?.depth ?? 0, inFlight: q?.inFlight ?? 0 };
}

describe("queues.work", () => {
  it("works many messages with two workers of four slots: each once, at most one handler per message", async () => {
    const queue = "many";
    const total = 60;
    for (let i = 0; i < total; i++) await client.queues.put(queue, { n: i });
    const probe = createProbe();
    const handled = new Map<string, number>();
    const deliveries: number[] = [];
    let running = 0;
    let maxRunning = 0;
    const perWorkerMax = [0, 0];
    const perWorkerRunning = [0, 0];
    // The first handlers wait until all eight slots are busy: proof of real concurrency.
    const allBusy = probe.until(() => running === 8);
    const handler = (w: number) => async (m: QueueMessage<{ n: number }>) => {
      running++;
      perWorkerRunning[w]++;
      maxRunning = Math.max(maxRunning, running);
      perWorkerMax[w] = Math.max(perWorkerMax[w], perWorkerRunning[w]);
      if (handled.has(m.id)) throw new Error(`message ${m.payload.n} handled twice`);
      handled.set(m.id, m.payload.n);
      deliveries.push(m.deliveries);
      probe.poke();
      await allBusy;
      running--;
      perWorkerRunning[w]--;
      probe.poke();
    };
    const second = createClient({ baseUrl: t.url, token: app.token });
    const errors: unknown[] = [];
    const workers = [
      client.queues.work(queue, handler(0), { concurrency: 4, onError: (e) => errors.push(e) }),
      second.queues.work(queue, handler(1), { concurrency: 4, onError: (e) => errors.push(e) }),
    ];
    await probe.until(() => handled.size === total && running === 0);
    await Promise.all(workers.map((w) => w.stop()));
    await second.close();

    expect(errors).toEqual([]);
    expect([...handled.values()].sort((a, b) => a - b)).toEqual(Array.from({ length: total }, (_, i) => i));
    expect(deliveries.every((d) => d === 1)).toBe(true);
    expect(maxRunning).toBe(8);
    expect(perWorkerMax).toEqual([4, 4]);
    expect(await queueEntry(queue)).toEqual({ depth: 0, inFlight: 0 });
  });

  it("an abort mid-work ends the waiting consume, starts no new one, waits for running handlers and acks them", async () => {
    const queue = "abort";
    await client.queues.put(queue, "a");
    await client.queues.put(queue, "b");
    const probe = createProbe();
    const consumes: { settled: boolean }[] = [];
    const counting: typeof fetch = (input, init) => {
      const p = fetch(input, init);
      if (urlOf(input).endsWith("/consume")) {
        const record = { settled: false };
        consumes.push(record);
        probe.poke();
        p.then(
          () => ((record.settled = true), probe.poke()),
          () => ((record.settled = true), probe.poke()),
        );
      }
      return p;
    };
    const c = createClient({ baseUrl: t.url, token: app.token, fetch: counting });
    const release = gate();
    const started: string[] = [];
    const finished: string[] = [];
    const controller = new AbortController();
    const worker = c.queues.work<string>(
      queue,
      async (m) => {
        started.push(m.payload);
        probe.poke();
        await release.opened;
        finished.push(m.payload);
      },
      { concurrency: 3, signal: controller.signal },
    );
    let done = false;
    void worker.done.then(() => (done = true));
    // Two handlers run and the third slot long-polls the now empty queue.
    await probe.until(() => started.length === 2 && consumes.length === 3);
    expect(worker.running).toBe(2);
    controller.abort();
    // The long-poll ends at once (it would otherwise wait 25 s) ...
    await probe.until(() => consumes[2].settled);
    // The server drops its waiter when it sees the connection go (the same instant or a moment
    // later); a put racing that moment could be handed to the gone consume and lapse later.
    while ((await waitingConsumers()) !== 0);
    // ... while the handlers still run, so the worker is not done.
    await client.queues.put(queue, "c");
    expect(await queueEntry(queue)).toEqual({ depth: 1, inFlight: 2 });
    expect(done).toBe(false);
    release.open();
    await worker.done;
    expect(finished.sort()).toEqual(["a", "b"]);
    // No consume after the abort: "c" is still waiting; "a" and "b" were acked.
    expect(consumes).toHaveLength(3);
    expect(await queueEntry(queue)).toEqual({ depth: 1, inFlight: 0 });
    await c.close();
  });

  it("a failing handler's message comes back after its lease and is then acked", async () => {
    const queue = "fails";
    const put = await client.queues.put(queue, { job: "flaky" });
    const errors: [unknown, QueueMessage | undefined][] = [];
    const seen: number[] = [];
    const succeeded = gate();
    const worker = client.queues.work(
      queue,
      async (m) => {
        seen.push(m.deliveries);
        if (m.deliveries === 1) throw new Error("first attempt fails");
        succeeded.open();
      },
      { leaseSeconds: 1, waitSeconds: 5, onError: (e, m) => errors.push([e, m]) },
    );
    await succeeded.opened;
    await worker.stop();
    expect(seen).toEqual([1, 2]);
    expect(errors).toHaveLength(1);
    expect((errors[0][0] as Error).message).toBe("first attempt fails");
    expect(errors[0][1]!.id).toBe(put.id);
    expect(await queueEntry(queue)).toEqual({ depth: 0, inFlight: 0 });
  });

  it("a handler that outlives its lease: the late ack is reported to onLeaseLost with acked: false", async () => {
    const queue = "slow";
    const put = await client.queues.put(queue, { job: "slow" });
    const lost = gate();
    const reports: LeaseLost[] = [];
    let stolen: QueueMessage | null = null;
    const worker = client.queues.work(
      queue,
      async (m) => {
        // Work until the lease has lapsed: another consumer is handed the same message.
        while (stolen?.id !== m.id) stolen = await client.queues.consume(queue, { waitSeconds: 5, leaseSeconds: 60 });
      },
      {
        leaseSeconds: 1,
        // Without the heartbeat, which would keep the lease while the handler runs.
        heartbeat: false,
        onLeaseLost: (info) => {
          reports.push(info);
          lost.open();
        },
      },
    );
    await lost.opened;
    await worker.stop();
    expect(reports).toHaveLength(1);
    expect([reports[0].acked, reports[0].afterRetry]).toEqual([false, false]);
    expect(reports[0].message.id).toBe(put.id);
    expect(stolen!.deliveries).toBe(2);
    // The new lease is untouched by the late ack.
    expect(await client.queues.ack(stolen!.receipt)).toBe(true);
  });

  it("stops with the error when the queue name is refused", async () => {
    const errors: unknown[] = [];
    const worker = client.queues.work("Not A Queue", () => {}, { onError: (e) => errors.push(e) });
    const err = await worker.done.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(PlatformError);
    expect((err as PlatformError).code).toBe("invalid_argument");
    expect(errors).toEqual([err]);
  });

  it("close() stops every worker of the client", async () => {
    const c = createClient({ baseUrl: t.url, token: app.token });
    const worker = c.queues.work("idle", () => {}, { concurrency: 2 });
    await c.close();
    await worker.done;
    expect(worker.running).toBe(0);
  });
});
