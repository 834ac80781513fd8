/**
 * An expired deadline is answered as the protocols say: Connect
 * `deadline_exceeded` (HTTP 504 for a unary call) and gRPC status 4, on a
 * waiting ConsumeMessage and on StreamMessages, with the ErrorDetail every
 * error of this service carries. Sent by hand: generated clients enforce the
 * deadline themselves and would hide the server's answer.
 */
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { ConsumeMessageRequestSchema, StreamMessagesRequestSchema } from "../../gen/platform/queues/v1/queues_pb.js";
import { ErrorDetailSchema } from "../../gen/platform/meta/v1/error_pb.js";
import { Code, ConnectError } from "@connectrpc/connect";
import { throwIfPastDeadline } from "../../src/core/deadline.ts";
import { PlatformError } from "../../src/core/errors.ts";
import { useTestApp, useTestServer } from "../support/harness.ts";
import { grpcFrame, h2Call } from "../support/raw-rpc.ts";

const t = useTestServer();
const app = useTestApp(t);
const SERVICE = "/platform.queues.v1.QueueService";

/** The ErrorDetail of a gRPC error (`grpc-status-details-bin`, a google.rpc.Status whose details hold it). */
function grpcErrorDetailCode(trailers: Record<string, string>): string | undefined {
  const bin = trailers["grpc-status-details-bin"];
  if (!bin) return undefined;
  const status = Buffer.from(bin, "base64");
  // google.rpc.Status: field 3 (details, Any); Any: field 2 (value). Found by its type URL's bytes.
  const marker = Buffer.from("platform.meta.v1.ErrorDetail");
  const at = status.indexOf(marker);
  if (at < 0) return undefined;
  // After the type URL: tag 0x12, a length, the ErrorDetail bytes.
  let i = at + marker.length;
  if (status[i] !== 0x12) return undefined;
  i++;
  let len = 0;
  let shift = 0;
  for (;;) {
    const b = status[i++];
    len |= (b & 0x7f) << shift;
    if (b < 0x80) break;
    shift += 7;
  }
  return fromBinary(ErrorDetailSchema, status.subarray(i, i + len)).code;
}

describe("deadlines", () => {
  /** A Connect JSON unary call with a 500 ms deadline. */
  const connectCall = (method: string, request: unknown) =>
    fetch(`${t.url}${SERVICE}/${method}`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "connect-protocol-version": "1",
        "connect-timeout-ms": "500",
        authorization: `Bearer ${app.token}`,
      },
      body: JSON.stringify(request),
    });

  it("Connect ConsumeMessage with connect-timeout-ms: deadline_exceeded, not an empty success", async () => {
    const started = Date.now();
    const res = await connectCall("ConsumeMessage", { queue: "deadline-connect", waitSeconds: 20 });
    const body = (await res.json()) as { code: string; details?: { type: string }[] };
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(res.status).toBe(504);
    expect(body.code).toBe("deadline_exceeded");
    expect(body.details?.map((d) => d.type)).toEqual(["platform.meta.v1.ErrorDetail"]);
  });

  it("Connect ReadEventFeed with connect-timeout-ms: deadline_exceeded, not an empty page", async () => {
    const res = await connectCall("ReadEventFeed", { waitSeconds: 20 });
    const body = (await res.json()) as { code: string };
    expect(res.status).toBe(504);
    expect(body.code).toBe("deadline_exceeded");
  });

  it("gRPC ConsumeMessage with grpc-timeout: status 4", async () => {
    const message = toBinary(
      ConsumeMessageRequestSchema,
      create(ConsumeMessageRequestSchema, { queue: "deadline-grpc", waitSeconds: 20 }),
    );
    const answer = await h2Call(
      t.url,
      `${SERVICE}/ConsumeMessage`,
      {
        "content-type": "application/grpc",
        te: "trailers",
        "grpc-timeout": "500m",
        authorization: `Bearer ${app.token}`,
      },
      grpcFrame(message),
    );
    const status = answer.trailers["grpc-status"] ?? answer.headers["grpc-status"];
    expect(status).toBe("4");
    expect(grpcErrorDetailCode({ ...answer.headers, ...answer.trailers })).toBe("deadline_exceeded");
  });

  it("gRPC StreamMessages with grpc-timeout: status 4 once the deadline passes", async () => {
    const message = toBinary(
      StreamMessagesRequestSchema,
      create(StreamMessagesRequestSchema, { queue: "deadline-stream", window: 10 }),
    );
    const answer = await h2Call(
      t.url,
      `${SERVICE}/StreamMessages`,
      {
        "content-type": "application/grpc",
        te: "trailers",
        "grpc-timeout": "500m",
        authorization: `Bearer ${app.token}`,
      },
      grpcFrame(message),
    );
    expect(answer.trailers["grpc-status"] ?? answer.headers["grpc-status"]).toBe("4");
  });

  it("Connect StreamMessages with connect-timeout-ms: the end-of-stream says deadline_exceeded", async () => {
    const json = Buffer.from(JSON.stringify({ queue: "deadline-stream-connect", window: 10 }));
    const res = await fetch(`${t.url}${SERVICE}/StreamMessages`, {
      method: "POST",
      headers: {
        "content-type": "application/connect+json",
        "connect-protocol-version": "1",
        "connect-timeout-ms": "500",
        authorization: `Bearer ${app.token}`,
      },
      body: new Uint8Array(grpcFrame(json)),
    });
    const bytes = Buffer.from(await res.arrayBuffer());
    // The last envelope (flag 2) is the end-of-stream message.
    let i = 0;
    let end: { error?: { code: string } } | undefined;
    while (i + 5 <= bytes.length) {
      const len = bytes.readUInt32BE(i + 1);
      if (bytes[i] & 2) end = JSON.parse(bytes.subarray(i + 5, i + 5 + len).toString()) as typeof end;
      i += 5 + len;
    }
    expect(end?.error?.code).toBe("deadline_exceeded");
  });

  describe("throwIfPastDeadline", () => {
    /** A call's context as connect builds it: its signal, aborted or not, and the clock's time left. */
    function contextOf(reason: unknown, leftMs: number | undefined) {
      const controller = new AbortController();
      if (reason !== undefined) controller.abort(reason);
      return { signal: controller.signal, timeoutMs: () => leftMs };
    }

    it("counts an abort by the deadline's timer even while the clock still shows a millisecond left", () => {
      // Node's timers and Date.now() are different clocks: the deadline's setTimeout can fire first.
      const timedOut = new ConnectError("the operation timed out", Code.DeadlineExceeded);
      const thrown = (() => {
        try {
          throwIfPastDeadline(contextOf(timedOut, 1), "a message");
        } catch (err) {
          return err;
        }
      })();
      expect(thrown).toBeInstanceOf(PlatformError);
      expect((thrown as PlatformError).code).toBe("deadline_exceeded");
    });

    it("leaves a call alone that was cancelled, that has time left, or that has no deadline", () => {
      expect(() =>
        throwIfPastDeadline(contextOf(new ConnectError("gone", Code.Canceled), 1), "a message"),
      ).not.toThrow();
      expect(() => throwIfPastDeadline(contextOf(undefined, 200), "a message")).not.toThrow();
      expect(() => throwIfPastDeadline(contextOf(undefined, undefined), "a message")).not.toThrow();
      expect(() => throwIfPastDeadline(contextOf(undefined, 0), "a message")).toThrow(PlatformError);
    });
  });
});
