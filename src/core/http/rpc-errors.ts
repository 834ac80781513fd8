/**
 * Errors made by the protocol layer (Connect's handlers, or this server's own
 * edges) carry the same `platform.meta.v1.ErrorDetail` as the application's,
 * so a client reads one code for every failure: a request body that is not
 * the method's protobuf message is `invalid_argument` (a client's bad bytes,
 * not a server fault), a body over the read limit `payload_too_large` (told
 * apart from a quota, which is also `resource_exhausted`), an unknown service
 * or method `unimplemented`.
 *
 * Connect writes these errors itself, past the interceptors; so every
 * handler's answer is looked at on its way out (`withErrorDetails`): an error
 * without an `ErrorDetail` gets one, in the place its protocol puts errors
 * (the JSON body of a Connect unary call, the end-of-stream message of a
 * Connect stream, the trailers of gRPC, the trailer frame of gRPC-Web).
 *
 * Only public APIs of `@bufbuild/protobuf` and `@connectrpc/connect` are used:
 * the encodings are small and fixed by the protocols' specifications.
 */
import { create, toBinary, toJson, type JsonValue } from "@bufbuild/protobuf";
import { anyPack, AnySchema } from "@bufbuild/protobuf/wkt";
import { base64Decode, base64Encode, BinaryReader, BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorDetailSchema, type ErrorDetail } from "../../../gen/platform/meta/v1/error_pb.js";
import { PlatformError, statusOf, toConnectError } from "../errors.ts";
import { BODY_LIMIT_BYTES, NOT_UTF8_JSON, refused } from "./body-parsers.ts";

/** `Code.InvalidArgument` as the Connect protocol spells it: `invalid_argument`. */
export function codeToString(code: Code): string {
  const name = Code[code];
  return name[0].toLowerCase() + name.substring(1).replace(/[A-Z]/g, (c) => "_" + c.toLowerCase());
}

const codeByString = new Map(
  Object.values(Code)
    .filter((c): c is Code => typeof c === "number")
    .map((c) => [codeToString(c), c]),
);

/** Why a binary message with a string field that is not UTF-8 is refused (proto3 strings are UTF-8 text). */
const NOT_UTF8_STRING = "body: a string field is not UTF-8 (protobuf strings are UTF-8 text)";

/**
 * The error of the protocol layer that is the client's fault, as one of this service's errors, or undefined
 * when `message` is none of those: bytes that are not the method's message (`parse binary:`, `parse json:`), text
 * that is not UTF-8 (Connect's JSON is decoded strictly, as REST's; protobuf-es refuses a string field that is not
 * UTF-8), a gRPC message whose compressed flag is set while the call named no `grpc-encoding` (INTERNAL in Connect
 * and grpc-go, but the bytes are the client's, so INVALID_ARGUMENT here: docs/connect.md), an encoding this server
 * does not have (UNIMPLEMENTED, with what it has).
 */
function clientProtocolError(code: Code, message: string): PlatformError | undefined {
  if (message === NOT_UTF8_JSON) return refused(NOT_UTF8_JSON);
  if (message.includes("not valid for encoding utf-8")) return refused(NOT_UTF8_STRING);
  if (message.startsWith("received compressed envelope, but do not know how to decompress")) {
    return refused("body: a message is flagged compressed, but the call names no grpc-encoding");
  }
  if (message.startsWith("parse binary:") || message.startsWith("parse json:") || code === Code.InvalidArgument) {
    return new PlatformError("invalid_argument", message, {
      details: [`body: is not a valid request message of this method (${message})`],
    });
  }
  return undefined;
}

/**
 * The encodings this server takes, from Connect's refusal of another (`unknown compression "deflate": supported
 * encodings are gzip,br`), or undefined for any other message: named in `grpc-accept-encoding`, as the gRPC
 * compression spec asks of an UNIMPLEMENTED for an encoding.
 */
function acceptedEncodings(code: Code, message: string): string | undefined {
  if (code !== Code.Unimplemented) return undefined;
  return /^unknown compression ".*": supported encodings are ([\w,-]*)$/.exec(message)?.[1];
}

/** What an error of the protocol layer (Connect's code and message) means as one of this service's errors. */
function fromProtocolError(code: Code, message: string): PlatformError {
  const clients = clientProtocolError(code, message);
  if (clients) return clients;
  if (code === Code.ResourceExhausted && message.includes("readMaxBytes")) {
    return new PlatformError("payload_too_large", message, {
      details: [`body: larger than ${BODY_LIMIT_BYTES} bytes`],
    });
  }
  if (code === Code.Unimplemented) return new PlatformError("unimplemented", message);
  if (code === Code.DeadlineExceeded) return new PlatformError("deadline_exceeded", message);
  if (code === Code.Unavailable) return new PlatformError("unavailable", message);
  return new PlatformError("internal", message);
}

