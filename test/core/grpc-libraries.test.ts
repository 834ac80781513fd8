/**
 * What the official gRPC libraries see, `@grpc/grpc-js` and Python `grpcio`
 * (C-core), clients this project did not write: the exact status code and
 * message of every refusal the server makes before or without a response
 * message (a missing, wrong or stopped app's token, an unknown service or
 * method, a body over the limit, bytes that do not parse, an encoding the
 * server lacks). Before these answers were Trailers-Only, both libraries
 * read a refused token as a crash (grpc-js: 13 "Received RST_STREAM with
 * code 0"; grpcio: UNKNOWN "Stream removed"). Also: reflection lists the
 * health service, and a stream's headers arrive at once on an idle queue.
 */
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { create, toBinary } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { AppStatus } from "../../gen/platform/admin/v1/admin_pb.js";
import { HealthCheckRequestSchema } from "../../gen/grpc/health/v1/health_pb.js";
import { SendMailRequestSchema } from "../../gen/platform/mail/v1/mail_pb.js";
import {
  ListQueuesRequestSchema,
  PutMessageRequestSchema,
  StreamMessagesRequestSchema,
} from "../../gen/platform/queues/v1/queues_pb.js";
import { useTestApp, useTestServer, type TestApp } from "../support/harness.ts";
import {
  closeGrpcJsClients,
  grpcioCalls,
  grpcJsCall,
  loadedClient,
  type LibraryAnswer,
  type LibraryCall,
} from "../support/grpc-libraries.ts";

const t = useTestServer();
const app = useTestApp(t);
let stopped: TestApp;
let full: TestApp;
beforeAll(async () => {
  stopped = await t.createApp();
  await stopped.stop();
  full = await t.createApp();
  await t.admin.updateApp({ appId: full.id, limits: { maxQueueDepth: 1 } });
});
afterAll(() => closeGrpcJsClients());

const QUEUES = "/platform.queues.v1.QueueService";
const LIST = `${QUEUES}/ListQueues`;
const PUT = `${QUEUES}/PutMessage`;
const STREAM = `${QUEUES}/StreamMessages`;
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
const listRequest = toBinary(ListQueuesRequestSchema, create(ListQueuesRequestSchema));
const putRequest = (queue: string, text = "hello") =>
  toBinary(
    PutMessageRequestSchema,
    create(PutMessageRequestSchema, { queue, payload: { kind: { case: "stringValue", value: text } } }),
  );
/** A message of 2 bytes that end inside a varint: the frame of `printf '\x00\x00\x00\x00\x02\xff\xff'`. */
const UNPARSABLE = new Uint8Array([0xff, 0xff]);
/** A put of 33 MiB, over the 32 MiB read limit. */
const OVER_LIMIT = putRequest("jobs", "x".repeat(33 * 1024 * 1024));
/** Field 1 (`queue`), 2 bytes that are not UTF-8. */
const NOT_UTF8 = new Uint8Array([0x0a, 0x02, 0xff, 0xfe]);

interface Case {
  name: string;
  call: () => LibraryCall;
  code: number;
  details: string;
}

