/**
 * What a service outside this repository writes to call Platform Batteries:
 * the app client (`@platform-batteries/client`) and a generated Connect
 * client (`@platform-batteries/gen` with `@connectrpc/connect`). The package
 * test (test/packages/packages.test.ts) compiles it with `tsc --strict` in a scratch
 * project that installed the packed packages, runs it against a live server,
 * and checks that every TypeScript snippet of docs/connect.md appears in this
 * file word for word, so the documentation cannot drift from code that works.
 *
 * It puts one message with each client, streams both back, acks them, and
 * prints one JSON line: the ids it put and the payloads it received.
 */
import { createClient as createAppClient } from "@platform-batteries/client";
import { Code, ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { fromJson, toJson, type JsonValue } from "@bufbuild/protobuf";
import { ValueSchema, timestampDate } from "@bufbuild/protobuf/wkt";
import { QueueService } from "@platform-batteries/gen/platform/queues/v1/queues_pb.js";

const bearer =
  (token: string): Interceptor =>
  (next) =>
  (req) => {
    req.header.set("authorization", `Bearer ${token}`);
    return next(req);
  };

// gRPC over h2c; createConnectTransport({ baseUrl, httpVersion: "1.1" }) for Connect over HTTP/1.1.
const transport = createGrpcTransport({
  baseUrl: process.env.PLATFORM_ANALYTICS_URL ?? "http://127.0.0.1:8080",
  interceptors: [bearer(process.env.PLATFORM_SERVICE_TOKEN!)],
});
const queues = createClient(QueueService, transport);

// The app client reads the same two variables (PLATFORM_ANALYTICS_URL, PLATFORM_SERVICE_TOKEN).
const app = createAppClient();
const fromClient = await app.queues.put("jobs", { from: "client" });

const put = await queues.putMessage({ queue: "jobs", payload: fromJson(ValueSchema, { job: 42 }) });
console.error(`put ${put.id}, expires ${timestampDate(put.expiresAt!).toISOString()}`);

const received: JsonValue[] = [];
async function handle(payload: JsonValue): Promise<void> {
  received.push(payload);
  if (received.length === 2) abort.abort(); // both messages are here: end the stream
}

const abort = new AbortController();
try {
  for await (const { messages } of queues.streamMessages({ queue: "jobs", window: 100 }, { signal: abort.signal })) {
    for (const m of messages) await handle(toJson(ValueSchema, m.payload!));
    await queues.ackMessages({ receipts: messages.map((m) => m.receipt) });
  }
} catch (err) {
  // Cancelling (the signal) is the normal end of a stream; anything else is an error or a cut stream.
  if (!(err instanceof ConnectError && err.code === Code.Canceled)) throw err;
}

await app.close();
console.log(JSON.stringify({ put: [fromClient.id, put.id], received }));
