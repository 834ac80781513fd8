import { afterAll, beforeAll, describe, expect, it } from "vitest";
import https from "node:https";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport, createConnectTransport } from "@connectrpc/connect-node";
import { MetaService } from "../../gen/platform/meta/v1/meta_pb.js";
import { startServer, testCertificate, type TestServer } from "../support/harness.ts";

describe("logs", () => {
  let t: TestServer;
  const lines: string[] = [];
  beforeAll(async () => {
    t = await startServer({ logLines: lines });
  });
  afterAll(() => t?.close());

  it("one line per request with its request id; never a token or a body", async () => {
    const app = await t.createApp();
    const res = await t.request("POST", "/v1/queues/jobs", {
      token: app.token,
      body: { payload: { password: "hunter2-do-not-log" } },
      headers: { "x-request-id": "req-log-check" },
    });
    expect(res.headers.get("x-request-id")).toBe("req-log-check");
    await t.request("GET", "/v1/secrets/NOPE", { token: "pbt_not-a-real-token-value" });
    const all = lines.join("");
    const mine = lines.map((l) => JSON.parse(l)).filter((l) => l.reqId === "req-log-check");
    expect(mine).toHaveLength(1);
    expect(mine[0]).toMatchObject({ msg: "request", route: "/v1/queues/:queue", method: "POST" });
    expect(all).not.toContain(app.token);
    expect(all).not.toContain(t.adminToken);
    expect(all).not.toContain("pbt_not-a-real-token-value");
    expect(all).not.toContain("hunter2-do-not-log");
  });
});

describe("TLS", () => {
  let t: TestServer;
  let ca: Buffer;
  beforeAll(async () => {
    // The test certificate (made once with openssl), served as TLS_KEY_FILE and TLS_CERT_FILE would be.
    ca = (await testCertificate()).ca;
    t = await startServer({ tls: true });
  });
  afterAll(() => t?.close());

  it("serves HTTPS over HTTP/1.1 and gRPC over HTTP/2 on the same port (ALPN)", async () => {
    expect(t.url.startsWith("https://")).toBe(true);
    const body = await new Promise<string>((resolve, reject) => {
      https
        .get(`${t.url}/health`, { ca }, (res) => {
          let text = "";
          res.on("data", (d: Buffer) => (text += d.toString()));
          res.on("end", () => resolve(text));
        })
        .on("error", reject);
    });
    expect(JSON.parse(body)).toEqual({ status: "ok" });
    const grpc = createClient(MetaService, createGrpcTransport({ baseUrl: t.url, nodeOptions: { ca } }));
    expect((await grpc.getHealth({})).status).toBe("ok");
    const connect = createClient(
      MetaService,
      createConnectTransport({ baseUrl: t.url, httpVersion: "1.1", nodeOptions: { ca } }),
    );
    expect((await connect.getVersion({})).name).toBe("platform-batteries");
  });
});
