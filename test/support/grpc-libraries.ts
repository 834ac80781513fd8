/**
 * The official gRPC libraries as clients of the server: `@grpc/grpc-js` (with
 * `@grpc/proto-loader` reading `proto/`) and Python's `grpcio` (C-core, run as
 * `/usr/bin/python3 test/support/grpcio-calls.py`). Both send a request's bytes
 * as given (built with the generated schemas, or malformed on purpose) and
 * report the status code, the message and the trailing metadata as the
 * library itself read them: what an application using it would see.
 */
import { execFile } from "node:child_process";
import path from "node:path";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

export interface LibraryCall {
  /** `/package.Service/Method`. */
  path: string;
  request: Uint8Array;
  metadata?: Record<string, string>;
  /** A server-streaming method: read every message until the status. */
  stream?: boolean;
  /** Send a deadline this far ahead (grpc-js: none by default; grpcio always sends one). */
  timeoutSeconds?: number;
  /** Compress the request with this encoding. */
  compression?: "deflate" | "gzip";
}

export interface LibraryAnswer {
  code: number;
  details: string;
  /** The trailing metadata (for Trailers-Only, the response's only header fields), `-bin` values in hex. */
  trailing: Record<string, string>;
  /** Messages received. */
  received: number;
}

const target = (url: string) => new URL(url).host;
const identity = (b: Buffer) => b;

/**
 * Each client its own connection, closed with it: grpc-js otherwise keeps connections in a process-wide pool
 * after `close()`, and the server's close waits for them.
 */
const LOCAL_POOL = { "grpc.use_local_subchannel_pool": 1 };

/** grpc-js clients, one per server address and compression, closed by `closeGrpcJsClients`. */
const clients = new Map<string, grpc.Client>();

function grpcJsClient(url: string, compression?: "deflate" | "gzip"): grpc.Client {
  const key = `${url} ${compression ?? ""}`;
  let client = clients.get(key);
  if (!client) {
    // grpc-js's compression algorithms: 1 deflate, 2 gzip.
    const options = {
      ...LOCAL_POOL,
      ...(compression ? { "grpc.default_compression_algorithm": compression === "deflate" ? 1 : 2 } : {}),
    };
    client = new grpc.Client(target(url), grpc.credentials.createInsecure(), options);
    clients.set(key, client);
  }
  return client;
}

export function closeGrpcJsClients(): void {
  for (const client of clients.values()) client.close();
  clients.clear();
}

function metadataOf(fields: Record<string, string> = {}): grpc.Metadata {
  const md = new grpc.Metadata();
  for (const [k, v] of Object.entries(fields)) md.set(k, v);
  return md;
}

function trailingOf(md: grpc.Metadata | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(md?.getMap() ?? {})) out[k] = Buffer.isBuffer(v) ? v.toString("hex") : v;
  return out;
}

/** One call by grpc-js. */
export function grpcJsCall(url: string, call: LibraryCall): Promise<LibraryAnswer> {
  const client = grpcJsClient(url, call.compression);
  const options: grpc.CallOptions = call.timeoutSeconds ? { deadline: Date.now() + call.timeoutSeconds * 1000 } : {};
  const request = Buffer.from(call.request);
  return new Promise((resolve) => {
    let received = 0;
    const done = (status: grpc.StatusObject) =>
      resolve({ code: status.code, details: status.details, trailing: trailingOf(status.metadata), received });
    if (call.stream) {
      const stream = client.makeServerStreamRequest(
        call.path,
        identity,
        identity,
        request,
        metadataOf(call.metadata),
        options,
      );
      stream.on("data", () => received++);
      stream.on("error", () => {});
      stream.on("status", done);
    } else {
      // grpc-js calls back with the answer before it emits the status.
      const unary = client.makeUnaryRequest(
        call.path,
        identity,
        identity,
        request,
        metadataOf(call.metadata),
        options,
        (_err, value) => void (value !== undefined && received++),
      );
      unary.on("status", done);
    }
  });
}

/** Several calls by grpcio, in one Python process (one channel), in order. */
export function grpcioCalls(url: string, calls: LibraryCall[]): Promise<LibraryAnswer[]> {
  const spec = {
    target: target(url),
    calls: calls.map((c) => ({
      path: c.path,
      request_hex: Buffer.from(c.request).toString("hex"),
      metadata: Object.entries(c.metadata ?? {}),
      stream: c.stream ?? false,
      timeout: c.timeoutSeconds ?? 30,
      compression: c.compression ?? null,
    })),
  };
  return new Promise((resolve, reject) => {
    const child = execFile(
      "/usr/bin/python3",
      [path.join(import.meta.dirname, "grpcio-calls.py")],
      { maxBuffer: 1 << 24 },
      (err, stdout, stderr) => {
        if (err) return reject(new Error(`grpcio: ${err.message}\n${stderr}`));
        resolve(JSON.parse(stdout) as LibraryAnswer[]);
      },
    );
    child.stdin!.end(JSON.stringify(spec));
  });
}

/**
 * A client of `service` (e.g. `platform.queues.v1.QueueService`) generated by `@grpc/proto-loader` from
 * `proto/` at run time, as a service that has only the .proto files would make one.
 */
export function loadedClient(url: string, file: string, service: string): grpc.Client & Record<string, unknown> {
  const definition = protoLoader.loadSync(file, {
    includeDirs: [path.join(import.meta.dirname, "../../proto")],
    defaults: false,
  });
  let node: unknown = grpc.loadPackageDefinition(definition);
  for (const part of service.split(".")) node = (node as Record<string, unknown>)[part];
  const Client = node as grpc.ServiceClientConstructor;
  const client = new Client(target(url), grpc.credentials.createInsecure(), LOCAL_POOL) as grpc.Client &
    Record<string, unknown>;
  clients.set(`${url} ${service}`, client);
  return client;
}
