/**
 * The server under test of the Connect conformance suite (`npm run conformance`): the runner
 * (`connectconformance --mode server`) starts this program, writes one size-delimited
 * `ServerCompatRequest` to its stdin and reads one size-delimited `ServerCompatResponse` (where it
 * listens) from its stdout. It starts the platform server itself, with the embedded database in a
 * directory of its own and the reference `ConformanceService` as a test-only service, so the suite's
 * calls cross the same stack as the API's: the one port (HTTP/1.1 and h2c, or TLS with the runner's
 * certificate), connect-fastify, the unary short path, the interceptor and the protocol-layer errors.
 * The log goes to stderr (CONFORMANCE_LOG_LEVEL, default silent): stdout is the runner's.
 */
import crypto from "node:crypto";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { loadConfig } from "../../src/core/config.ts";
import { resolveDataDirSecrets } from "../../src/core/data-dir.ts";
import { createLogger } from "../../src/core/logger.ts";
import { createPlatformServer } from "../../src/platform-server.ts";
import {
  ServerCompatRequestSchema,
  ServerCompatResponseSchema,
} from "../../gen/test-only/connectrpc/conformance/v1/server_compat_pb.js";
import { ConformanceService } from "../../gen/test-only/connectrpc/conformance/v1/service_pb.js";
import { conformanceRegistry, createConformanceImpl } from "./conformance-service.ts";
import { createScratchDatabase } from "../support/scratch-database.ts";

/** Reads one message of the runner's framing (a 4-byte big-endian length, then the bytes) from stdin. */
async function readRequest(): Promise<Uint8Array> {
  let buffered = Buffer.alloc(0);
  for await (const chunk of process.stdin as AsyncIterable<Buffer>) {
    buffered = Buffer.concat([buffered, chunk]);
    if (buffered.length >= 4 && buffered.length >= 4 + buffered.readUInt32BE(0)) break;
  }
  if (buffered.length < 4 || buffered.length < 4 + buffered.readUInt32BE(0)) {
    throw new Error("stdin ended before a whole ServerCompatRequest");
  }
  return buffered.subarray(4, 4 + buffered.readUInt32BE(0));
}

const request = fromBinary(ServerCompatRequestSchema, await readRequest());
if (request.clientTlsCert.length > 0) throw new Error("TLS client certificates are not supported");
const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), "pb-conformance-"));
// On PostgreSQL when DATABASE_URL names one (a database of its own, dropped at the end): it starts in about a
// second, the embedded database in several, and the runner gives a server 10 s to answer.
const databaseUrl = process.env.DATABASE_URL
  ? await createScratchDatabase(process.env.DATABASE_URL, "pb_conformance")
  : undefined;
const env: Record<string, string> = {
  PORT: "0",
  HOST: "127.0.0.1",
  DATA_DIR: dataDir,
  ADMIN_TOKEN: "pba_conformance_" + crypto.randomBytes(24).toString("base64url"),
  SECRETS_KEY: crypto.randomBytes(32).toString("base64"),
  LOG_LEVEL: process.env.CONFORMANCE_LOG_LEVEL ?? "silent",
  ...(databaseUrl ? { DATABASE_URL: databaseUrl.url } : {}),
};
if (request.useTls && request.serverCreds) {
  // The runner's self-signed certificate for 127.0.0.1 and localhost, served as TLS_KEY_FILE/TLS_CERT_FILE would be.
  await fs.writeFile(path.join(dataDir, "tls.key"), request.serverCreds.key, { mode: 0o600 });
  await fs.writeFile(path.join(dataDir, "tls.crt"), request.serverCreds.cert, { mode: 0o600 });
  env.TLS_KEY_FILE = path.join(dataDir, "tls.key");
  env.TLS_CERT_FILE = path.join(dataDir, "tls.crt");
}
const { config } = await resolveDataDirSecrets(loadConfig(env));
const server = await createPlatformServer({
  config,
  logger: createLogger(config.logLevel, process.stderr),
  testServices: {
    services: [{ service: ConformanceService, impl: createConformanceImpl() }],
    jsonRegistry: conformanceRegistry,
  },
});
const url = new URL(await server.listen());

const stop = async () => {
  // Calls the runner left open (a cancelled stream) must not hold the exit.
  const forced = setTimeout(() => process.exit(0), 2000);
  forced.unref();
  // The database first (FORCE ends the server's connections to it): a slow close met the exit above before it
  // was dropped, and every run left databases behind on the server.
  await databaseUrl?.drop().catch(() => undefined);
  await server.close().catch(() => undefined);
  await fs.rm(dataDir, { recursive: true, force: true });
  process.exit(0);
};
process.once("SIGTERM", () => void stop());
process.once("SIGINT", () => void stop());

const response = toBinary(
  ServerCompatResponseSchema,
  create(ServerCompatResponseSchema, {
    host: url.hostname,
    port: Number(url.port),
    pemCert: request.useTls && request.serverCreds ? request.serverCreds.cert : new Uint8Array(0),
  }),
);
const framed = Buffer.alloc(4 + response.byteLength);
framed.writeUInt32BE(response.byteLength, 0);
framed.set(response, 4);
process.stdout.write(framed);
