/**
 * Unary Connect and gRPC calls take a short path (`connect-routes.ts`); a
 * deadline header sends the same call through Connect's general handler.
 * Each case sends one request both ways and expects the same answer: status,
 * headers (but the per-request ones), body, and for gRPC the frame and the
 * trailers, errors included.
 */
import http2 from "node:http2";
import { describe, expect, it, vi } from "vitest";
import { create, toBinary } from "@bufbuild/protobuf";
import {
  AnalyticsService,
  PropertyKind,
  RegisterEventTypeRequestSchema,
} from "../../gen/platform/analytics/v1/analytics_pb.js";
import { useTestServer } from "../support/harness.ts";

const t = useTestServer();

const PER_REQUEST = new Set(["date", "x-request-id", "connection", "keep-alive", ":status"]);

function comparable(headers: Record<string, unknown>) {
  return Object.fromEntries(
    Object.entries(headers)
      .filter(([k]) => !PER_REQUEST.has(k))
      .sort(([a], [b]) => a.localeCompare(b)),
  );
}

/** One request over HTTP/1.1: status, headers, raw body. */
async function connectCall(path: string, body: Uint8Array | string, headers: Record<string, string>) {
  const res = await fetch(t.url + path, { method: "POST", headers, body, decompress: false } as RequestInit);
  const h: Record<string, string> = {};
  res.headers.forEach((v, k) => (h[k] = v));
  return { status: res.status, headers: comparable(h), body: Buffer.from(await res.arrayBuffer()).toString("base64") };
}

/** One gRPC call over h2c: headers, body bytes, trailers. */
async function grpcCall(path: string, message: Uint8Array, headers: Record<string, string>) {
  const session = http2.connect(t.url);
  try {
    return await new Promise<{ headers: Record<string, unknown>; body: string; trailers: Record<string, unknown> }>(
      (resolve, reject) => {
        const stream = session.request({
          ":method": "POST",
          ":path": path,
          "content-type": "application/grpc",
          te: "trailers",
          ...headers,
        });
        let head: Record<string, unknown> = {};
        let trailers: Record<string, unknown> = {};
        const chunks: Buffer[] = [];
        stream.on("response", (h) => (head = { ...h }));
        stream.on("trailers", (h) => (trailers = { ...h }));
        stream.on("data", (c: Buffer) => chunks.push(c));
        stream.on("end", () =>
          resolve({
            headers: comparable(head),
            body: Buffer.concat(chunks).toString("base64"),
            trailers: comparable(trailers),
          }),
        );
        stream.on("error", reject);
        const frame = Buffer.alloc(5 + message.length);
        frame.writeUInt32BE(message.length, 1);
        frame.set(message, 5);
        stream.end(frame);
      },
    );
  } finally {
    session.close();
  }
}

const LIST = `/${AnalyticsService.typeName}/ListEventTypes`;
const REGISTER = `/${AnalyticsService.typeName}/RegisterEventType`;
const GENERAL_CONNECT = { "connect-timeout-ms": "60000" };
const GENERAL_GRPC = { "grpc-timeout": "60S" };

async function bothConnect(path: string, body: Uint8Array | string, headers: Record<string, string>) {
  const short = await connectCall(path, body, headers);
  const general = await connectCall(path, body, { ...headers, ...GENERAL_CONNECT });
  expect(short).toEqual(general);
  return short;
}

async function bothGrpc(path: string, message: Uint8Array, headers: Record<string, string>) {
  const short = await grpcCall(path, message, headers);
  const general = await grpcCall(path, message, { ...headers, ...GENERAL_GRPC });
  expect(short).toEqual(general);
  return short;
}