/**
 * A `ConnectError` the protocol layer made for a client's bad request (see `clientProtocolError`), as this
 * service's error; undefined for any other error. The interceptor uses it for what Connect raises inside the
 * call (a streaming method's request is parsed there), which would otherwise be answered `internal`.
 */
export function clientErrorOf(err: unknown): PlatformError | undefined {
  if (!(err instanceof ConnectError) || errorDetailsOf(err).length > 0) return undefined;
  return clientProtocolError(err.code, err.rawMessage);
}

/**
 * The error as the Connect protocol's JSON (`{ code, message, details }`),
 * every detail with its `type`, `debug` (its JSON, when it has one) and
 * base64 `value`, keys in the order Connect writes them: the same bytes
 * whichever path answered.
 */
export function connectErrorJson(error: ConnectError): Uint8Array {
  const o: { code: string; message?: string; details?: unknown[] } = { code: codeToString(error.code) };
  if (error.rawMessage.length > 0) o.message = error.rawMessage;
  if (error.details.length > 0) {
    o.details = error.details.map((detail) => {
      if (!("desc" in detail))
        return { type: detail.type, debug: detail.debug, value: base64Encode(detail.value, "std_raw") };
      const message = create(detail.desc, detail.value);
      let debug: JsonValue | undefined;
      try {
        debug = toJson(detail.desc, message);
      } catch {
        // Only a readable copy (a detail holding an Any of an unknown type has none).
      }
      return { type: detail.desc.typeName, debug, value: base64Encode(toBinary(detail.desc, message), "std_raw") };
    });
  }
  return new TextEncoder().encode(JSON.stringify(o));
}

/**
 * The gRPC status fields of the error: `grpc-status`, `grpc-message`
 * (percent-encoded) and, when it has details, `grpc-status-details-bin` (a
 * `google.rpc.Status` holding each detail as an Any, base64 without padding).
 */
export function grpcStatusFields(error: ConnectError): Record<string, string> {
  const fields: Record<string, string> = {
    "grpc-status": String(error.code),
    "grpc-message": grpcMessageEncode(error.rawMessage),
  };
  if (error.details.length === 0) return fields;
  // google.rpc.Status: code = 1, message = 2, repeated google.protobuf.Any details = 3.
  const writer = new BinaryWriter();
  writer.tag(1, WireType.Varint).int32(error.code);
  if (error.rawMessage.length > 0) writer.tag(2, WireType.LengthDelimited).string(error.rawMessage);
  for (const detail of error.details) {
    const any =
      "desc" in detail
        ? anyPack(detail.desc, create(detail.desc, detail.value))
        : create(AnySchema, { typeUrl: `type.googleapis.com/${detail.type}`, value: detail.value });
    writer.tag(3, WireType.LengthDelimited).bytes(toBinary(AnySchema, any));
  }
  fields["grpc-status-details-bin"] = base64Encode(writer.finish(), "std_raw");
  return fields;
}

function errorDetailsOf(error: ConnectError): ErrorDetail[] {
  return error.findDetails(ErrorDetailSchema);
}

/** Whether a gRPC `grpc-status-details-bin` already holds an ErrorDetail. */
function statusHasErrorDetail(bin: string | null): boolean {
  if (!bin) return false;
  try {
    const reader = new BinaryReader(base64Decode(bin));
    while (reader.pos < reader.len) {
      const [field, wire] = reader.tag();
      if (field === 3 && wire === WireType.LengthDelimited) {
        const any = new BinaryReader(reader.bytes());
        while (any.pos < any.len) {
          const [f, w] = any.tag();
          if (f === 1 && w === WireType.LengthDelimited) {
            if (any.string().endsWith(`/${ErrorDetailSchema.typeName}`)) return true;
          } else any.skip(w);
        }
      } else reader.skip(wire);
    }
  } catch {
    return false;
  }
  return false;
}

/** A protocol-layer error as this service answers it: our code and an ErrorDetail. */
function withDetail(code: Code, message: string): ConnectError {
  return toConnectError(fromProtocolError(code, message));
}

/** The answer of a Connect unary error body, with an ErrorDetail when it had none; undefined if nothing changes. */
export function connectUnaryErrorWithDetail(
  body: Uint8Array,
): { status: number; body: Uint8Array; acceptEncoding?: string } | undefined {
  let json: { code?: unknown; message?: unknown; details?: { type?: unknown }[] };
  try {
    json = JSON.parse(new TextDecoder().decode(body)) as typeof json;
  } catch {
    return undefined;
  }
  if (json.details?.some((d) => d.type === ErrorDetailSchema.typeName)) return undefined;
  const code = codeByString.get(String(json.code)) ?? Code.Unknown;
  const message = typeof json.message === "string" ? json.message : "";
  const error = withDetail(code, message);
  // An encoding this server lacks: Connect asks for the ones it has in `Accept-Encoding`.
  const acceptEncoding = acceptedEncodings(code, message);
  return { status: connectHttpStatus(error.code), body: connectErrorJson(error), acceptEncoding };
}

