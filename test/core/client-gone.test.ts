/**
 * A call's client-gone signal (src/core/http/client-gone.ts), on a real HTTP/1.1 server and client: no
 * listener until the signal is read; read before the client goes, it aborts when it goes; read after, it
 * comes aborted; once the call is done, a close is not a client gone, and the listener is gone.
 */
import http from "node:http";
import type net from "node:net";
import { once } from "node:events";
import { afterEach, describe, expect, it } from "vitest";
import { clientGoneSignal } from "../../src/core/http/client-gone.ts";

const servers: http.Server[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
});

/** A server whose requests are handed to the test, and a request to it whose socket the test can cut. */
async function oneRequest(): Promise<{ res: http.ServerResponse; cut: () => void }> {
  const server = http.createServer();
  servers.push(server);
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as net.AddressInfo;
  const arrived = once(server, "request") as Promise<[http.IncomingMessage, http.ServerResponse]>;
  const req = http.get({ port, host: "127.0.0.1", path: "/", agent: false });
  req.on("error", () => {});
  const [, res] = await arrived;
  return { res, cut: () => req.destroy() };
}

const reason = () => new Error("client went away");

describe("clientGoneSignal", () => {
  it("listens for nothing until the signal is read, then aborts it when the client goes", async () => {
    const { res, cut } = await oneRequest();
    const before = res.listenerCount("close");
    const call = clientGoneSignal(res, reason);
    expect(res.listenerCount("close")).toBe(before);
    const signal = call.signal;
    expect(signal.aborted).toBe(false);
    expect(res.listenerCount("close")).toBe(before + 1);
    const aborted = once(signal, "abort");
    cut();
    await aborted;
    expect((signal.reason as Error).message).toBe("client went away");
  });

  it("comes aborted when read after the client went", async () => {
    const { res, cut } = await oneRequest();
    const call = clientGoneSignal(res, reason);
    const closed = once(res, "close");
    cut();
    await closed;
    expect(call.signal.aborted).toBe(true);
  });

  it("after done(), a close is no client gone, and no listener is left behind", async () => {
    const { res, cut } = await oneRequest();
    const before = res.listenerCount("close");
    const call = clientGoneSignal(res, reason);
    const signal = call.signal;
    call.done();
    expect(res.listenerCount("close")).toBe(before);
    const closed = once(res, "close");
    cut();
    await closed;
    expect(signal.aborted).toBe(false);
    // Never read: done() touches nothing.
    const { res: res2 } = await oneRequest();
    const before2 = res2.listenerCount("close");
    clientGoneSignal(res2, reason).done();
    expect(res2.listenerCount("close")).toBe(before2);
  });
});
