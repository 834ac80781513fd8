/**
 * Errors answered before or without a response message, frame by frame, as
 * the protocols require them (docs/connect.md):
 * - gRPC over HTTP/2: Trailers-Only, one HEADERS frame with `:status` 200,
 *   `content-type`, `grpc-status`, `grpc-message` (and the details) carrying
 *   END_STREAM; no DATA frame, no trailers. Before, the HEADERS came without
 *   END_STREAM and an empty DATA frame ended the stream, which grpc-js and
 *   grpcio read as a crash. When the request body is still open, the stream is
 *   then reset with NO_ERROR.
 * - gRPC-Web: the status in the response headers, no body (Trailers-Only).
 * - Connect: a unary call's JSON error with the HTTP status of its code; a
 *   stream's 200 with the error in its end-of-stream message.
 * Over h2c and HTTP/1.1, whether the request body has ended or not.
 */
import http from "node:http";
import http2 from "node:http2";
import { create, toBinary } from "@bufbuild/protobuf";
import { beforeAll, describe, expect, it } from "vitest";
import { PutMessageRequestSchema, StreamMessagesRequestSchema } from "../../gen/platform/queues/v1/queues_pb.js";
import { useTestApp, useTestServer, type TestApp } from "../support/harness.ts";
import { grpcFrame } from "../support/raw-rpc.ts";

const t = useTestServer();
const app = useTestApp(t);
let stopped: TestApp;
beforeAll(async () => {
  stopped = await t.createApp();
  await stopped.stop();
});

const QUEUES = "/platform.queues.v1.QueueService";
const LIST = `${QUEUES}/ListQueues`;
const PUT = `${QUEUES}/PutMessage`;
const STREAM = `${QUEUES}/StreamMessages`;
const END_STREAM = 0x1;
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
const grpc = { "content-type": "application/grpc", te: "trailers" };
const putBytes = (queue: string) =>
  toBinary(
    PutMessageRequestSchema,
    create(PutMessageRequestSchema, { queue, payload: { kind: { case: "numberValue", value: 1 } } }),
  );

interface Frames {
  headers: Record<string, string>;
  /** The flags of the response's HEADERS frame. */
  flags: number;
  data: Buffer;
  trailers: Record<string, string> | undefined;
  /** The RST_STREAM code that closed the stream, when the request was left open. */
  rstCode: number | undefined;
}

/**
 * One request over h2c by Node's HTTP/2 client, which reports the flags of the
 * response's HEADERS frame. With `keepOpen` the request body never ends: the
 * stream can only close by the server's RST_STREAM.
 */
function h2Frames(path: string, headers: Record<string, string>, body: Uint8Array, keepOpen = false): Promise<Frames> {
  const session = http2.connect(t.url);
  session.on("error", () => {});
  return new Promise<Frames>((resolve, reject) => {
    const stream = session.request({ ":method": "POST", ":path": path, ...headers });
    const out: Frames = { headers: {}, flags: 0, data: Buffer.alloc(0), trailers: undefined, rstCode: undefined };
    stream.on("response", (h, flags) => {
      out.flags = flags;
      for (const [k, v] of Object.entries(h)) if (v !== undefined) out.headers[k] = String(v);
    });
    stream.on("data", (c: Buffer) => (out.data = Buffer.concat([out.data, c])));
    stream.on("trailers", (tr: http2.IncomingHttpHeaders) => {
      out.trailers = {};
      for (const [k, v] of Object.entries(tr)) if (v !== undefined) out.trailers[k] = String(v);
    });
    stream.on("error", reject);
    stream.on("close", () => {
      if (keepOpen) out.rstCode = stream.rstCode;
      resolve(out);
    });
    stream.write(body);
    if (!keepOpen) stream.end();
  }).finally(() => session.destroy());
}

/** One request over HTTP/1.1; with `keepOpen` its body is never ended (a chunked body still under way). */
function h1Call(
  path: string,
  headers: Record<string, string>,
  body: Uint8Array,
  keepOpen = false,
): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const req = http.request(t.url + path, { method: "POST", headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => {
        resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) });
        req.destroy();
      });
    });
    req.on("error", reject);
    req.write(body);
    if (!keepOpen) req.end();
  });
}

