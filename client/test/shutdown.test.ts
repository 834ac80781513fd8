/**
 * Shutting a client down the README's way (`createClient({ signal })`, the
 * signal aborted at SIGTERM) while handlers run: consuming stops first, the
 * running handlers finish with their own platform calls intact, their
 * messages are acked, analytics are flushed, and only then are calls
 * aborted. A handler that never settles is abandoned after the timeout and
 * named, instead of keeping the shutdown pending forever.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startServer, type TestServer } from "../../test/support/harness.ts";
import { createClient, type QueueMessage } from "../src/index.ts";

let t: TestServer;

beforeAll(async () => {
  // A mail domain gives every app a sender address.
  t = await startServer({ env: { MAIL_DOMAIN: "apps.example" } });
});
afterAll(() => t?.close());

/** A promise with its resolve function, to hold handlers until the test lets them go. */
function gate() {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { open, opened };
}

async function queueEntry(token: string, queue: string) {
  const c = createClient({ baseUrl: t.url, token });
  const q = (await c.queues.list()).find((e) => e.name === queue);
  await c.close();
  return { depth: q?.depth ?? 0, inFlight: q?.inFlight ?? 0 };
}

describe("shutdown", () => {
  it("a SIGTERM-style abort of the client's signal lets 4 running jobs send their mail and acks them: 4 mails, 0 redeliveries", async () => {
    const a = await t.createApp();
    const queue = "signups";
    const setup = createClient({ baseUrl: t.url, token: a.token });
    await setup.analytics.registerType({ name: "welcome.sent" });
    for (let i = 0; i < 4; i++) await setup.queues.put(queue, { to: `user${i}@example.com` });
    await setup.close();

    const sigterm = new AbortController();
    const client = createClient({ baseUrl: t.url, token: a.token, signal: sigterm.signal });
    const started: string[] = [];
    const allStarted = gate();
    const release = gate();
    const sent: string[] = [];
    const errors: unknown[] = [];
    const worker = client.queues.work<{ to: string }>(
      queue,
      async (m: QueueMessage<{ to: string }>, { signal }) => {
        started.push(m.id);
        if (started.length === 4) allStarted.open();
        await release.opened;
        // As the README's worker does: the handler hands its signal to its own calls.
        await client.mail.send({ to: m.payload.to, subject: "Welcome", text: "Hello" }, { signal });
        client.analytics.track("welcome.sent");
        sent.push(m.payload.to);
      },
      { concurrency: 4, leaseSeconds: 60, onError: (e) => errors.push(e) },
    );
    await allStarted.opened;
    sigterm.abort(); // what the README's SIGTERM handler does
    release.open();
    const stopped = await client.close(); // the same shutdown the abort started
    await worker.done;

    expect(errors).toEqual([]);
    expect(sent).toHaveLength(4);
    expect(stopped.abandoned).toEqual([]);
    expect(stopped.analytics).toEqual({ recorded: 4, dropped: 0 });
    const { mails } = await t.admin.listMail({ appId: a.id });
    expect(mails).toHaveLength(4);
    // Acked: nothing waits and nothing is leased, so nothing can come back.
    expect(await queueEntry(a.token, queue)).toEqual({ depth: 0, inFlight: 0 });
    const after = createClient({ baseUrl: t.url, token: a.token });
    expect(await after.queues.consume(queue, { waitSeconds: 0 })).toBeNull();
    await after.close();
  });

  it("a handler that never settles is abandoned after the timeout, and named", async () => {
    const a = await t.createApp();
    const queue = "stuck";
    const setup = createClient({ baseUrl: t.url, token: a.token });
    const put = await setup.queues.put(queue, "forever");
    const done = await setup.queues.put(queue, "quick");
    await setup.close();

    const client = createClient({ baseUrl: t.url, token: a.token, shutdownTimeoutMs: 300 });
    const started = gate();
    let count = 0;
    let abortedReason: unknown;
    client.queues.work<string>(
      queue,
      async (m, { signal }) => {
        if (++count === 2) started.open();
        if (m.payload === "quick") return;
        signal.addEventListener("abort", () => (abortedReason = signal.reason));
        await new Promise(() => {}); // never settles
      },
      { concurrency: 2, leaseSeconds: 60, onError: () => {} },
    );
    await started.opened;
    const result = await client.close();
    expect(result.abandoned.map((m) => m.id)).toEqual([put.id]);
    expect(abortedReason).toBeDefined();
    // The quick one was acked, the abandoned one is still leased (it comes back after its lease).
    expect(await queueEntry(a.token, queue)).toEqual({ depth: 0, inFlight: 1 });
    expect(done.id).not.toBe(put.id);
  });

  it("worker.stop({ timeoutMs }) resolves with the abandoned jobs", async () => {
    const a = await t.createApp();
    const client = createClient({ baseUrl: t.url, token: a.token });
    const put = await client.queues.put("w", 1);
    const started = gate();
    const worker = client.queues.work("w", () => (started.open(), new Promise(() => {})), { onError: () => {} });
    await started.opened;
    const result = await worker.stop({ timeoutMs: 100 });
    expect(result.abandoned.map((m) => m.id)).toEqual([put.id]);
    expect((await worker.done).abandoned.map((m) => m.id)).toEqual([put.id]);
    await client.close({ timeoutMs: 100 });
  });
});