const cases: Case[] = [
  ...[LIST, PUT].flatMap((path) => [
    {
      name: `no token: ${path}`,
      call: () => ({ path, request: path === LIST ? listRequest : putRequest("jobs") }),
      code: 16,
      details: "missing or invalid token",
    },
    {
      name: `a wrong token: ${path}`,
      call: () => ({ path, request: path === LIST ? listRequest : putRequest("jobs"), metadata: bearer("pbt_wrong") }),
      code: 16,
      details: "missing or invalid token",
    },
  ]),
  {
    name: "a stopped app's token",
    call: () => ({ path: PUT, request: putRequest("jobs"), metadata: bearer(stopped.token) }),
    code: 7,
    details: "the app is stopped",
  },
  {
    name: "an unknown service",
    call: () => ({ path: "/platform.nope.v1.NopeService/Nope", request: listRequest }),
    code: 12,
    details: "/platform.nope.v1.NopeService/Nope: no such service or method",
  },
  {
    name: "an unknown method",
    call: () => ({ path: `${QUEUES}/Nope`, request: listRequest, metadata: bearer(app.token) }),
    code: 12,
    details: `${QUEUES}/Nope: no such service or method`,
  },
  {
    name: "an unknown streaming method",
    call: () => ({ path: `${QUEUES}/NopeStream`, request: listRequest, stream: true }),
    code: 12,
    details: `${QUEUES}/NopeStream: no such service or method`,
  },
  {
    name: "a body over the 32 MiB limit",
    call: () => ({ path: PUT, request: OVER_LIMIT, metadata: bearer(app.token) }),
    code: 8,
    details: `message size ${OVER_LIMIT.length} is larger than configured readMaxBytes 33554432`,
  },
  {
    name: "StreamMessages: a request that does not parse",
    call: () => ({ path: STREAM, request: UNPARSABLE, metadata: bearer(app.token), stream: true }),
    code: 3,
    details: "parse binary: premature EOF",
  },
  {
    name: "ListQueues: a request that does not parse",
    call: () => ({ path: LIST, request: UNPARSABLE, metadata: bearer(app.token) }),
    code: 3,
    details: "parse binary: premature EOF",
  },
  {
    name: "PutMessage: a string field that is not UTF-8",
    call: () => ({ path: PUT, request: NOT_UTF8, metadata: bearer(app.token) }),
    code: 3,
    details: "body: a string field is not UTF-8 (protobuf strings are UTF-8 text)",
  },
  {
    name: "StreamMessages: a string field that is not UTF-8",
    call: () => ({ path: STREAM, request: NOT_UTF8, metadata: bearer(app.token), stream: true }),
    code: 3,
    details: "body: a string field is not UTF-8 (protobuf strings are UTF-8 text)",
  },
  {
    name: "a request compressed with deflate, which the server lacks",
    call: () => ({ path: PUT, request: putRequest("jobs"), metadata: bearer(app.token), compression: "deflate" }),
    code: 12,
    details: 'unknown compression "deflate": supported encodings are gzip,br',
  },
  // PlatformError codes made by the facilities, through their real calls (every code, through a service that
  // throws each: grpc-error-codes.test.ts).
  {
    name: "invalid_argument: a queue name outside the pattern",
    call: () => ({ path: PUT, request: putRequest("Bad Name"), metadata: bearer(app.token) }),
    code: 3,
    details: "queue: must match ^[a-z][a-z0-9_.-]{0,62}$ or be _events",
  },
  {
    name: "invalid_argument: a stream's window out of range",
    call: () => ({
      path: STREAM,
      request: toBinary(StreamMessagesRequestSchema, create(StreamMessagesRequestSchema, { queue: "jobs" })),
      metadata: bearer(app.token),
      stream: true,
    }),
    code: 3,
    details: "window: must be an integer from 1 to 1000",
  },
  {
    name: "permission_denied: a put on _events",
    call: () => ({ path: PUT, request: putRequest("_events"), metadata: bearer(app.token) }),
    code: 7,
    details: "_events is the platform's events queue; apps cannot put on it",
  },
  {
    name: "not_found: the health of an unknown service",
    call: () => ({
      path: "/grpc.health.v1.Health/Check",
      request: toBinary(HealthCheckRequestSchema, create(HealthCheckRequestSchema, { service: "nope.Nope" })),
    }),
    code: 5,
    details: "no service nope.Nope",
  },
  {
    name: "not_configured: mail from an app without a sender",
    call: () => ({
      path: "/platform.mail.v1.MailService/SendMail",
      request: toBinary(
        SendMailRequestSchema,
        create(SendMailRequestSchema, { to: "ada@example.com", subject: "Hi", text: "Hello" }),
      ),
      metadata: bearer(app.token),
    }),
    code: 12,
    details: "mail is not configured for this app: it has no sender address yet; the platform operator assigns one",
  },
];

function expectAnswer(answer: LibraryAnswer, c: Case) {
  expect({ name: c.name, code: answer.code, details: answer.details, received: answer.received }).toEqual({
    name: c.name,
    code: c.code,
    details: c.details,
    received: 0,
  });
}

describe("@grpc/grpc-js reads the status the server meant", () => {
  it.each(cases)("$name", async (c) => {
    expectAnswer(await grpcJsCall(t.url, c.call()), c);
  });

  it("with a deadline (the call then takes Connect's general handler, not the short path): the same", async () => {
    for (const c of cases) expectAnswer(await grpcJsCall(t.url, { ...c.call(), timeoutSeconds: 30 }), c);
  });

  it("queue_full: the put past the queue's depth", async () => {
    const first = await grpcJsCall(t.url, { path: PUT, request: putRequest("one"), metadata: bearer(full.token) });
    expect(first).toMatchObject({ code: 0, received: 1 });
    const second = await grpcJsCall(t.url, { path: PUT, request: putRequest("one"), metadata: bearer(full.token) });
    expect(second.code).toBe(8);
    expect(second.details).toMatch(/^queue one has 1 messages waiting/);
    expect(second.trailing["retry-after"]).toMatch(/^\d+$/);
  });
});

