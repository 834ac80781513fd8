/**
 * The protocol edges of Connect, gRPC and gRPC-Web, sent by hand as clients
 * this project did not write send them: an unknown service or method is
 * `unimplemented` at once (also while its body stays open), bytes that are
 * not the method's protobuf message are `invalid_argument` (a client's
 * fault, no error-level log), a body over the read limit is told apart from
 * a quota, and every such error carries the `ErrorDetail` the application's
 * errors carry.
 */
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { describe, expect, it, onTestFinished } from "vitest";
import { ErrorDetailSchema } from "../../gen/platform/meta/v1/error_pb.js";
import { ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { ListQueuesRequestSchema, QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import { useTestApp, useTestServer } from "../support/harness.ts";
import { grpcFrame, h2Call, type RawAnswer } from "../support/raw-rpc.ts";

const logLines: string[] = [];
const t = useTestServer({ logLines });
const app = useTestApp(t);
const LIST = "/platform.queues.v1.QueueService/ListQueues";
const PUT = "/platform.queues.v1.QueueService/PutMessage";

/** The ErrorDetail code in a gRPC `grpc-status-details-bin` (google.rpc.Status → Any → ErrorDetail). */
function detailCode(fields: Record<string, string>): string | undefined {
  const bin = fields["grpc-status-details-bin"];
  if (!bin) return undefined;
  const status = Buffer.from(bin, "base64");
  const marker = Buffer.from("platform.meta.v1.ErrorDetail");
  const at = status.indexOf(marker);
  if (at < 0 || status[at + marker.length] !== 0x12) return undefined;
  const len = status[at + marker.length + 1];
  return fromBinary(ErrorDetailSchema, status.subarray(at + marker.length + 2, at + marker.length + 2 + len)).code;
}

function grpcFields(a: RawAnswer): Record<string, string> {
  return { ...a.headers, ...a.trailers };
}

/** The trailer frame (flag 0x80) of a gRPC-Web body, as fields. */
function grpcWebTrailers(body: Buffer): Record<string, string> {
  const out: Record<string, string> = {};
  let i = 0;
  while (i + 5 <= body.length) {
    const len = body.readUInt32BE(i + 1);
    if (body[i] & 0x80) {
      for (const line of body
        .subarray(i + 5, i + 5 + len)
        .toString()
        .split("\r\n")) {
        const at = line.indexOf(":");
        if (at > 0) out[line.slice(0, at).trim().toLowerCase()] = line.slice(at + 1).trim();
      }
    }
    i += 5 + len;
  }
  return out;
}

const auth = () => ({ authorization: `Bearer ${app.token}` });
/** A truncated field: tag of field 1 (length-delimited), a length of 10, and 2 bytes. */
const MALFORMED = Buffer.from([0x0a, 0x0a, 0x61, 0x62]);

describe("unknown services and methods", () => {
  it("Connect: 404 unimplemented with an ErrorDetail, not the REST envelope", async () => {
    for (const path of ["/platform.nope.v1.NopeService/Nope", "/platform.queues.v1.QueueService/Nope"]) {
      const res = await fetch(t.url + path, {
        method: "POST",
        headers: { "content-type": "application/json", "connect-protocol-version": "1" },
        body: "{}",
      });
      const body = (await res.json()) as { code: string; details: { type: string; debug: { code: string } }[] };
      expect(res.status).toBe(404);
      expect(body.code).toBe("unimplemented");
      expect(body.details[0]).toMatchObject({ type: "platform.meta.v1.ErrorDetail", debug: { code: "unimplemented" } });
    }
  });

  it("gRPC and gRPC-Web: status 12 at once, also while the request body stays open", async () => {
    for (const type of ["application/grpc", "application/grpc+proto", "application/grpc-web+proto"]) {
      const answer = await h2Call(
        t.url,
        "/platform.nope.v1.NopeService/Watch",
        { "content-type": type, te: "trailers" },
        grpcFrame(new Uint8Array(0)),
        { keepOpen: true },
      );
      expect(answer.status).toBe(200);
      expect(grpcFields(answer)["grpc-status"]).toBe("12");
      expect(detailCode(grpcFields(answer))).toBe("unimplemented");
    }
  });

  it("a REST path still gets REST's 404", async () => {
    const res = await fetch(`${t.url}/v1/nothing-here`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{}",
    });
    expect(res.status).toBe(404);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("not_found");
  });
});

describe("malformed binary protobuf", () => {
  it("Connect application/proto: 400 invalid_argument with an ErrorDetail", async () => {
    const res = await fetch(t.url + PUT, {
      method: "POST",
      headers: { "content-type": "application/proto", "connect-protocol-version": "1", ...auth() },
      body: MALFORMED,
    });
    const body = (await res.json()) as { code: string; details: { debug: { code: string } }[] };
    expect(res.status).toBe(400);
    expect(body.code).toBe("invalid_argument");
    expect(body.details[0].debug.code).toBe("invalid_argument");
  });

  it("Connect application/proto with a deadline (the general handler): the same", async () => {
    const res = await fetch(t.url + PUT, {
      method: "POST",
      headers: {
        "content-type": "application/proto",
        "connect-protocol-version": "1",
        "connect-timeout-ms": "10000",
        ...auth(),
      },
      body: MALFORMED,
    });
    const body = (await res.json()) as { code: string; details: { debug: { code: string } }[] };
    expect(res.status).toBe(400);
    expect(body.code).toBe("invalid_argument");
    expect(body.details[0].debug.code).toBe("invalid_argument");
  });

  it("gRPC, with and without a deadline, and gRPC-Web: status 3 with an ErrorDetail", async () => {
    for (const extra of [{}, { "grpc-timeout": "10S" }] as Record<string, string>[]) {
      const answer = await h2Call(
        t.url,
        PUT,
        { "content-type": "application/grpc", te: "trailers", ...auth(), ...extra },
        grpcFrame(MALFORMED),
      );
      expect(grpcFields(answer)["grpc-status"]).toBe("3");
      expect(detailCode(grpcFields(answer))).toBe("invalid_argument");
    }
    const web = await h2Call(
      t.url,
      PUT,
      { "content-type": "application/grpc-web+proto", ...auth() },
      grpcFrame(MALFORMED),
    );
    const trailers = { ...web.headers, ...grpcWebTrailers(web.body) };
    expect(trailers["grpc-status"]).toBe("3");
    expect(detailCode(trailers)).toBe("invalid_argument");
  });

  it("logs no error-level line for a client's bad bytes", () => {
    const errors = logLines.filter((l) => (JSON.parse(l) as { level: number }).level >= 50);
    expect(errors).toEqual([]);
  });
});

describe("a body over the read limit", () => {
  it("gRPC: resource_exhausted with ErrorDetail payload_too_large (not a quota)", async () => {
    const header = Buffer.alloc(5);
    header.writeUInt32BE(40_000_000, 1);
    const answer = await h2Call(t.url, PUT, { "content-type": "application/grpc", te: "trailers", ...auth() }, header);
    expect(grpcFields(answer)["grpc-status"]).toBe("8");
    expect(detailCode(grpcFields(answer))).toBe("payload_too_large");
  });

  it("Connect: a content-length over the limit is payload_too_large", async () => {
    const answer = await h2Call(
      t.url,
      LIST,
      { "content-type": "application/proto", "connect-protocol-version": "1", "content-length": "40000000", ...auth() },
      toBinary(ListQueuesRequestSchema, create(ListQueuesRequestSchema)),
      { keepOpen: true },
    );
    const body = JSON.parse(answer.body.toString()) as { code: string; details: { debug: { code: string } }[] };
    expect(body.code).toBe("resource_exhausted");
    expect(body.details[0].debug.code).toBe("payload_too_large");
  });

  it("PutMessages: as documented, about 120 full-size messages fit in one call, 140 are refused whole", async () => {
    // A client session that may hold the whole request (node:http2's default holds 10 MB).
    // Its own session, closed at the end: the refused call's request stream is still open when its answer comes.
    const sessions = new Http2SessionManager(t.url, undefined, { maxSessionMemory: 128 });
    onTestFinished(() => sessions.abort());
    const transport = createGrpcTransport({
      baseUrl: t.url,
      sessionManager: sessions,
      interceptors: [
        (next) => (req) => {
          req.header.set("authorization", `Bearer ${app.token}`);
          return next(req);
        },
      ],
    });
    const queues = createClient(QueueService, transport);
    const big = "x".repeat(250_000);
    const batch = (n: number) =>
      Array.from({ length: n }, () => ({ payload: { kind: { case: "stringValue" as const, value: big } } }));
    const ok = await queues.putMessages({ queue: "limit", messages: batch(120) });
    expect(ok.messages).toHaveLength(120);
    // Refused as soon as the server sees the size (before the body is in; a client still sending may then only
    // see its connection reset: the answer itself is tested above with a frame that announces the size).
    const err = await queues.putMessages({ queue: "limit", messages: batch(140) }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectError);
    const { queues: list } = await queues.listQueues({});
    expect(Number(list.find((q) => q.name === "limit")?.depth)).toBe(120);
  });
});

describe("read RPCs marked NO_SIDE_EFFECTS", () => {
  it("answer Connect's cacheable GET form", async () => {
    const version = await fetch(
      `${t.url}/platform.meta.v1.MetaService/GetVersion?connect=v1&encoding=json&message=${encodeURIComponent("{}")}`,
    );
    expect(version.status).toBe(200);
    expect(((await version.json()) as { name: string }).name).toBe("platform-batteries");
    const models = await fetch(
      `${t.url}/platform.inference.v1.InferenceService/ListModels?connect=v1&encoding=json&message=${encodeURIComponent("{}")}`,
      { headers: auth() },
    );
    expect(models.status).toBe(200);
    // A write is not served by GET.
    const put = await fetch(`${t.url}${PUT}?connect=v1&encoding=json&message=${encodeURIComponent("{}")}`, {
      headers: auth(),
    });
    expect(put.status).not.toBe(200);
  });
});
