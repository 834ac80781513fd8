/**
 * Edges of the transports that answered wrongly once (issue: the serving
 * layer): a REST consume whose HTTP/2 stream is reset at any moment leaves no
 * waiter behind.
 */
import http2 from "node:http2";
import { once } from "node:events";
import { describe, expect, it } from "vitest";
import { useTestApp, useTestServer } from "../support/harness.ts";

const t = useTestServer();
const app = useTestApp(t);

function waitingConsumers(): number {
  const m = t.server.deps.metrics.registry.getSingleMetric("queue_waiting_consumers") as unknown as {
    hashMap: Record<string, { value: number }>;
  };
  return Object.values(m.hashMap).reduce((sum, v) => sum + v.value, 0);
}

/** Polls until `check()` holds (an event the test cannot await directly: the server's own bookkeeping). */
async function until(check: () => boolean, what: string, ms = 10_000): Promise<void> {
  const started = Date.now();
  while (!check()) {
    if (Date.now() - started > ms) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setImmediate(r));
  }
}

describe("REST consume over HTTP/2, stream reset before the body ends", () => {
  it("leaves no waiter, at any moment of the reset; the next put goes to a live consumer at once", async () => {
    const queue = "reset-" + Date.now();
    const session = http2.connect(t.url);
    session.on("error", () => {});
    const resets: Promise<unknown>[] = [];
    // Resets at different moments: at once, after a tick, after the headers reached the server, and with a partial body.
    for (let i = 0; i < 40; i++) {
      const headers: http2.OutgoingHttpHeaders = {
        ":method": "POST",
        ":path": `/v1/queues/${queue}/consume`,
        authorization: `Bearer ${app.token}`,
      };
      if (i % 2 === 0) headers["content-type"] = "application/json";
      const stream = session.request(headers, { endStream: false });
      stream.on("error", () => {});
      if (i % 4 === 1) stream.write('{"waitSeconds":');
      const closed = once(stream, "close");
      const delay = i % 5;
      const reset = () => stream.close(http2.constants.NGHTTP2_CANCEL);
      if (delay === 0) reset();
      else if (delay === 1) setImmediate(reset);
      else setTimeout(reset, delay * 10);
      resets.push(closed);
    }
    await Promise.all(resets);
    // The server's side of each stream is gone: no waiter may remain (the gauge is incremented before any wait).
    await until(() => waitingConsumers() === 0, "waiters to leave");
    const live = t.request("POST", `/v1/queues/${queue}/consume`, {
      token: app.token,
      body: { waitSeconds: 20 },
      http: "h2c",
    });
    await until(() => waitingConsumers() === 1, "the live consumer to wait");
    const started = Date.now();
    const put = await t.request("POST", `/v1/queues/${queue}`, { token: app.token, body: { payload: { n: 1 } } });
    expect(put.status).toBe(200);
    const got = await live;
    expect(got.status).toBe(200);
    expect(got.body.message.deliveries).toBe(1);
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(waitingConsumers()).toBe(0);
    session.close();
  });
});
