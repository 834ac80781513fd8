/**
 * The short path (`connect-short-path.ts`) and the protocol-layer errors (`rpc-errors.ts`) write the
 * Connect and gRPC protocols without Connect's helpers, which live in its internal modules
 * (`@connectrpc/connect/protocol*`, no semantic versioning, kept out of `src/` by ESLint). Their copies of
 * Connect's tables are checked here against Connect's own, so that a Connect upgrade that changes one
 * fails this test instead of making the two paths answer differently.
 */
import { ConnectError, Code } from "@connectrpc/connect";
import { mergeNonProtocolHeaders } from "@connectrpc/connect/protocol";
import * as connectProtocol from "@connectrpc/connect/protocol-connect";
import * as grpcProtocol from "@connectrpc/connect/protocol-grpc";
import * as grpcWebProtocol from "@connectrpc/connect/protocol-grpc-web";
import { describe, expect, it } from "vitest";
import { ErrorDetailSchema } from "../../gen/platform/meta/v1/error_pb.js";
import { create } from "@bufbuild/protobuf";
import {
  GRPC_WEB_TRAILER_FLAG,
  grpcWebTrailer,
  PROTOCOL_HEADERS,
  WIRE,
} from "../../src/core/http/connect-short-path.ts";
import { codeToString, connectHttpStatus, grpcStatusFields } from "../../src/core/http/rpc-errors.ts";

/** Every code Connect defines, and two it does not. */
const CODES = [...Object.values(Code).filter((c): c is Code => typeof c === "number"), 17 as Code, 99 as Code];

