/**
 * A consume whose answer cannot be written gives its leases back: the
 * messages it claimed go back in line at once, their delivery uncounted,
 * instead of staying leased to nobody for the whole lease.
 *
 * The answer is made unwritable without timing: the consume leases 100
 * messages of 200 KB (an answer of about 20 MB) for a client that reads
 * nothing. Over HTTP/1.1 the answer fills the connection's buffers and stays
 * queued in the server; over HTTP/2 flow control holds it after the first
 * 64 KB. Once the messages are leased (the listing's `inFlight`), the client
 * leaves (HTTP/1.1: its socket destroyed; HTTP/2: RST_STREAM CANCEL). REST and
 * Connect, each over HTTP/1.1 and h2c.
 */
import http2 from "node:http2";
import net from "node:net";
import { afterAll, describe, expect, it, vi } from "vitest";
import { useTestApp, useTestServer } from "../support/harness.ts";

const COUNT = 100;
const PAYLOAD = "x".repeat(200_000);
const LONG_LEASE_SECONDS = 600;

const t = useTestServer();
const app = useTestApp(t);
const sessions: http2.ClientHttp2Session[] = [];
afterAll(() => sessions.forEach((s) => s.destroy()));

async function fill(queue: string) {
  for (let i = 0; i < COUNT; i += 25) {
    const res = await t.request("POST", `/v1/queues/${queue}/batch`, {
      token: app.token,
      body: { messages: Array.from({ length: 25 }, () => ({ payload: PAYLOAD })) },
    });
    expect(res.status).toBe(200);
  }
}

async function entry(queue: string) {
  const res = await t.request("GET", "/v1/queues", { token: app.token });
  const q = (res.body as { queues: { name: string; depth: number; inFlight: number }[] }).queues.find(
    (e) => e.name === queue,
  );
  return { depth: q?.depth ?? 0, inFlight: q?.inFlight ?? 0 };
}

/** The call's path and JSON body for REST or Connect. */
function call(api: "rest" | "connect", queue: string) {
  return api === "rest"
    ? { path: `/v1/queues/${queue}/consume`, body: { max: COUNT, waitSeconds: 0, leaseSeconds: LONG_LEASE_SECONDS } }
    : {
        path: "/platform.queues.v1.QueueService/ConsumeMessage",
        body: { queue, max: COUNT, waitSeconds: 0, leaseSeconds: LONG_LEASE_SECONDS },
      };
}

/** Sends the consume over HTTP/1.1 on a socket that reads nothing; returns the socket to cut. */
function sendHttp1(path: string, body: unknown): net.Socket {
  const { port } = new URL(t.url);
  const socket = net.connect(Number(port), "127.0.0.1");
  socket.pause();
  const text = JSON.stringify(body);
  socket.write(
    `POST ${path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${app.token}\r\n` +
      `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\n\r\n${text}`,
  );
  return socket;
}

/** Sends the consume over h2c without reading its answer; returns the stream to reset. */
function sendH2(path: string, body: unknown): http2.ClientHttp2Stream {
  const session = http2.connect(t.url);
  sessions.push(session);
  const stream = session.request({
    ":method": "POST",
    ":path": path,
    authorization: `Bearer ${app.token}`,
    "content-type": "application/json",
  });
  stream.pause();
  stream.end(JSON.stringify(body));
  return stream;
}

describe("a consume whose answer could not be written gives its leases back", () => {
  for (const api of ["rest", "connect"] as const)
    for (const version of ["http/1.1", "h2c"] as const)
      it(`${api} over ${version}: 100 messages leased for a client that left are back in line at once, deliveries uncounted`, async () => {
        const queue = `undelivered-${api}-${version === "h2c" ? "h2" : "h1"}`;
        await fill(queue);
        expect(await entry(queue)).toEqual({ depth: COUNT, inFlight: 0 });
        const { path, body } = call(api, queue);
        const cut =
          version === "http/1.1"
            ? (
                (s) => () =>
                  s.destroy()
              )(sendHttp1(path, body))
            : (
                (s) => () =>
                  s.close(http2.constants.NGHTTP2_CANCEL)
              )(sendH2(path, body));
        // Leased: the answer is being written, and cannot be finished while the client reads nothing.
        await vi.waitFor(async () => expect((await entry(queue)).inFlight).toBe(COUNT), {
          timeout: 20_000,
          interval: 50,
        });
        cut();
        // Given back without waiting out the 600 s lease.
        await vi.waitFor(async () => expect(await entry(queue)).toEqual({ depth: COUNT, inFlight: 0 }), {
          timeout: 10_000,
          interval: 50,
        });
        const again = await t.request("POST", `/v1/queues/${queue}/consume`, {
          token: app.token,
          body: { waitSeconds: 0 },
        });
        expect(again.body.message.deliveries).toBe(1);
      });
});