const cases: {
  name: string;
  path: string;
  headers: () => Record<string, string>;
  body: () => Uint8Array;
  status: string;
}[] = [
  { name: "no token", path: LIST, headers: () => grpc, body: () => grpcFrame(new Uint8Array(0)), status: "16" },
  {
    name: "a wrong token",
    path: PUT,
    headers: () => ({ ...grpc, ...bearer("pbt_wrong") }),
    body: () => grpcFrame(putBytes("jobs")),
    status: "16",
  },
  {
    name: "a stopped app's token",
    path: PUT,
    headers: () => ({ ...grpc, ...bearer(stopped.token) }),
    body: () => grpcFrame(putBytes("jobs")),
    status: "7",
  },
  {
    name: "an unknown method",
    path: `${QUEUES}/Nope`,
    headers: () => grpc,
    body: () => grpcFrame(new Uint8Array(0)),
    status: "12",
  },
  {
    name: "refused by the service (the short path)",
    path: PUT,
    headers: () => ({ ...grpc, ...bearer(app.token) }),
    body: () => grpcFrame(putBytes("Bad Name")),
    status: "3",
  },
  {
    name: "refused by the service (Connect's handler: a deadline)",
    path: PUT,
    headers: () => ({ ...grpc, ...bearer(app.token), "grpc-timeout": "10S" }),
    body: () => grpcFrame(putBytes("Bad Name")),
    status: "3",
  },
  {
    name: "a stream's request that does not parse",
    path: STREAM,
    headers: () => ({ ...grpc, ...bearer(app.token) }),
    body: () => grpcFrame(new Uint8Array([0xff, 0xff])),
    status: "3",
  },
  {
    name: "a stream refused by the service",
    path: STREAM,
    headers: () => ({ ...grpc, ...bearer(app.token) }),
    body: () =>
      grpcFrame(toBinary(StreamMessagesRequestSchema, create(StreamMessagesRequestSchema, { queue: "Bad Name" }))),
    status: "3",
  },
  {
    name: "a compressed flag without grpc-encoding",
    path: LIST,
    headers: () => ({ ...grpc, ...bearer(app.token) }),
    body: () => grpcFrame(new Uint8Array(0), 1),
    status: "3",
  },
  {
    name: "an encoding the server lacks (deflate)",
    path: LIST,
    headers: () => ({ ...grpc, ...bearer(app.token), "grpc-encoding": "deflate" }),
    body: () => grpcFrame(new Uint8Array(0), 1),
    status: "12",
  },
];

describe("gRPC over h2c: Trailers-Only", () => {
  it.each(cases)("$name: one HEADERS frame with END_STREAM, the status in it, no DATA, no trailers", async (c) => {
    const answer = await h2Frames(c.path, c.headers(), c.body());
    expect(answer.flags & END_STREAM, "END_STREAM on the HEADERS frame").toBe(END_STREAM);
    expect(answer.headers[":status"]).toBe("200");
    expect(answer.headers["content-type"]).toMatch(/^application\/grpc/);
    expect(answer.headers["grpc-status"]).toBe(c.status);
    expect(answer.headers["grpc-message"]).toBeTruthy();
    expect(answer.headers["grpc-status-details-bin"]).toBeTruthy();
    expect([answer.data.length, answer.trailers]).toEqual([0, undefined]);
  });

  it("an encoding the server lacks: grpc-accept-encoding names those it has", async () => {
    const c = cases.find((x) => x.name.startsWith("an encoding"))!;
    const answer = await h2Frames(c.path, c.headers(), c.body());
    expect(answer.headers["grpc-accept-encoding"]).toBe("gzip,br");
  });

  it("grpc-message is percent-encoded as the gRPC spec says: only what is not printable ASCII, and %", async () => {
    const answer = await h2Frames(`${QUEUES}/Nope`, grpc, grpcFrame(new Uint8Array(0)));
    expect(answer.headers["grpc-message"]).toBe(`${QUEUES}/Nope: no such service or method`);
  });

  it("the request body still open: Trailers-Only, then RST_STREAM with NO_ERROR", async () => {
    for (const c of cases.filter((x) => ["no token", "a stopped app's token", "an unknown method"].includes(x.name))) {
      const answer = await h2Frames(c.path, c.headers(), c.body(), true);
      expect(answer.flags & END_STREAM, c.name).toBe(END_STREAM);
      expect(answer.headers["grpc-status"], c.name).toBe(c.status);
      expect(answer.rstCode, c.name).toBe(http2.constants.NGHTTP2_NO_ERROR);
    }
  });

  it("a body over the limit still being sent: RESOURCE_EXHAUSTED Trailers-Only, then RST_STREAM with NO_ERROR", async () => {
    const head = Buffer.alloc(5);
    head.writeUInt32BE(40_000_000, 1);
    const answer = await h2Frames(PUT, { ...grpc, ...bearer(app.token) }, head, true);
    expect(answer.flags & END_STREAM).toBe(END_STREAM);
    expect(answer.headers["grpc-status"]).toBe("8");
    expect(answer.rstCode).toBe(http2.constants.NGHTTP2_NO_ERROR);
  });
});