/**
 * `grpc-message` as the gRPC spec encodes it: UTF-8, every byte outside printable ASCII (0x20 to 0x7E) and `%`
 * percent-encoded, nothing else (https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md#responses).
 * Connect writes `encodeURIComponent`, which also encodes `/`, `:` and spaces; grpc-js decodes with `decodeURI`,
 * which leaves `%2F` and `%3A` as they are, so its users read `%2Fplatform.nope.v1.NopeService%2FNope%3A`.
 */
function grpcMessageEncode(message: string): string {
  let out = "";
  for (const byte of new TextEncoder().encode(message)) {
    out +=
      byte < 0x20 || byte > 0x7e || byte === 0x25
        ? "%" + byte.toString(16).toUpperCase().padStart(2, "0")
        : String.fromCharCode(byte);
  }
  return out;
}

/**
 * Rewrites a gRPC status held in `fields` (headers or trailers) to carry an ErrorDetail, and its message in the
 * spec's encoding; true if it changed.
 */
export function grpcStatusWithDetail(fields: Headers): boolean {
  const status = fields.get("grpc-status");
  if (status === null || status === "0") return false;
  const sent = fields.get("grpc-message") ?? "";
  let message = sent;
  try {
    message = decodeURIComponent(message);
  } catch {
    // Not percent-encoded: kept as it came.
  }
  if (statusHasErrorDetail(fields.get("grpc-status-details-bin"))) {
    const encoded = grpcMessageEncode(message);
    if (encoded === sent) return false;
    fields.set("grpc-message", encoded);
    return true;
  }
  const error = withDetail(Number(status), message);
  for (const [k, v] of Object.entries(grpcStatusFields(error))) fields.set(k, v);
  const accepted = acceptedEncodings(error.code, message);
  if (accepted !== undefined) fields.set("grpc-accept-encoding", accepted);
  return true;
}

/**
 * The HTTP status of each Connect code, indexed by the code (1 Canceled, 2 Unknown, … 16 Unauthenticated), as the
 * table of https://connectrpc.com/docs/protocol/#error-codes gives it. A copy (Connect exports its own only from
 * an internal module), tied to Connect's by test/core/connect-tables.test.ts for every code.
 */
const HTTP_STATUS_OF_CODE: readonly number[] = [
  500, 499, 500, 400, 504, 404, 409, 403, 429, 400, 409, 400, 501, 500, 503, 500, 401,
];

/** The HTTP status of a Connect unary error; 500 for a code Connect does not define. */
export function connectHttpStatus(code: Code): number {
  return HTTP_STATUS_OF_CODE[code] ?? 500;
}

/**
 * Rewrites the end-of-stream envelope (Connect streams: flag 0x02, JSON
 * `{ error, metadata }`; gRPC-Web: flag 0x80, trailers as HTTP header lines)
 * of an enveloped body so that its error carries an ErrorDetail; every other
 * envelope passes unchanged.
 */
export async function* endOfStreamWithDetail(
  body: AsyncIterable<Uint8Array>,
  protocol: "connect" | "grpc-web",
): AsyncIterable<Uint8Array> {
  const endFlag = protocol === "connect" ? 0x02 : 0x80;
  let buffer: Uint8Array = new Uint8Array(0);
  for await (const chunk of body) {
    buffer = buffer.length === 0 ? chunk : concat(buffer, chunk);
    for (;;) {
      if (buffer.length < 5) break;
      const length = new DataView(buffer.buffer, buffer.byteOffset).getUint32(1);
      if (buffer.length < 5 + length) break;
      const flags = buffer[0];
      const data = buffer.subarray(5, 5 + length);
      buffer = buffer.subarray(5 + length);
      yield (flags & endFlag) === endFlag ? envelope(flags, rewriteEnd(data, protocol)) : envelope(flags, data);
    }
  }
  if (buffer.length > 0) yield buffer;
}

