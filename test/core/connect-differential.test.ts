/**
 * The unary short path in front of `@connectrpc/connect-fastify`
 * (`connect-routes.ts`) answers exactly as the plugin alone: each case is
 * sent to a server with the short path and to one without it
 * (`CONNECT_SHORT_PATH=off`), on one database, and must get the same status,
 * headers (but the per-request ones), body and trailers. Each leg also
 * asserts which path served it (`connect_calls_total{path}`): the short path
 * only in its narrow case, the plugin otherwise, and the plugin always on the
 * server without the short path.
 */
import { gzipSync } from "node:zlib";
import { create, toBinary } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  AnalyticsService,
  PropertyKind,
  RegisterEventTypeRequestSchema,
} from "../../gen/platform/analytics/v1/analytics_pb.js";
import { MailService, SendMailRequestSchema } from "../../gen/platform/mail/v1/mail_pb.js";
import { PutMessageRequestSchema, QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import { openDatabase, type Database } from "../../src/core/database/index.ts";
import { createTestDatabase, startServer, type TestDatabase, type TestServer } from "../support/harness.ts";
import { grpcFrame, h2Call } from "../support/raw-rpc.ts";

let database: TestDatabase;
let shared: Database | undefined;
let short: TestServer;
let plugin: TestServer;
let token = "";
/** An app with a queue at its maxDepth and no mail sender: calls that fail with metadata, and with `unimplemented`. */
let cappedToken = "";

beforeAll(async () => {
  database = await createTestDatabase();
  shared = database.url ? undefined : await openDatabase({ dataDir: database.dataDir });
  short = await startServer({ database, openDatabase: shared });
  plugin = await startServer({ database, openDatabase: shared, env: { CONNECT_SHORT_PATH: "off" } });
  const app = await short.createApp();
  token = app.token;
  const capped = await short.createApp();
  cappedToken = capped.token;
  await short.admin.updateApp({ appId: capped.id, mailFrom: "", limits: { maxQueueDepth: 1 } });
  await short
    .client(QueueService, cappedToken)
    .putMessage({ queue: FULL_QUEUE, payload: { kind: { case: "numberValue", value: 1 } } });
  // Enough event types that a listing is compressed when the client accepts it.
  const analytics = short.client(AnalyticsService, token);
  for (let i = 0; i < 30; i++)
    await analytics.registerEventType({
      name: `type_${i}`,
      properties: { plan: PropertyKind.STRING, seats: PropertyKind.NUMBER },
    });
});
afterAll(async () => {
  await plugin?.close();
  await short?.close();
  await shared?.close();
  await database?.drop();
});

const PER_REQUEST = new Set(["date", "x-request-id", "connection", "keep-alive"]);
const LIST = `/${AnalyticsService.typeName}/ListEventTypes`;
const REGISTER = `/${AnalyticsService.typeName}/RegisterEventType`;
const STREAM = `/${QueueService.typeName}/StreamMessages`;
const PUT = `/${QueueService.typeName}/PutMessage`;
const SEND_MAIL = `/${MailService.typeName}/SendMail`;
const FULL_QUEUE = "full";

async function served(server: TestServer, path: "short" | "plugin"): Promise<number> {
  const m = server.server.deps.metrics.registry.getSingleMetric("connect_calls_total");
  if (!m) return 0;
  return (await m.get()).values.filter((v) => v.labels.path === path).reduce((sum, v) => sum + v.value, 0);
}

function comparable(fields: Record<string, string>) {
  return Object.fromEntries(
    Object.entries(fields)
      .filter(([k]) => !PER_REQUEST.has(k))
      .sort(([a], [b]) => a.localeCompare(b)),
  );
}

interface Case {
  name: string;
  transport: "h1" | "h2";
  path: string;
  headers: Record<string, string>;
  body: Uint8Array;
  /**
   * Which path serves it on the server with the short path; `head`: neither, it is refused when its head
   * arrives, before its body is read (a call without a valid token, connect-routes.ts `authenticate`).
   */
  expect: "short" | "plugin" | "head";
}

async function send(server: TestServer, c: Case) {
  if (c.transport === "h2") {
    const a = await h2Call(server.url, c.path, c.headers, c.body);
    return {
      status: a.status,
      headers: comparable(a.headers),
      body: a.body.toString("base64"),
      trailers: comparable(a.trailers),
    };
  }
  const res = await fetch(server.url + c.path, {
    method: "POST",
    headers: c.headers,
    body: c.body.length > 0 ? c.body : undefined,
    decompress: false,
  } as RequestInit);
  const headers: Record<string, string> = {};
  res.headers.forEach((v, k) => (headers[k] = v));
  return {
    status: res.status,
    headers: comparable(headers),
    body: Buffer.from(await res.arrayBuffer()).toString("base64"),
    trailers: {},
  };
}

const text = (s: string) => new Uint8Array(Buffer.from(s));
const auth = () => ({ authorization: `Bearer ${token}` });
const connectJson = () => ({ ...auth(), "content-type": "application/json" });
const connectProto = () => ({ ...auth(), "content-type": "application/proto" });
const grpc = () => ({ ...auth(), "content-type": "application/grpc", te: "trailers" });
const grpcWeb = () => ({ ...auth(), "content-type": "application/grpc-web+proto", "x-grpc-web": "1" });
const capped = (h: Record<string, string>) => ({ ...h, authorization: `Bearer ${cappedToken}` });
const putFull = () =>
  toBinary(
    PutMessageRequestSchema,
    create(PutMessageRequestSchema, { queue: FULL_QUEUE, payload: { kind: { case: "numberValue", value: 2 } } }),
  );
const MAIL = '{"to":"a@example.com","subject":"s","text":"t"}';
const mailProto = () =>
  toBinary(SendMailRequestSchema, create(SendMailRequestSchema, { to: "a@example.com", subject: "s", text: "t" }));
const badName = () =>
  toBinary(RegisterEventTypeRequestSchema, create(RegisterEventTypeRequestSchema, { name: "Bad Name" }));
/** Field 99 (varint 1): a field ListEventTypesRequest does not have. */
const UNKNOWN_FIELD = new Uint8Array([0x98, 0x06, 0x01]);
const TRUNCATED = new Uint8Array([0x0a, 0x0a, 0x61]);
const GARBAGE = new Uint8Array([0xff, 0xff, 0xff]);
const big = () => text(JSON.stringify({ pad: " ".repeat((1 << 20) + 10) }).replace('"pad"', '"x"'));

function cases(): Case[] {
  const c = (
    name: string,
    transport: Case["transport"],
    path: string,
    headers: Record<string, string>,
    body: Uint8Array,
    expected: Case["expect"],
  ): Case => ({ name, transport, path, headers, body, expect: expected });
  const frame = (m: Uint8Array, flags = 0) => new Uint8Array(grpcFrame(m, flags));
  return [
    // Connect JSON over HTTP/1.1
    c("json: valid", "h1", LIST, connectJson(), text("{}"), "short"),
    c("json: empty body", "h1", LIST, connectJson(), new Uint8Array(), "short"),
    c("json: malformed", "h1", LIST, connectJson(), text("{"), "short"),
    c("json: truncated", "h1", LIST, connectJson(), text('{"a":'), "short"),
    c("json: trailing garbage", "h1", LIST, connectJson(), text("{} x"), "short"),
    c("json: an array", "h1", LIST, connectJson(), text("[]"), "short"),
    c("json: unknown field", "h1", LIST, connectJson(), text('{"nope":1}'), "short"),
    c("json: wrong type", "h1", REGISTER, connectJson(), text('{"name":5}'), "short"),
    c("json: refused by the service", "h1", REGISTER, connectJson(), text('{"name":"Bad Name"}'), "short"),
    c("json: no token", "h1", LIST, { "content-type": "application/json" }, text("{}"), "head"),
    c("json: bad token", "h1", LIST, { ...connectJson(), authorization: "Bearer nope" }, text("{}"), "head"),
    c("json: gzip accepted", "h1", LIST, { ...connectJson(), "accept-encoding": "gzip" }, text("{}"), "short"),
    c("json: br accepted", "h1", LIST, { ...connectJson(), "accept-encoding": "br" }, text("{}"), "short"),
    c(
      "json: charset",
      "h1",
      LIST,
      { ...connectJson(), "content-type": "application/json; charset=utf-8" },
      text("{}"),
      "plugin",
    ),
    c(
      "json: upper case type",
      "h1",
      LIST,
      { ...connectJson(), "content-type": "Application/JSON" },
      text("{}"),
      "plugin",
    ),
    c(
      "json: protocol version 1",
      "h1",
      LIST,
      { ...connectJson(), "connect-protocol-version": "1" },
      text("{}"),
      "short",
    ),
    c("json: deadline", "h1", LIST, { ...connectJson(), "connect-timeout-ms": "60000" }, text("{}"), "plugin"),
    c("json: bad deadline", "h1", LIST, { ...connectJson(), "connect-timeout-ms": "soon" }, text("{}"), "plugin"),
    c(
      "json: gzip body",
      "h1",
      LIST,
      { ...connectJson(), "content-encoding": "gzip" },
      new Uint8Array(gzipSync("{}")),
      "plugin",
    ),
    c("json: identity encoding", "h1", LIST, { ...connectJson(), "content-encoding": "identity" }, text("{}"), "short"),
    c("json: unknown encoding", "h1", LIST, { ...connectJson(), "content-encoding": "zstd" }, text("{}"), "plugin"),
    c("json: over the short path's 1 MiB", "h1", LIST, connectJson(), big(), "plugin"),
    c("json: over h2c", "h2", LIST, connectJson(), text("{}"), "short"),
    c("json: byte order mark", "h1", LIST, connectJson(), text("\ufeff{}"), "short"),
    c(
      "json: not UTF-8",
      "h1",
      REGISTER,
      connectJson(),
      new Uint8Array([...text('{"name":"'), 0xff, ...text('"}')]),
      "short",
    ),
    c(
      "json: first accepted encoding the server has",
      "h1",
      LIST,
      { ...connectJson(), "accept-encoding": "zstd, br, gzip" },
      text("{}"),
      "short",
    ),
    c(
      "json: encoding with a weight",
      "h1",
      LIST,
      { ...connectJson(), "accept-encoding": "gzip;q=1" },
      text("{}"),
      "short",
    ),
    c(
      "json: error with metadata (retry-after)",
      "h1",
      PUT,
      capped(connectJson()),
      text(`{"queue":"${FULL_QUEUE}","payload":2}`),
      "short",
    ),
    c("json: unimplemented by the service", "h1", SEND_MAIL, capped(connectJson()), text(MAIL), "short"),
    c("json: to a streaming method", "h1", STREAM, connectJson(), text('{"queue":"q","window":1}'), "plugin"),
    // Connect binary
    c("proto: valid", "h1", LIST, connectProto(), new Uint8Array(), "short"),
    c("proto: garbage", "h1", LIST, connectProto(), GARBAGE, "short"),
    c("proto: truncated field", "h1", LIST, connectProto(), TRUNCATED, "short"),
    c("proto: unknown field", "h1", LIST, connectProto(), UNKNOWN_FIELD, "short"),
    c("proto: refused by the service", "h1", REGISTER, connectProto(), badName(), "short"),
    c("proto: error with metadata (retry-after)", "h1", PUT, capped(connectProto()), putFull(), "short"),
    c(
      "proto: gzip accepted",
      "h1",
      LIST,
      { ...connectProto(), "accept-encoding": "gzip, br" },
      new Uint8Array(),
      "short",
    ),
    c("proto: deadline", "h1", LIST, { ...connectProto(), "connect-timeout-ms": "60000" }, GARBAGE, "plugin"),
    // gRPC over h2c
    c("grpc: valid", "h2", LIST, grpc(), frame(new Uint8Array()), "short"),
    c(
      "grpc: +proto",
      "h2",
      LIST,
      { ...grpc(), "content-type": "application/grpc+proto" },
      frame(new Uint8Array()),
      "short",
    ),
    c(
      "grpc: parameters on the type",
      "h2",
      LIST,
      { ...grpc(), "content-type": "application/grpc;x=y" },
      frame(new Uint8Array()),
      "plugin",
    ),
    c(
      "grpc: no token",
      "h2",
      LIST,
      { "content-type": "application/grpc", te: "trailers" },
      frame(new Uint8Array()),
      "head",
    ),
    c("grpc: refused by the service", "h2", REGISTER, grpc(), frame(badName()), "short"),
    c("grpc: error with metadata (retry-after)", "h2", PUT, capped(grpc()), frame(putFull()), "short"),
    c(
      "grpc: first accepted encoding the server has",
      "h2",
      LIST,
      { ...grpc(), "grpc-accept-encoding": "identity, br" },
      frame(new Uint8Array()),
      "short",
    ),
    c("grpc: garbage message", "h2", LIST, grpc(), frame(GARBAGE), "short"),
    c("grpc: unknown field", "h2", LIST, grpc(), frame(UNKNOWN_FIELD), "short"),
    c("grpc: truncated frame", "h2", LIST, grpc(), frame(TRUNCATED).subarray(0, 6), "plugin"),
    c(
      "grpc: frame longer than announced",
      "h2",
      LIST,
      grpc(),
      new Uint8Array([0, 0, 0, 0, 1, 0x08, 0x01, 0x08]),
      "plugin",
    ),
    c(
      "grpc: two frames",
      "h2",
      LIST,
      grpc(),
      new Uint8Array([...frame(new Uint8Array()), ...frame(new Uint8Array())]),
      "plugin",
    ),
    c("grpc: no frame", "h2", LIST, grpc(), new Uint8Array(), "plugin"),
    c("grpc: half a frame header", "h2", LIST, grpc(), new Uint8Array([0, 0]), "plugin"),
    c(
      "grpc: compressed flag, no encoding",
      "h2",
      LIST,
      grpc(),
      frame(new Uint8Array(gzipSync(Buffer.alloc(0))), 1),
      "plugin",
    ),
    c(
      "grpc: gzip frame",
      "h2",
      LIST,
      { ...grpc(), "grpc-encoding": "gzip" },
      frame(new Uint8Array(gzipSync(Buffer.alloc(0))), 1),
      "plugin",
    ),
    c(
      "grpc: identity encoding",
      "h2",
      LIST,
      { ...grpc(), "grpc-encoding": "identity" },
      frame(new Uint8Array()),
      "short",
    ),
    c(
      "grpc: gzip accepted",
      "h2",
      LIST,
      { ...grpc(), "grpc-accept-encoding": "gzip" },
      frame(new Uint8Array()),
      "short",
    ),
    c("grpc: deadline", "h2", LIST, { ...grpc(), "grpc-timeout": "60S" }, frame(new Uint8Array()), "plugin"),
    c("grpc: bad deadline", "h2", LIST, { ...grpc(), "grpc-timeout": "forever" }, frame(new Uint8Array()), "plugin"),
    // gRPC-Web (binary) over HTTP/1.1 and h2c
    c("grpc-web: valid", "h1", LIST, grpcWeb(), frame(new Uint8Array()), "short"),
    c(
      "grpc-web: without +proto",
      "h1",
      LIST,
      { ...grpcWeb(), "content-type": "application/grpc-web" },
      frame(new Uint8Array()),
      "short",
    ),
    c("grpc-web: over h2c", "h2", LIST, grpcWeb(), frame(new Uint8Array()), "short"),
    c("grpc-web: garbage message", "h1", LIST, grpcWeb(), frame(GARBAGE), "short"),
    c("grpc-web: unknown field", "h1", LIST, grpcWeb(), frame(UNKNOWN_FIELD), "short"),
    c("grpc-web: refused by the service", "h1", REGISTER, grpcWeb(), frame(badName()), "short"),
    c("grpc-web: refused by the service over h2c", "h2", REGISTER, grpcWeb(), frame(badName()), "short"),
    c("grpc-web: error with metadata (retry-after)", "h1", PUT, capped(grpcWeb()), frame(putFull()), "short"),
    c("grpc-web: unimplemented by the service", "h1", SEND_MAIL, capped(grpcWeb()), frame(mailProto()), "short"),
    c(
      "grpc-web: no token",
      "h1",
      LIST,
      { "content-type": "application/grpc-web+proto", "x-grpc-web": "1" },
      frame(new Uint8Array()),
      "head",
    ),
    c(
      "grpc-web: gzip accepted",
      "h1",
      LIST,
      { ...grpcWeb(), "grpc-accept-encoding": "gzip" },
      frame(new Uint8Array()),
      "short",
    ),
    c(
      "grpc-web: identity encoding",
      "h1",
      LIST,
      { ...grpcWeb(), "grpc-encoding": "identity" },
      frame(new Uint8Array()),
      "short",
    ),
    c(
      "grpc-web: gzip frame",
      "h1",
      LIST,
      { ...grpcWeb(), "grpc-encoding": "gzip" },
      frame(new Uint8Array(gzipSync(Buffer.alloc(0))), 1),
      "plugin",
    ),
    c(
      "grpc-web: compressed flag, no encoding",
      "h1",
      LIST,
      grpcWeb(),
      frame(new Uint8Array(gzipSync(Buffer.alloc(0))), 1),
      "plugin",
    ),
    c("grpc-web: deadline", "h1", LIST, { ...grpcWeb(), "grpc-timeout": "60S" }, frame(new Uint8Array()), "plugin"),
    c("grpc-web: truncated frame", "h1", LIST, grpcWeb(), frame(TRUNCATED).subarray(0, 6), "plugin"),
    c(
      "grpc-web: two frames",
      "h1",
      LIST,
      grpcWeb(),
      new Uint8Array([...frame(new Uint8Array()), ...frame(new Uint8Array())]),
      "plugin",
    ),
    c("grpc-web: a trailer frame as the request", "h1", LIST, grpcWeb(), frame(new Uint8Array(), 0x80), "plugin"),
    c("grpc-web: no frame", "h1", LIST, grpcWeb(), new Uint8Array(), "plugin"),
    c(
      "grpc-web: JSON",
      "h1",
      LIST,
      { ...grpcWeb(), "content-type": "application/grpc-web+json" },
      frame(text("{}")),
      "plugin",
    ),
    c(
      "grpc-web: base64 text",
      "h1",
      LIST,
      { ...grpcWeb(), "content-type": "application/grpc-web-text" },
      text(Buffer.from(frame(new Uint8Array())).toString("base64")),
      "plugin",
    ),
  ];
}

type Answer = Awaited<ReturnType<typeof send>>;

/** What some cases must answer, beyond answering alike: that they exercise what their names say. */
const SHOWS: Record<string, (a: Answer) => void> = {
  "json: valid": (a) => expect(a.status).toBe(200),
  "proto: valid": (a) => expect(a.status).toBe(200),
  "json: no token": (a) => expect(a.status).toBe(401),
  "json: gzip accepted": (a) => expect(a.headers["content-encoding"]).toBe("gzip"),
  "grpc: valid": (a) => expect(a.trailers["grpc-status"]).toBe("0"),
  "grpc: gzip accepted": (a) => {
    expect([a.trailers["grpc-status"], a.headers["grpc-encoding"]]).toEqual(["0", "gzip"]);
    expect(Buffer.from(a.body, "base64")[0], "the frame's compressed flag").toBe(1);
  },
  // An error without a message is Trailers-Only: the status in the only header fields, no trailers.
  "grpc: refused by the service": (a) => expect([a.headers["grpc-status"], a.trailers]).toEqual(["3", {}]),
  "json: byte order mark": (a) => expect(a.status).toBe(200),
  // Decoded strictly, as REST's bodies are (it was read with U+FFFD in place of the byte).
  "json: not UTF-8": (a) => {
    expect(a.status).toBe(400);
    expect(JSON.parse(Buffer.from(a.body, "base64").toString())).toMatchObject({
      code: "invalid_argument",
      message: "body: is not UTF-8 (JSON is UTF-8 text)",
    });
  },
  "json: first accepted encoding the server has": (a) => expect(a.headers["content-encoding"]).toBe("br"),
  "json: encoding with a weight": (a) => expect([a.status, a.headers["content-encoding"]]).toEqual([200, undefined]),
  "json: error with metadata (retry-after)": (a) => {
    expect(a.status).toBe(429);
    expect(a.headers["retry-after"]).toMatch(/^[1-9]\d*$/);
  },
  "proto: error with metadata (retry-after)": (a) => expect(a.headers["retry-after"]).toMatch(/^[1-9]\d*$/),
  "grpc: error with metadata (retry-after)": (a) => {
    expect([a.headers["grpc-status"], a.trailers]).toEqual(["8", {}]);
    expect(a.headers["retry-after"]).toMatch(/^[1-9]\d*$/);
  },
  "json: unimplemented by the service": (a) => expect(a.status).toBe(501),
  "grpc: first accepted encoding the server has": (a) => expect(a.headers["grpc-encoding"]).toBe("br"),
  // gRPC-Web: the message's frame, then the status in the trailer frame (flag 0x80); none in the headers.
  "grpc-web: valid": (a) => {
    const frames = webFrames(a);
    expect(frames.map((f) => f.flags)).toEqual([0, 0x80]);
    expect(frames[1].text).toBe("grpc-status: 0\r\n");
    expect(a.headers["content-type"]).toBe("application/grpc-web+proto");
  },
  "grpc-web: over h2c": (a) => expect(webFrames(a).map((f) => f.flags)).toEqual([0, 0x80]),
  "grpc-web: refused by the service": (a) => {
    expect([a.status, a.headers["grpc-status"]]).toEqual([200, undefined]);
    const frames = webFrames(a);
    expect(frames.map((f) => f.flags)).toEqual([0x80]);
    expect(frames[0].text).toMatch(/^grpc-message: .+\r\ngrpc-status: 3\r\ngrpc-status-details-bin: \S+\r\n$/);
  },
  "grpc-web: error with metadata (retry-after)": (a) => {
    const frames = webFrames(a);
    expect(frames.map((f) => f.flags)).toEqual([0x80]);
    expect(frames[0].text).toMatch(/\bgrpc-status: 8\r\n/);
    expect(frames[0].text).toMatch(/\bretry-after: [1-9]\d*\r\n/);
  },
  "grpc-web: unimplemented by the service": (a) => expect(webFrames(a)[0].text).toMatch(/\bgrpc-status: 12\r\n/),
  // Refused at its head: Trailers-Only, the status in the header fields and no body.
  "grpc-web: no token": (a) => expect([a.headers["grpc-status"], a.body]).toEqual(["16", ""]),
  "grpc-web: gzip accepted": (a) => {
    expect(a.headers["grpc-encoding"]).toBe("gzip");
    expect(webFrames(a).map((f) => f.flags)).toEqual([1, 0x80]);
  },
};

/** The frames of a gRPC-Web answer's body: flags, and data as text. */
function webFrames(a: Answer): { flags: number; text: string }[] {
  const body = Buffer.from(a.body, "base64");
  const frames: { flags: number; text: string }[] = [];
  for (let at = 0; at < body.length;) {
    const length = body.readUInt32BE(at + 1);
    frames.push({ flags: body[at], text: body.subarray(at + 5, at + 5 + length).toString() });
    at += 5 + length;
  }
  return frames;
}

describe("the short path and the plugin alone answer alike", () => {
  it("has at least 40 cases", () => {
    expect(cases().length).toBeGreaterThanOrEqual(40);
    const names = new Set(cases().map((c) => c.name));
    for (const name of Object.keys(SHOWS)) expect(names.has(name), name).toBe(true);
  });

  // The cases are built again inside each test: their tokens exist only once `beforeAll` has run.
  for (const { name } of cases()) {
    it(name, async () => {
      const c = cases().find((x) => x.name === name)!;
      expect(c.headers.authorization ?? "", "the case carries its token").not.toBe("Bearer ");
      const before = { short: await served(short, "short"), plugin: await served(short, "plugin") };
      const beforeOff = { short: await served(plugin, "short"), plugin: await served(plugin, "plugin") };
      const viaShort = await send(short, c);
      const viaPlugin = await send(plugin, c);
      expect(viaShort).toEqual(viaPlugin);
      SHOWS[c.name]?.(viaShort);
      const after = { short: await served(short, "short"), plugin: await served(short, "plugin") };
      const afterOff = { short: await served(plugin, "short"), plugin: await served(plugin, "plugin") };
      // Which path served each leg (a request refused before any handler, e.g. by the content-type parser, counts none).
      expect(after.short - before.short).toBe(c.expect === "short" ? 1 : 0);
      if (c.expect !== "plugin") expect(after.plugin - before.plugin).toBe(0);
      expect(afterOff.short - beforeOff.short).toBe(0);
    });
  }
});