/** The Connect end-of-stream message (flag 0x02) of a streaming answer's body. */
function endOfStream(body: Buffer): { error?: { code: string; message: string } } {
  expect(body[0], "the end-of-stream flag").toBe(0x02);
  expect(body.readUInt32BE(1)).toBe(body.length - 5);
  return JSON.parse(body.subarray(5).toString()) as { error?: { code: string; message: string } };
}

describe("gRPC-Web and Connect refusing a token, over HTTP/1.1 and h2c, the body ended or not", () => {
  const variants = [
    { http: "http/1.1", keepOpen: false },
    { http: "http/1.1", keepOpen: true },
    { http: "h2c", keepOpen: false },
    { http: "h2c", keepOpen: true },
  ] as const;
  const call = async (
    v: (typeof variants)[number],
    path: string,
    headers: Record<string, string>,
    body: Uint8Array,
  ) => {
    if (v.http === "http/1.1") {
      const a = await h1Call(path, headers, body, v.keepOpen);
      return { status: a.status, headers: a.headers as Record<string, string>, body: a.body };
    }
    const a = await h2Frames(path, headers, body, v.keepOpen);
    if (v.keepOpen) expect(a.rstCode).toBe(http2.constants.NGHTTP2_NO_ERROR);
    return { status: Number(a.headers[":status"]), headers: a.headers, body: a.data };
  };

  it.each(variants)(
    "gRPC-Web ($http, body left open: $keepOpen): 200, grpc-status 16 in the headers, no body",
    async (v) => {
      const a = await call(v, LIST, { "content-type": "application/grpc-web+proto" }, grpcFrame(new Uint8Array(0)));
      expect([a.status, a.headers["content-type"], a.headers["grpc-status"], a.body.length]).toEqual([
        200,
        "application/grpc-web+proto",
        "16",
        0,
      ]);
      expect(decodeURIComponent(a.headers["grpc-message"])).toBe("missing or invalid token");
    },
  );

  it.each(variants)("Connect unary ($http, body left open: $keepOpen): 401 with the JSON error", async (v) => {
    const a = await call(
      v,
      LIST,
      { "content-type": "application/json", "connect-protocol-version": "1" },
      Buffer.from("{}"),
    );
    expect([a.status, a.headers["content-type"]]).toEqual([401, "application/json"]);
    expect(JSON.parse(a.body.toString())).toMatchObject({
      code: "unauthenticated",
      message: "missing or invalid token",
    });
  });

  it.each(variants)(
    "Connect stream ($http, body left open: $keepOpen): 200, the error in the end-of-stream message",
    async (v) => {
      const json = Buffer.from(JSON.stringify({ queue: "jobs", window: 5 }));
      const a = await call(
        v,
        STREAM,
        { "content-type": "application/connect+json", "connect-protocol-version": "1" },
        Buffer.concat([Buffer.from([0, 0, 0, 0, json.length]), json]),
      );
      expect([a.status, a.headers["content-type"]]).toEqual([200, "application/connect+json"]);
      expect(endOfStream(a.body).error).toMatchObject({ code: "unauthenticated", message: "missing or invalid token" });
    },
  );
});
