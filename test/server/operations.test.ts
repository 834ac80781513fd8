import { execFile } from "node:child_process";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import https from "node:https";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport, createConnectTransport } from "@connectrpc/connect-node";
import { MetaService } from "../../gen/platform/meta/v1/meta_pb.js";
import { startServer, type TestServer } from "../support/harness.ts";

const run = promisify(execFile);

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
  let dir: string;
  beforeAll(async () => {
    dir = await fs.mkdtemp(path.join(os.tmpdir(), "pb-tls-"));
    await run("openssl", [
      "req",
      "-x509",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:prime256v1",
      "-nodes",
      "-keyout",
      path.join(dir, "key.pem"),
      "-out",
      path.join(dir, "cert.pem"),
      "-days",
      "1",
      "-subj",
      "/CN=127.0.0.1",
      "-addext",
      "subjectAltName=IP:127.0.0.1",
    ]);
    t = await startServer({
      env: { TLS_KEY_FILE: path.join(dir, "key.pem"), TLS_CERT_FILE: path.join(dir, "cert.pem") },
    });
  });
  afterAll(async () => {
    await t?.close();
    await fs.rm(dir, { recursive: true, force: true });
  });

  it("serves HTTPS over HTTP/1.1 and gRPC over HTTP/2 on the same port (ALPN)", async () => {
    expect(t.url.startsWith("https://")).toBe(true);
    const ca = await fs.readFile(path.join(dir, "cert.pem"));
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
