/**
 * TLS certificates renewed in place (certbot, cert-manager) and reloaded on
 * SIGHUP, without a restart: new handshakes get the new certificate, a
 * connection opened before keeps working (with the old one), and a new pair
 * that does not load (a key that does not match, a file that is not PEM)
 * keeps the one in use, with one line in the log. The start-up log says
 * `https://` when serving TLS, and nothing says `http://`.
 */
import { execFile } from "node:child_process";
import fs from "node:fs/promises";
import http2 from "node:http2";
import os from "node:os";
import path from "node:path";
import tls from "node:tls";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, type TestDatabase } from "../support/harness.ts";
import { cleanEnv, startServiceProcess, type ServiceProcess } from "../support/service-process.ts";

const run = promisify(execFile);

/** A self-signed key pair for 127.0.0.1 in `dir` (`name`.key, `name`.pem), made with openssl. */
async function keyPair(dir: string, name: string): Promise<{ key: string; cert: string }> {
  const key = path.join(dir, `${name}.key`);
  const cert = path.join(dir, `${name}.pem`);
  await run("openssl", [
    ...["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"],
    ...["-keyout", key, "-out", cert, "-days", "1", "-subj", `/CN=${name}`, "-addext", "subjectAltName=IP:127.0.0.1"],
  ]);
  return { key, cert };
}

/** The fingerprint of the certificate a new TLS handshake with `url` gets. */
async function handshakeFingerprint(url: string): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = tls.connect({
      host: hostname,
      port: Number(port),
      rejectUnauthorized: false,
      ALPNProtocols: ["h2"],
    });
    socket.once("secureConnect", () => {
      resolve(socket.getPeerCertificate().fingerprint256);
      socket.end();
    });
    socket.once("error", reject);
  });
}

async function fingerprintOf(certFile: string): Promise<string> {
  return new (await import("node:crypto")).X509Certificate(await fs.readFile(certFile)).fingerprint256;
}

/** GET `pathname` on an open HTTP/2 session; resolves to the status. */
function get(session: http2.ClientHttp2Session, pathname: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = session.request({ ":path": pathname });
    req.once("response", (headers) => resolve(Number(headers[":status"])));
    req.once("error", reject);
    req.resume();
    req.end();
  });
}

describe("TLS reload on SIGHUP (src/run-server.ts, PlatformServer.reloadTls)", () => {
  let database: TestDatabase;
  let dir: string;
  let service: ServiceProcess;
  let served: { key: string; cert: string };

  beforeAll(async () => {
    database = await createTestDatabase();
    dir = await fs.mkdtemp(path.join(os.tmpdir(), "pb-tls-reload-"));
    served = { key: path.join(dir, "served.key"), cert: path.join(dir, "served.pem") };
    const first = await keyPair(dir, "first");
    await fs.copyFile(first.key, served.key);
    await fs.copyFile(first.cert, served.cert);
    service = await startServiceProcess(
      cleanEnv({
        PORT: "0",
        DATA_DIR: database.dataDir,
        ADMIN_TOKEN: database.adminToken,
        SECRETS_KEY: database.secretsKey,
        TLS_KEY_FILE: served.key,
        TLS_CERT_FILE: served.cert,
        ...(database.url ? { DATABASE_URL: database.url } : {}),
      }),
    );
  }, 60_000);
  afterAll(async () => {
    service?.child.kill("SIGTERM");
    await service?.exited;
    await database?.drop();
    if (dir) await fs.rm(dir, { recursive: true, force: true });
  });

  /** Sends SIGHUP and resolves with the log line the reload wrote (one of `messages`). */
  const hangUp = async (messages: string[]) => {
    const before = service.stdout().length;
    service.child.kill("SIGHUP");
    for (;;) {
      const lines = service
        .stdout()
        .slice(before)
        .split("\n")
        .filter((l) => l.startsWith("{"))
        .map((l) => JSON.parse(l) as { msg: string; level: number; reason?: string });
      const found = lines.filter((l) => messages.includes(l.msg));
      if (found.length > 0) return found;
      await new Promise((resolve) => service.child.stdout!.once("data", resolve));
    }
  };

  it("says https:// at start, and never http://", () => {
    const listening = service
      .stdout()
      .split("\n")
      .filter((l) => l.includes('"platform batteries listening"'));
    expect(listening).toHaveLength(1);
    expect(service.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    expect(service.stdout()).not.toContain("http://");
  });

  it("serves a new certificate to new handshakes; an open connection keeps working", async () => {
    expect(await handshakeFingerprint(service.url)).toBe(await fingerprintOf(served.cert));
    const session = http2.connect(service.url, { rejectUnauthorized: false });
    try {
      expect(await get(session, "/health")).toBe(200);
      const oldFingerprint = (session.socket as tls.TLSSocket).getPeerCertificate().fingerprint256;

      const second = await keyPair(dir, "second");
      await fs.copyFile(second.key, served.key);
      await fs.copyFile(second.cert, served.cert);
      const logged = await hangUp([
        "TLS certificate reloaded",
        "TLS certificate not reloaded; serving the one loaded before",
      ]);
      expect(logged.map((l) => l.msg)).toEqual(["TLS certificate reloaded"]);

      const newFingerprint = await fingerprintOf(second.cert);
      expect(newFingerprint).not.toBe(oldFingerprint);
      expect(await handshakeFingerprint(service.url)).toBe(newFingerprint);
      // The connection made before the reload: still open, still answering, on the certificate it was given.
      expect(await get(session, "/health")).toBe(200);
      expect(session.closed || session.destroyed).toBe(false);
      expect((session.socket as tls.TLSSocket).getPeerCertificate().fingerprint256).toBe(oldFingerprint);
    } finally {
      session.close();
    }
  });

  it("keeps the certificate in use when the new pair does not load, with one line in the log", async () => {
    const inUse = await handshakeFingerprint(service.url);
    const third = await keyPair(dir, "third");
    // A certificate with another pair's key: they do not match.
    await fs.copyFile(third.cert, served.cert);
    const mismatch = await hangUp([
      "TLS certificate reloaded",
      "TLS certificate not reloaded; serving the one loaded before",
    ]);
    expect(mismatch).toHaveLength(1);
    expect(mismatch[0]).toMatchObject({
      msg: "TLS certificate not reloaded; serving the one loaded before",
      level: 50,
    });
    expect(await handshakeFingerprint(service.url)).toBe(inUse);

    // Not PEM at all.
    await fs.writeFile(served.cert, "not a certificate\n");
    const garbage = await hangUp([
      "TLS certificate reloaded",
      "TLS certificate not reloaded; serving the one loaded before",
    ]);
    expect(garbage.map((l) => l.msg)).toEqual(["TLS certificate not reloaded; serving the one loaded before"]);
    expect(await handshakeFingerprint(service.url)).toBe(inUse);
    const session = http2.connect(service.url, { rejectUnauthorized: false });
    try {
      expect(await get(session, "/health")).toBe(200);
    } finally {
      session.close();
    }
  });
});
