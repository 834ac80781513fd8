/**
 * CORS for Connect and gRPC-Web from browsers on other origins: off by
 * default (no CORS headers, so a browser refuses), and with CORS_ORIGINS the
 * listed origins get the preflight answer and the headers Connect documents.
 */
import { describe, expect, it } from "vitest";
import { afterAll, beforeAll } from "vitest";
import { startServer, type TestServer } from "../support/harness.ts";

const PATH = "/platform.meta.v1.MetaService/GetVersion";
let off: TestServer;
let on: TestServer;

beforeAll(async () => {
  off = await startServer();
  on = await startServer({ env: { CORS_ORIGINS: "https://app.example.com, http://localhost:5173" } });
});
afterAll(async () => {
  await on?.close();
  await off?.close();
});

const preflight = (server: TestServer, origin: string) =>
  fetch(server.url + PATH, {
    method: "OPTIONS",
    headers: {
      origin,
      "access-control-request-method": "POST",
      "access-control-request-headers": "content-type,connect-protocol-version,authorization",
    },
  });

describe("CORS for Connect and gRPC-Web", () => {
  it("is off by default", async () => {
    const res = await preflight(off, "https://app.example.com");
    expect(res.headers.get("access-control-allow-origin")).toBeNull();
  });

  it("answers a listed origin's preflight with Connect's headers, and its calls with the exposed headers", async () => {
    const res = await preflight(on, "https://app.example.com");
    expect(res.status).toBe(204);
    expect(res.headers.get("access-control-allow-origin")).toBe("https://app.example.com");
    const allowed = (res.headers.get("access-control-allow-headers") ?? "").toLowerCase();
    for (const h of ["content-type", "connect-protocol-version", "connect-timeout-ms", "x-grpc-web", "authorization"])
      expect(allowed).toContain(h);
    const call = await fetch(on.url + PATH, {
      method: "POST",
      headers: { origin: "https://app.example.com", "content-type": "application/json" },
      body: "{}",
    });
    expect(call.status).toBe(200);
    expect(call.headers.get("access-control-allow-origin")).toBe("https://app.example.com");
    expect(call.headers.get("access-control-expose-headers")?.toLowerCase()).toContain("grpc-status");
  });

  it("gives an origin not listed no CORS headers", async () => {
    const res = await preflight(on, "https://evil.example.com");
    expect(res.headers.get("access-control-allow-origin")).toBeNull();
  });
});
