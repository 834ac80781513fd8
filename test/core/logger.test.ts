/**
 * The service's logger (src/core/logger.ts): an error logged with the fields
 * that carry what it was given (a client error's raw bytes, a statement's
 * parameters and text, a row quoted in `detail`) is written without them, and
 * a TLS server at LOG_LEVEL=trace does not write a malformed request's bytes.
 */
import crypto from "node:crypto";
import tls from "node:tls";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createLogger, serializeError } from "../../src/core/logger.ts";
import { startServer, testCertificate, type TestServer } from "../support/harness.ts";

const SECRET = "pbt_" + crypto.randomBytes(18).toString("base64url");
/** The secret as pino writes a Buffer holding it: `"data":[112,98,...]`. */
const SECRET_BYTES = [...Buffer.from(SECRET)].join(",");

describe("serializeError", () => {
  it("keeps the type, message, stack and code, and drops rawPacket, params, query and detail at every depth", () => {
    const cause = Object.assign(new Error("duplicate key value violates unique constraint"), {
      code: "23505",
      detail: `Key (id)=(${SECRET}) already exists.`,
      params: [1, SECRET],
      query: `INSERT INTO t VALUES (1, '${SECRET}')`,
    });
    const err = Object.assign(new Error("statement failed", { cause }), {
      code: "HPE_INVALID_HEADER_TOKEN",
      rawPacket: Buffer.from(`GET / HTTP/1.1\r\nAuthorization: Bearer ${SECRET}\r\n`),
      parameters: [SECRET],
    });
    const lines: string[] = [];
    createLogger("trace", { write: (line: string) => void lines.push(line) }).error({ err }, "failed");
    expect(lines).toHaveLength(1);
    expect(lines[0]).not.toContain(SECRET);
    expect(lines[0]).not.toContain(SECRET_BYTES);
    const logged = JSON.parse(lines[0]).err as Record<string, unknown>;
    expect(logged).toMatchObject({ type: "Error", code: "HPE_INVALID_HEADER_TOKEN" });
    expect(logged.message).toContain("statement failed");
    expect(logged.stack).toContain("statement failed");
    expect(
      Object.keys(logged).filter((k) => ["rawPacket", "parameters", "params", "query", "detail"].includes(k)),
    ).toEqual([]);
    // A plain cause object (not an Error) is cleaned too.
    const plain = serializeError(Object.assign(new Error("x"), { cause: { params: [SECRET], code: "1" } }));
    expect(JSON.stringify(plain)).not.toContain(SECRET);
  });
});

describe("a TLS server at LOG_LEVEL=trace", () => {
  const lines: string[] = [];
  let server: TestServer;
  beforeAll(async () => {
    server = await startServer({ tls: true, logLines: lines, env: { LOG_LEVEL: "trace" } });
  });
  afterAll(() => server?.close());

  it("answers a malformed request 400 and logs none of its bytes (a token in a header, a link token in the path)", async () => {
    const { ca } = await testCertificate();
    const port = Number(new URL(server.url).port);
    for (const request of [
      `GET /v1/queues HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${SECRET}\r\nBad Header\r\n\r\n`,
      `PUT /secret-links/${SECRET} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{"value":"${SECRET}"}\r\n`,
    ]) {
      const socket = tls.connect({ host: "127.0.0.1", port, ca, ALPNProtocols: ["http/1.1"] });
      await new Promise<void>((resolve, reject) => socket.once("secureConnect", resolve).once("error", reject));
      let answer = "";
      socket.on("data", (chunk: Buffer) => (answer += chunk.toString("latin1")));
      const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
      socket.write(request);
      await closed;
      expect(answer).toMatch(/^HTTP\/1\.1 400 /);
    }
    const log = lines.join("");
    // The client errors were logged (the test sees the lines it means), without the bytes.
    expect(log).toContain("client error");
    expect(log).not.toContain(SECRET);
    expect(log).not.toContain(SECRET_BYTES);
  });
});
