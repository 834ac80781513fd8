/**
 * Edges of the transports that answered wrongly once (issue: the serving
 * layer): a REST consume whose HTTP/2 stream is reset at any moment leaves no
 * waiter behind; the drain of HTTP/1.1 keep-alive connections answers every
 * request with `Connection: close` and resets none; a Connect call whose
 * client went away mid-body is never run on the part that came.
 */
import http from "node:http";
import http2 from "node:http2";
import { once } from "node:events";
import net, { type AddressInfo } from "node:net";
import { create, toBinary } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { PutMessagesRequestSchema, QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import { createOnePortServer } from "../../src/core/http/one-port.ts";
import { useTestApp, useTestServer } from "../support/harness.ts";
import { metricValue, until } from "../support/server-state.ts";

const logLines: string[] = [];
const t = useTestServer({ logLines, env: { LOG_LEVEL: "debug" } });
const app = useTestApp(t);

const waitingConsumers = () => metricValue(t, "queue_waiting_consumers");

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

describe("the drain of HTTP/1.1 keep-alive connections (src/core/http/one-port.ts)", () => {
  /** A one-port server whose handler answers each request only when the test says so. */
  async function heldServer() {
    const held: { url: string; res: http.ServerResponse }[] = [];
    let arrived: (() => void) | undefined;
    const server = createOnePortServer(
      (req, res) => {
        held.push({ url: req.url ?? "", res: res as http.ServerResponse });
        arrived?.();
      },
      { timeouts: { headersTimeoutMs: 5_000, requestTimeoutMs: 10_000, keepAliveTimeoutMs: 5_000 } },
    );
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const next = () =>
      held.length > 0
        ? Promise.resolve(held.shift()!)
        : new Promise<{ url: string; res: http.ServerResponse }>((resolve) => {
            arrived = () => {
              arrived = undefined;
              resolve(held.shift()!);
            };
          });
    return { server, url, next };
  }

  const get = (agent: http.Agent, url: string) =>
    new Promise<{ status: number; connection: string | undefined; body: string }>((resolve, reject) => {
      const req = http.get(url, { agent }, (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (d: string) => (body += d));
        res.once("end", () => resolve({ status: res.statusCode!, connection: res.headers.connection, body }));
      });
      req.once("error", reject);
    });

  it("a response under way when the drain begins carries Connection: close", async () => {
    const { server, url, next } = await heldServer();
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const first = get(agent, `${url}/a`);
      const a = await next();
      server.closeIdleConnections();
      a.res.end("a");
      expect(await first).toEqual({ status: 200, connection: "close", body: "a" });
    } finally {
      agent.destroy();
      server.closeAllConnections();
      server.close();
    }
  });

  it("a connection whose response went out as keep-alive before the drain still answers its next request", async () => {
    const { server, url, next } = await heldServer();
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const first = get(agent, `${url}/a`);
      const a = await next();
      // The header is out as keep-alive; then the drain begins while the body is still to come.
      a.res.writeHead(200);
      a.res.flushHeaders();
      a.res.write("a");
      await new Promise((r) => setImmediate(r));
      server.closeIdleConnections();
      a.res.end();
      expect(await first).toEqual({ status: 200, connection: "keep-alive", body: "a" });
      // The client sends its next request on the same connection: answered, with Connection: close, not reset.
      const second = get(agent, `${url}/b`);
      const b = await next();
      b.res.end("b");
      expect(await second).toEqual({ status: 200, connection: "close", body: "b" });
    } finally {
      agent.destroy();
      server.closeAllConnections();
      server.close();
    }
  });
});

describe("a Connect call whose client goes away before the end of its body (src/core/http/connect-short-path.ts)", () => {
  const PATH = "/platform.queues.v1.QueueService/PutMessages";
  /** Log lines of calls of the route that ended (the handler ran its course, whatever it answered). */
  const finished = () => logLines.filter((l) => l.includes("PutMessages") && l.includes("call ended")).length;
  /** A PutMessages of two messages, and the first part of it: a whole message, as a cut at the right byte makes it. */
  const bodies = (queue: string) => {
    const messages = ["first", "second"].map((value) => ({
      payload: { kind: { case: "stringValue" as const, value } },
    }));
    const full = toBinary(PutMessagesRequestSchema, create(PutMessagesRequestSchema, { queue, messages }));
    const part = toBinary(
      PutMessagesRequestSchema,
      create(PutMessagesRequestSchema, { queue, messages: messages.slice(0, 1) }),
    );
    expect(Buffer.from(full).subarray(0, part.length).equals(Buffer.from(part))).toBe(true);
    return Buffer.from(part);
  };
  const listed = async (queue: string) =>
    (await t.client(QueueService, app.token).listQueues({})).queues.filter((q) => q.name === queue);

  it("over HTTP/1.1 (chunked, the connection cut): runs nothing", async () => {
    const queue = `cut-h1-${Date.now()}`;
    const part = bodies(queue);
    const before = finished();
    const { port, hostname } = new URL(t.url);
    const socket = net.connect(Number(port), hostname);
    await once(socket, "connect");
    socket.on("error", () => {});
    socket.write(
      `POST ${PATH} HTTP/1.1\r\nhost: ${hostname}\r\ncontent-type: application/proto\r\n` +
        `authorization: Bearer ${app.token}\r\ntransfer-encoding: chunked\r\n\r\n`,
    );
    socket.write(Buffer.concat([Buffer.from(`${part.length.toString(16)}\r\n`), part, Buffer.from("\r\n")]));
    socket.destroy();
    // The server read what came, ran the call's handler, and gave up answering a client that is gone.
    await until(() => finished() > before, "the call to end");
    expect(await listed(queue)).toEqual([]);
  });

  it("over HTTP/2 (the stream's body never ended, the connection cut): runs nothing", async () => {
    const queue = `cut-h2-${Date.now()}`;
    const part = bodies(queue);
    const before = finished();
    const session = http2.connect(t.url);
    session.on("error", () => {});
    await once(session, "connect");
    const stream = session.request(
      { ":method": "POST", ":path": PATH, "content-type": "application/proto", authorization: `Bearer ${app.token}` },
      { endStream: false },
    );
    stream.on("error", () => {});
    await new Promise<void>((resolve) => stream.write(part, () => resolve()));
    session.destroy();
    // The server read what came, ran the call's handler, and gave up answering a client that is gone.
    await until(() => finished() > before, "the call to end");
    expect(await listed(queue)).toEqual([]);
  });
});