describe("the short path's copies of Connect's protocol tables", () => {
  it("maps every code to Connect's HTTP status and string", () => {
    expect(CODES.length).toBeGreaterThan(17);
    for (const code of CODES) {
      expect(connectHttpStatus(code), `code ${code}`).toBe(connectProtocol.codeToHttpStatus(code));
      if (Code[code] !== undefined) expect(codeToString(code), `code ${code}`).toBe(connectProtocol.codeToString(code));
    }
  });

  it("names the content types and headers as Connect does", () => {
    expect(WIRE.connectJson).toBe(connectProtocol.contentTypeUnaryJson);
    expect(WIRE.connectProto).toBe(connectProtocol.contentTypeUnaryProto);
    expect(WIRE.grpcProto).toBe(grpcProtocol.contentTypeProto);
    // Both gRPC types are the protocol's binary ones.
    for (const type of [WIRE.grpc, WIRE.grpcProto]) {
      expect(grpcProtocol.parseContentType(type), type).toEqual({ binary: true });
    }
    for (const type of [WIRE.connectJson, WIRE.connectProto]) {
      expect(connectProtocol.parseContentType(type), type).toMatchObject({ stream: false });
    }
    const lower = (name: string) => name.toLowerCase();
    expect(WIRE.connectTimeout).toBe(lower(connectProtocol.headerTimeout));
    expect(WIRE.connectEncoding).toBe(lower(connectProtocol.headerUnaryEncoding));
    expect(WIRE.connectAcceptEncoding).toBe(lower(connectProtocol.headerUnaryAcceptEncoding));
    expect(WIRE.connectTrailerPrefix).toBe(lower(connectProtocol.headerUnaryTrailerPrefix));
    expect(WIRE.grpcTimeout).toBe(lower(grpcProtocol.headerTimeout));
    expect(WIRE.grpcEncoding).toBe(lower(grpcProtocol.headerEncoding));
    expect(WIRE.grpcAcceptEncoding).toBe(lower(grpcProtocol.headerAcceptEncoding));
  });

  it("names gRPC-Web's content types, headers and trailer flag as Connect does", () => {
    expect(WIRE.grpcWebProto).toBe(grpcWebProtocol.contentTypeProto);
    // Both gRPC-Web types the short path takes are the protocol's binary, not base64 text, ones.
    for (const type of [WIRE.grpcWeb, WIRE.grpcWebProto]) {
      expect(grpcWebProtocol.parseContentType(type), type).toEqual({ text: false, binary: true });
    }
    const lower = (name: string) => name.toLowerCase();
    // gRPC-Web's deadline and encodings are read from the headers gRPC's are.
    expect(WIRE.grpcTimeout).toBe(lower(grpcWebProtocol.headerTimeout));
    expect(WIRE.grpcEncoding).toBe(lower(grpcWebProtocol.headerEncoding));
    expect(WIRE.grpcAcceptEncoding).toBe(lower(grpcWebProtocol.headerAcceptEncoding));
    expect(GRPC_WEB_TRAILER_FLAG).toBe(grpcWebProtocol.trailerFlag);
  });

  it("writes a gRPC-Web trailer frame as Connect serializes and parses one", () => {
    const error = new ConnectError("nope: 100%", Code.NotFound, { "retry-after": "3" }, [
      { desc: ErrorDetailSchema, value: create(ErrorDetailSchema, { code: "not_found" }) },
    ]);
    const trailer = new Headers({ "x-b": "2", "X-A": "1" });
    trailer.append("x-a", "again");
    for (const [k, v] of Object.entries(grpcStatusFields(error))) trailer.set(k, v);
    const ours = grpcWebTrailer(trailer);
    expect(Buffer.from(ours).toString()).toBe(Buffer.from(grpcWebProtocol.trailerSerialize(trailer)).toString());
    const read = grpcWebProtocol.trailerParse(ours);
    expect(read.get("x-a")).toBe("1, again");
    const status = grpcProtocol.findTrailerError(read);
    expect([status?.code, status?.rawMessage]).toEqual([Code.NotFound, "nope: 100%"]);
    expect(status?.findDetails(ErrorDetailSchema)[0]?.code).toBe("not_found");
    expect(Buffer.from(grpcWebTrailer(new Headers({ "grpc-status": "0" }))).toString()).toBe("grpc-status: 0\r\n");
  });

  it("keeps out of an error's metadata exactly the headers Connect keeps out", () => {
    // Every header name either side knows of, and names that are metadata.
    const names = new Set<string>([
      ...PROTOCOL_HEADERS,
      ...[...Object.entries(connectProtocol), ...Object.entries(grpcProtocol)]
        .filter(([key, value]) => key.startsWith("header") && typeof value === "string")
        .map(([, value]) => (value as string).toLowerCase()),
      "retry-after",
      "x-request-id",
      "idempotent-replayed",
      "trailer-x",
      "grpc-x",
      "connect-x",
    ]);
    for (const name of names) {
      const connectKeeps = new Headers();
      mergeNonProtocolHeaders(connectKeeps, new Headers({ [name]: "v" }));
      expect(!PROTOCOL_HEADERS.has(name), name).toBe(connectKeeps.has(name));
    }
  });

  it("writes a gRPC status in the trailers Connect reads", () => {
    const error = new ConnectError("nope: 100%", Code.NotFound, undefined, [
      { desc: ErrorDetailSchema, value: create(ErrorDetailSchema, { code: "not_found" }) },
    ]);
    const fields = new Headers(grpcStatusFields(error));
    const lower = (name: string) => name.toLowerCase();
    expect(Object.keys(grpcStatusFields(error)).sort()).toEqual(
      [grpcProtocol.headerGrpcStatus, grpcProtocol.headerGrpcMessage, grpcProtocol.headerStatusDetailsBin]
        .map(lower)
        .sort(),
    );
    // Connect's own reader of a trailer status gets back the code, the message and the detail.
    const read = grpcProtocol.findTrailerError(fields);
    expect(read?.code).toBe(Code.NotFound);
    expect(read?.rawMessage).toBe("nope: 100%");
    expect(read?.findDetails(ErrorDetailSchema)[0]?.code).toBe("not_found");
  });
});