describe("unary Connect and gRPC calls: the short path answers as the general handler", () => {
  it("Connect JSON and binary: answers, refusals, malformed bodies, compression", async () => {
    const app = await t.createApp();
    const auth = { authorization: `Bearer ${app.token}` };
    const json = { ...auth, "content-type": "application/json" };
    const proto = { ...auth, "content-type": "application/proto" };
    // Registering changes `updatedAt`: sent once; the listings after it are compared.
    expect(
      (
        await connectCall(
          REGISTER,
          JSON.stringify({ name: "signup", properties: { plan: "PROPERTY_KIND_STRING" } }),
          json,
        )
      ).status,
    ).toBe(200);
    expect((await bothConnect(LIST, "{}", json)).status).toBe(200);
    expect((await bothConnect(LIST, new Uint8Array(), proto)).status).toBe(200);
    expect((await bothConnect(LIST, "{}", { "content-type": "application/json" })).status).toBe(401);
    expect((await bothConnect(LIST, "{", json)).status).toBe(400);
    expect((await bothConnect(LIST, new Uint8Array([0xff, 0xff]), proto)).status).toBe(400);
    const bad = toBinary(RegisterEventTypeRequestSchema, create(RegisterEventTypeRequestSchema, { name: "Bad" }));
    expect((await bothConnect(REGISTER, bad, proto)).status).toBe(400);
    // Large enough to be compressed when the client accepts it.
    for (let i = 0; i < 30; i++) {
      await connectCall(
        REGISTER,
        JSON.stringify({
          name: `type_${i}`,
          properties: { plan: "PROPERTY_KIND_STRING", seats: "PROPERTY_KIND_NUMBER" },
        }),
        json,
      );
    }
    const gzipped = await bothConnect(LIST, "{}", { ...json, "accept-encoding": "gzip" });
    expect(gzipped.headers["content-encoding"]).toBe("gzip");
  });

  it("gRPC: answers, refusals with details, compression", async () => {
    const app = await t.createApp();
    const auth = { authorization: `Bearer ${app.token}` };
    const register = (name: string) =>
      toBinary(
        RegisterEventTypeRequestSchema,
        create(RegisterEventTypeRequestSchema, { name, properties: { plan: PropertyKind.STRING } }),
      );
    expect((await grpcCall(REGISTER, register("signup"), auth)).trailers["grpc-status"]).toBe("0");
    expect((await bothGrpc(LIST, new Uint8Array(), auth)).trailers["grpc-status"]).toBe("0");
    // Refused by the service, no message: Trailers-Only too (the status in the headers, no trailers).
    const refused = await bothGrpc(REGISTER, register("Bad"), auth);
    expect([refused.headers["grpc-status"], refused.trailers["grpc-status"]]).toEqual(["3", undefined]);
    expect(refused.headers["grpc-status-details-bin"]).toBeTruthy();
    // Refused when its head arrives, before its body is read: a trailers-only answer (the status in the headers).
    const anonymous = await bothGrpc(LIST, new Uint8Array(), {});
    expect([anonymous.headers["grpc-status"], anonymous.trailers["grpc-status"]]).toEqual(["16", undefined]);
    for (let i = 0; i < 30; i++) await grpcCall(REGISTER, register(`type_${i}`), auth);
    const compressed = await bothGrpc(LIST, new Uint8Array(), { ...auth, "grpc-accept-encoding": "gzip" });
    expect(compressed.headers["grpc-encoding"]).toBe("gzip");
  });
});

describe("registerConnectRoutes: authentication", () => {
  it("authenticates a call once, at its head, on the short path and the plugin's alike (the interceptor takes that principal)", async () => {
    const app = await t.createApp();
    const auth = { authorization: `Bearer ${app.token}` };
    // Counted, not replaced: the real authenticator answers every call, at once for a remembered token
    // (`authenticateNow`) or by its lookup (`authenticate`), once in all.
    const spy = vi.spyOn(t.server.authenticator, "authenticate");
    const spyNow = vi.spyOn(t.server.authenticator, "authenticateNow");
    try {
      const counted = async (call: () => Promise<unknown>) => {
        spy.mockClear();
        spyNow.mockClear();
        await call();
        const decided = spyNow.mock.results.filter((r) => r.type === "return" && r.value !== undefined).length;
        return spy.mock.calls.length + decided;
      };
      const json = { ...auth, "content-type": "application/json" };
      expect(await counted(() => connectCall(LIST, "{}", json))).toBe(1);
      expect(await counted(() => connectCall(LIST, "{}", { ...json, ...GENERAL_CONNECT }))).toBe(1);
      expect(await counted(() => grpcCall(LIST, new Uint8Array(), auth))).toBe(1);
      expect(await counted(() => grpcCall(LIST, new Uint8Array(), { ...auth, ...GENERAL_GRPC }))).toBe(1);
      // Refused at the head: not authenticated again, and never answered as a success.
      const refused = await connectCall(LIST, "{}", {
        authorization: "Bearer pbt_nobody",
        "content-type": "application/json",
      });
      expect(refused.status).toBe(401);
    } finally {
      spy.mockRestore();
      spyNow.mockRestore();
    }
  });
});
