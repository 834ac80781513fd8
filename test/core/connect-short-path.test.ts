/**
 * The unary short path (src/core/http/connect-short-path.ts) on its own: the narrow case it takes
 * (Connect JSON, no deadline, no compression) answers exactly as Connect's plugin answers the same call
 * sent on the plugin's path (a deadline header makes the short path hand it on), for a success and for
 * an error; and its frame and header helpers write what the protocols say.
 */
import { describe, expect, it } from "vitest";
import { GRPC_WEB_TRAILER_FLAG, grpcWebTrailer, nodeHeaders } from "../../src/core/http/connect-short-path.ts";
import { useTestApp, useTestServer } from "../support/harness.ts";

const t = useTestServer();
const app = useTestApp(t);

/** One Connect unary call as JSON; `plugin` adds a deadline, which only the plugin serves. */
async function call(method: string, body: unknown, plugin: boolean) {
  const res = await fetch(`${t.url}/platform.queues.v1.QueueService/${method}`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${app.token}`,
      "content-type": "application/json",
      ...(plugin ? { "connect-timeout-ms": "60000" } : {}),
    },
    body: JSON.stringify(body),
  });
  return {
    status: res.status,
    type: res.headers.get("content-type"),
    body: (await res.json()) as Record<string, unknown>,
  };
}

describe("the short path answers as the plugin does", () => {
  it("a success: the same status, content type and message shape", async () => {
    const short = await call("PutMessage", { queue: "short", payload: { n: 1 } }, false);
    const plugin = await call("PutMessage", { queue: "short", payload: { n: 2 } }, true);
    expect(short.status).toBe(200);
    expect([plugin.status, plugin.type]).toEqual([short.status, short.type]);
    expect(Object.keys(short.body).sort()).toEqual(Object.keys(plugin.body).sort());
    expect(typeof short.body.id).toBe("string");
  });

  it("an error: the same status and the same code and message", async () => {
    const short = await call("PutMessage", { queue: "no spaces allowed", payload: 1 }, false);
    const plugin = await call("PutMessage", { queue: "no spaces allowed", payload: 1 }, true);
    expect(short.status).toBe(400);
    expect(plugin.status).toBe(short.status);
    expect(short.body.code).toBe("invalid_argument");
    expect({ code: plugin.body.code, message: plugin.body.message }).toEqual({
      code: short.body.code,
      message: short.body.message,
    });
  });

  it("ignores an unknown JSON field, as Connect does by default", async () => {
    const short = await call("PutMessage", { queue: "short", payload: 3, notAField: true }, false);
    expect(short.status).toBe(200);
  });
});

describe("its frames and headers", () => {
  it("a gRPC-Web trailer frame holds the fields as HTTP/1 header lines, in Headers' order", () => {
    const trailer = new Headers({ "grpc-status": "0", "x-b": "2", "grpc-message": "" });
    expect(new TextDecoder().decode(grpcWebTrailer(trailer))).toBe("grpc-message: \r\ngrpc-status: 0\r\nx-b: 2\r\n");
    expect(GRPC_WEB_TRAILER_FLAG).toBe(0x80);
  });

  it("node headers keep set-cookie's values apart and join the others", () => {
    const headers = new Headers();
    headers.append("set-cookie", "a=1");
    headers.append("set-cookie", "b=2");
    headers.append("x-many", "1");
    headers.append("x-many", "2");
    expect(nodeHeaders(headers)).toEqual({ "set-cookie": ["a=1", "b=2"], "x-many": "1, 2" });
  });
});