describe("Python grpcio (C-core) reads the status the server meant", () => {
  it("every case", async () => {
    const answers = await grpcioCalls(
      t.url,
      cases.map((c) => c.call()),
    );
    answers.forEach((answer, i) => expectAnswer(answer, cases[i]));
  });
});

describe("a client generated by @grpc/proto-loader", () => {
  it("a stopped app: PERMISSION_DENIED with the message; running again, the same call succeeds", async () => {
    const client = loadedClient(t.url, "platform/queues/v1/queues.proto", "platform.queues.v1.QueueService");
    const listQueues = (token: string) =>
      new Promise<{ err: grpc.ServiceError | null }>((resolve) => {
        (
          client.listQueues as (
            req: object,
            md: grpc.Metadata,
            cb: (err: grpc.ServiceError | null) => void,
          ) => grpc.ClientUnaryCall
        ).call(client, {}, metadata(token), (err) => resolve({ err }));
      });
    const refused = await listQueues(stopped.token);
    expect(refused.err?.code).toBe(7);
    expect(refused.err?.details).toBe("the app is stopped");
    await t.admin.updateApp({ appId: stopped.id, status: AppStatus.RUNNING });
    try {
      expect((await listQueues(stopped.token)).err).toBeNull();
    } finally {
      await stopped.stop();
    }
  });

  it("StreamMessages on an idle queue: the response headers arrive at once, before any message", async () => {
    const client = loadedClient(t.url, "platform/queues/v1/queues.proto", "platform.queues.v1.QueueService");
    const started = performance.now();
    const call = (client.streamMessages as (req: object, md: grpc.Metadata) => grpc.ClientReadableStream<unknown>).call(
      client,
      { queue: "idle-grpc", window: 5 },
      metadata(app.token),
    );
    let messages = 0;
    call.on("data", () => messages++);
    call.on("error", () => {});
    const headers = await new Promise<grpc.Metadata>((resolve) => call.once("metadata", resolve));
    const elapsed = performance.now() - started;
    call.cancel();
    expect(elapsed).toBeLessThan(1000);
    expect(headers.get("content-type")).toEqual(["application/grpc+proto"]);
    expect(messages).toBe(0);
  });
});

function metadata(token: string): grpc.Metadata {
  const md = new grpc.Metadata();
  md.set("authorization", `Bearer ${token}`);
  return md;
}

describe("Connect: a stream's headers at once", () => {
  it("StreamMessages over Connect (HTTP/1.1) on an idle queue: the headers within 1 s, no message yet", async () => {
    const json = Buffer.from(JSON.stringify({ queue: "idle-connect", window: 5 }));
    const envelope = Buffer.concat([Buffer.from([0, 0, 0, 0, 0]), json]);
    envelope.writeUInt32BE(json.length, 1);
    const abort = new AbortController();
    const started = performance.now();
    const res = await fetch(t.url + STREAM, {
      method: "POST",
      headers: { "content-type": "application/connect+json", "connect-protocol-version": "1", ...bearer(app.token) },
      body: envelope,
      signal: abort.signal,
    });
    const elapsed = performance.now() - started;
    abort.abort();
    await res.body?.cancel().catch(() => {});
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("application/connect+json");
    expect(elapsed).toBeLessThan(1000);
  });
});

describe("reflection", () => {
  it("lists every service served, the health service included (buf curl --list-services)", async () => {
    const { stdout } = await promisify(execFile)("buf", [
      "curl",
      "--protocol",
      "grpc",
      "--http2-prior-knowledge",
      "--list-services",
      t.url,
    ]);
    expect(stdout.trim().split("\n")).toEqual([
      "grpc.health.v1.Health",
      "grpc.reflection.v1.ServerReflection",
      "grpc.reflection.v1alpha.ServerReflection",
      "platform.admin.v1.AdminService",
      "platform.analytics.v1.AnalyticsService",
      "platform.inference.v1.InferenceService",
      "platform.mail.v1.MailService",
      "platform.meta.v1.MetaService",
      "platform.queues.v1.QueueService",
      "platform.secrets.v1.SecretsService",
    ]);
  });
});
