/**
 * `StreamMessages` sends the same messages whatever the codec: over the binary codecs (gRPC, gRPC-Web,
 * Connect with protobuf) each message is written straight from its row (`message-binary.ts`), over
 * Connect JSON as a message object. Both carry every field, and the receipts they carry ack.
 */
import { createConnectTransport } from "@connectrpc/connect-node";
import { createClient, type Interceptor } from "@connectrpc/connect";
import { fromJson, toJson, type JsonValue } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { QueueService, type Message } from "../../gen/platform/queues/v1/queues_pb.js";
import { transportFor, useTestApp, useTestServer } from "../support/harness.ts";

const t = useTestServer();
const app = useTestApp(t);

const PAYLOADS: JsonValue[] = [
  { data: "x".repeat(1010) },
  JSON.parse('{"nested":{"list":[1,2.5,-1e-7,true,null,"é€😀"],"":{}},"__proto__":"own key"}') as JsonValue,
  "plain text",
  42,
  null,
  [],
];

function clientOver(codec: string) {
  const auth: Interceptor[] = [
    (next) => (req) => {
      req.header.set("authorization", `Bearer ${app.token}`);
      return next(req);
    },
  ];
  switch (codec) {
    case "connect-json":
    case "connect-proto":
      return createClient(
        QueueService,
        createConnectTransport({
          baseUrl: t.url,
          httpVersion: "2",
          useBinaryFormat: codec === "connect-proto",
          interceptors: auth,
        }),
      );
    default:
      return createClient(QueueService, transportFor(t.url, codec as "grpc" | "grpc-web", app.token));
  }
}

describe.each(["grpc", "grpc-web", "connect-proto", "connect-json"])("StreamMessages over %s", (codec) => {
  it("delivers every field of each message, and its receipts ack", async () => {
    const client = clientOver(codec);
    const queue = `codec-${codec}`;
    const put = await client.putMessages({
      queue,
      messages: PAYLOADS.map((json) => ({ payload: fromJson(ValueSchema, json) })),
    });
    const before = Date.now();
    const stop = new AbortController();
    const got: Message[] = [];
    for await (const res of client.streamMessages({ queue, window: 100, leaseSeconds: 60 }, { signal: stop.signal })) {
      got.push(...res.messages);
      if (got.length >= PAYLOADS.length) break;
    }
    stop.abort();
    expect(got.map((m) => m.id)).toEqual(put.messages.map((m) => m.id));
    got.forEach((m, i) => {
      expect(m.queue).toBe(queue);
      expect(toJson(ValueSchema, m.payload!)).toStrictEqual(toJson(ValueSchema, fromJson(ValueSchema, PAYLOADS[i])));
      expect(m.deliveries).toBe(1);
      expect(m.receipt).toMatch(/^[A-Za-z0-9_-]{27}$/);
      const ms = (ts: { seconds: bigint; nanos: number } | undefined) => Number(ts!.seconds) * 1000 + ts!.nanos / 1e6;
      expect(ms(m.expiresAt)).toBe(ms(put.messages[i].expiresAt));
      // The lease ends about 60 s after the claim (the database's clock; a minute's skew allowed).
      expect(Math.abs(ms(m.leaseExpiresAt) - (before + 60_000))).toBeLessThan(60_000);
      expect(ms(m.enqueuedAt)).toBeLessThanOrEqual(ms(m.leaseExpiresAt));
    });
    const acked = await client.ackMessages({ receipts: got.map((m) => m.receipt) });
    expect(acked.acked).toEqual(got.map(() => true));
  });
});
