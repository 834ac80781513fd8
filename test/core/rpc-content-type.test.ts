/**
 * An RPC sent with a content type no protocol here speaks is 415 Unsupported Media Type with the accepted
 * types in `Accept-Post`, as the Connect and gRPC-over-HTTP/2 specifications ask (found by the Connect
 * conformance suite's "unexpected content type" cases: it was the REST envelope's 400 "must be
 * application/json"). REST keeps its 400.
 */
import { describe, expect, it } from "vitest";
import { useTestApp, useTestServer } from "../support/harness.ts";
import { h2Call } from "../support/raw-rpc.ts";

const t = useTestServer();
const app = useTestApp(t);
const LIST = "/platform.queues.v1.QueueService/ListQueues";

describe("an RPC with a content type no protocol speaks", () => {
  it.each(["image/jpeg", "application/foo"])("is 415 over HTTP/1.1 (%s)", async (type) => {
    const res = await fetch(t.url + LIST, {
      method: "POST",
      headers: { "content-type": type, authorization: `Bearer ${app.token}` },
      body: "{}",
    });
    expect(res.status).toBe(415);
    expect(res.headers.get("accept-post")).toContain("application/grpc");
    expect(res.headers.get("accept-post")).toContain("application/json");
  });

  it("is 415 over h2c", async () => {
    const answer = await h2Call(
      t.url,
      LIST,
      { "content-type": "image/jpeg", authorization: `Bearer ${app.token}` },
      Buffer.from("{}"),
    );
    expect(answer.status).toBe(415);
    expect(answer.headers["accept-post"]).toContain("application/connect+proto");
  });

  it("leaves REST's answer to a wrong content type as it was: 400 with the envelope", async () => {
    const res = await fetch(t.url + "/v1/queues/jobs", {
      method: "POST",
      headers: { "content-type": "text/plain", authorization: `Bearer ${app.token}` },
      body: "{}",
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("invalid_argument");
  });
});