function rewriteEnd(data: Uint8Array, protocol: "connect" | "grpc-web"): Uint8Array {
  if (protocol === "connect") {
    let end: { error?: { code?: unknown; message?: unknown; details?: { type?: unknown }[] }; metadata?: unknown };
    try {
      end = JSON.parse(new TextDecoder().decode(data)) as typeof end;
    } catch {
      return data;
    }
    if (!end.error || end.error.details?.some((d) => d.type === ErrorDetailSchema.typeName)) return data;
    const code = codeByString.get(String(end.error.code)) ?? Code.Unknown;
    const error = withDetail(code, typeof end.error.message === "string" ? end.error.message : "");
    end.error = JSON.parse(new TextDecoder().decode(connectErrorJson(error))) as typeof end.error;
    return new TextEncoder().encode(JSON.stringify(end));
  }
  const lines = new TextDecoder().decode(data).split("\r\n");
  const fields = new Headers();
  for (const line of lines) {
    const at = line.indexOf(":");
    if (at > 0) fields.append(line.slice(0, at).trim(), line.slice(at + 1).trim());
  }
  if (!grpcStatusWithDetail(fields)) return data;
  let text = "";
  fields.forEach((value, key) => (text += `${key}: ${value}\r\n`));
  return new TextEncoder().encode(text);
}

function envelope(flags: number, data: Uint8Array): Uint8Array {
  const out = new Uint8Array(5 + data.length);
  out[0] = flags;
  new DataView(out.buffer).setUint32(1, data.length);
  out.set(data, 5);
  return out;
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a, 0);
  out.set(b, a.length);
  return out;
}

/** A Connect error of the protocol layer (or anything thrown) as this service answers it: with an ErrorDetail. */
export function detailed(e: unknown): ConnectError {
  const error =
    e instanceof ConnectError ? e : new ConnectError("internal error", Code.Internal, undefined, undefined, e);
  return errorDetailsOf(error).length > 0 ? error : withDetail(error.code, error.rawMessage);
}

type Fields = Record<string, string>;

/**
 * The answer to a call of a service or method this server does not have, by
 * its content type, or undefined when the request is not an RPC (then it is
 * REST's 404). Given at once, without reading the body (which may never end).
 */
export function unimplementedAnswer(
  contentType: string | undefined,
  method: string,
  url: string,
): { status: number; headers: Fields; body?: Uint8Array } | undefined {
  const [path, query = ""] = url.split("?", 2);
  const rpcPath = /^\/[A-Za-z_]\w*(\.[A-Za-z_]\w*)+\/[A-Za-z_]\w*$/.test(path);
  // Connect's GET form of a side-effect-free call: `?connect=v1&encoding=json&message=...`.
  const connectGet = method === "GET" && /(^|&)encoding=/.test(query);
  const type = mediaType(contentType);
  if (!isGrpcType(type) && !(rpcPath && (isConnectType(type, method) || connectGet))) return undefined;
  const err = new PlatformError("unimplemented", `${path}: no such service or method`);
  if (isGrpcType(type)) return rpcErrorAnswer(contentType, "POST", err);
  // Connect, unary or streaming: no route is a 404 (as a Connect server's router answers it; clients read 404 as
  // `unimplemented`), with the error's JSON for those that read the body.
  return { status: 404, headers: { "content-type": "application/json" }, body: connectErrorJson(toConnectError(err)) };
}

/**
 * `err` answered at once to a call of an RPC this server has, by its content
 * type, without reading its body: gRPC and gRPC-Web as a trailers-only
 * response, Connect (unary, streaming, GET) as its JSON error with the HTTP
 * status of the code. Undefined when the request is of none of these (the
 * plugin then refuses it as it does).
 */
export function rpcErrorAnswer(
  contentType: string | undefined,
  method: string,
  err: PlatformError,
): { status: number; headers: Fields; body?: Uint8Array } | undefined {
  const type = mediaType(contentType);
  const error = toConnectError(err);
  if (isGrpcType(type)) return { status: 200, headers: { "content-type": type, ...grpcStatusFields(error) } };
  if (!isConnectType(type, method) && method !== "GET") return undefined;
  // A Connect stream's answer is always 200, its error in the end-of-stream message (flag 0x02, JSON
  // `{ "error": ... }`), whichever its codec: https://connectrpc.com/docs/protocol/#streaming-response.
  if (type.startsWith("application/connect+")) {
    const end = new TextEncoder().encode(`{"error":${new TextDecoder().decode(connectErrorJson(error))}}`);
    return { status: 200, headers: { "content-type": type }, body: envelope(0x02, end) };
  }
  return { status: statusOf(err.code), headers: { "content-type": "application/json" }, body: connectErrorJson(error) };
}

const mediaType = (contentType: string | undefined) => (contentType ?? "").split(";")[0].trim().toLowerCase();
const isGrpcType = (type: string) => type.startsWith("application/grpc");
const isConnectType = (type: string, method: string) =>
  type.startsWith("application/connect+") ||
  (method === "POST" && (type === "application/json" || type === "application/proto"));
