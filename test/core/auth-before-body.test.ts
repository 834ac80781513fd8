/**
 * A call is authenticated when its head arrives, before its body is read
 * (src/core/http/rest-router.ts `onRequest`, connect-routes.ts `authenticate`):
 * a client without a valid token is refused whatever its body, so a body of
 * 32 MiB, or a gzip body that inflates 1000-fold, is never parsed for it.
 * Shown by bodies that would fail to parse: the answer is the token's refusal.
 */
import zlib from "node:zlib";
import http2 from "node:http2";
import { describe, expect, it } from "vitest";
import { useTestServer } from "../support/harness.ts";

const t = useTestServer();

describe("authentication before the body", () => {
  it("REST: a malformed or huge body without a valid token is 401, not 400", async () => {
    for (const token of [undefined, "pbt_not_a_token"]) {
      const bad = await fetch(`${t.url}/v1/queues/jobs`, {
        method: "POST",
        headers: { "content-type": "application/json", ...(token ? { authorization: `Bearer ${token}` } : {}) },
        body: "{ not json",
      });
      expect(bad.status).toBe(401);
      expect((await bad.json()).error.code).toBe("unauthenticated");
    }
    const big = await fetch(`${t.url}/v1/queues/jobs`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: `{"payload":[${"0,".repeat(4_000_000)}0]}`,
    });
    expect(big.status).toBe(401);
    // With a valid token the same malformed body is the body's 400.
    const app = await t.createApp();
    const withToken = await fetch(`${t.url}/v1/queues/jobs`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${app.token}` },
      body: "{ not json",
    });
    expect(withToken.status).toBe(400);
  });

  it("Connect and gRPC: a body that is not gzip, sent as gzip with a bad token, is unauthenticated", async () => {
    const notGzip = Buffer.from("this is not gzip at all");
    const connect = await fetch(`${t.url}/platform.queues.v1.QueueService/PutMessage`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "content-encoding": "gzip",
        authorization: "Bearer pbt_not_a_token",
      },
      body: notGzip,
    });
    expect(connect.status).toBe(401);
    expect((await connect.json()).code).toBe("unauthenticated");
    // gRPC over h2c: a compressed frame of garbage.
    const session = http2.connect(t.url);
    try {
      const frame = Buffer.concat([Buffer.from([1, 0, 0, 0, notGzip.length]), notGzip]);
      const stream = session.request({
        ":method": "POST",
        ":path": "/platform.queues.v1.QueueService/PutMessage",
        "content-type": "application/grpc",
        "grpc-encoding": "gzip",
        te: "trailers",
        authorization: "Bearer pbt_not_a_token",
      });
      const headers = await new Promise<http2.IncomingHttpHeaders>((resolve, reject) => {
        stream.once("response", resolve);
        stream.once("error", reject);
      });
      stream.resume();
      stream.end(frame);
      await new Promise((resolve) => stream.once("close", resolve));
      expect(headers["grpc-status"]).toBe("16");
    } finally {
      session.close();
    }
    // A valid token with that body: the body's own error (it is read now).
    const app = await t.createApp();
    const read = await fetch(`${t.url}/platform.queues.v1.QueueService/PutMessage`, {
      method: "POST",
      headers: { "content-type": "application/json", "content-encoding": "gzip", authorization: `Bearer ${app.token}` },
      body: zlib.gzipSync("{ not json"),
    });
    expect(read.status).toBe(400);
  });
});
