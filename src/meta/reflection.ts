/**
 * gRPC server reflection (grpc.reflection.v1, and v1alpha beside it for
 * grpcurl and older tools), so `buf curl` and `grpcurl` can call the services
 * without a local copy of the schema. It answers from the descriptors
 * compiled into `gen/`, so it always matches what is served. The two
 * versions' messages are the same on the wire: v1alpha is answered by the v1
 * code, its messages converted through their bytes.
 */
import { createRegistry, fromBinary, toBinary, type DescFile, type DescService } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  ServerReflection,
  ServerReflectionRequestSchema,
  ServerReflectionResponseSchema,
  type ServerReflectionRequest,
} from "../../gen/grpc/reflection/v1/reflection_pb.js";
import {
  ServerReflection as ServerReflectionV1Alpha,
  ServerReflectionRequestSchema as V1AlphaRequestSchema,
  ServerReflectionResponseSchema as V1AlphaResponseSchema,
} from "../../gen/grpc/reflection/v1alpha/reflection_pb.js";
import { create, type MessageInitShape } from "@bufbuild/protobuf";

export { ServerReflection, ServerReflectionV1Alpha };

type Response = MessageInitShape<typeof ServerReflectionResponseSchema>;

export function createReflectionImpl(services: DescService[]): ServiceImpl<typeof ServerReflection> {
  const files = new Map<string, DescFile>();
  const addFile = (file: DescFile) => {
    if (files.has(file.name)) return;
    files.set(file.name, file);
    file.dependencies.forEach(addFile);
  };
  const reflection = [ServerReflection, ServerReflectionV1Alpha];
  for (const service of [...services, ...reflection]) addFile(service.file);
  const registry = createRegistry(...files.values());

  /** The file and everything it imports, dependencies first, as reflection clients expect. */
  const withDependencies = (file: DescFile): Uint8Array[] => {
    const out: DescFile[] = [];
    const visit = (f: DescFile) => {
      if (out.includes(f)) return;
      f.dependencies.forEach(visit);
      out.push(f);
    };
    visit(file);
    return out.map((f) => toBinary(FileDescriptorProtoSchema, f.proto));
  };

  const notFound = (message: string): Response => ({
    messageResponse: { case: "errorResponse", value: { errorCode: 5, errorMessage: message } },
  });

  /** The file with its dependencies, or `not found` with `missing`. */
  const fileAnswer = (file: DescFile | undefined, missing: string): Response =>
    file
      ? { messageResponse: { case: "fileDescriptorResponse", value: { fileDescriptorProto: withDependencies(file) } } }
      : notFound(missing);

  const answer = (req: ServerReflectionRequest): Response => {
    const base = { validHost: req.host, originalRequest: req };
    const r = req.messageRequest;
    switch (r.case) {
      case "listServices":
        return {
          ...base,
          messageResponse: {
            case: "listServicesResponse",
            value: { service: [...services, ...reflection].map((s) => ({ name: s.typeName })) },
          },
        };
      case "fileByFilename": {
        const file = files.get(r.value);
        return { ...base, ...fileAnswer(file, `no file ${r.value}`) };
      }
      case "fileContainingSymbol": {
        const symbol = r.value.replace(/^\./, "");
        let desc = registry.get(symbol);
        if (!desc) {
          // A method name: "pkg.Service.Method".
          const cut = symbol.lastIndexOf(".");
          const parent = registry.getService(symbol.slice(0, cut));
          if (parent?.methods.some((m) => m.name === symbol.slice(cut + 1))) desc = parent;
        }
        const file = desc && "file" in desc ? desc.file : undefined;
        return { ...base, ...fileAnswer(file, `no symbol ${symbol}`) };
      }
      case "allExtensionNumbersOfType":
        return {
          ...base,
          messageResponse: {
            case: "allExtensionNumbersResponse",
            value: { baseTypeName: r.value, extensionNumber: [] },
          },
        };
      default:
        return { ...base, ...notFound("unsupported reflection request") };
    }
  };

  return {
    async *serverReflectionInfo(requests) {
      for await (const req of requests) yield answer(req);
    },
  };
}

/** grpc.reflection.v1alpha: the v1 answers, each message converted through its (identical) wire form. */
export function createReflectionV1AlphaImpl(services: DescService[]): ServiceImpl<typeof ServerReflectionV1Alpha> {
  const v1 = createReflectionImpl(services);
  return {
    async *serverReflectionInfo(requests, context) {
      const asV1 = async function* () {
        for await (const req of requests)
          yield fromBinary(ServerReflectionRequestSchema, toBinary(V1AlphaRequestSchema, req));
      };
      for await (const res of v1.serverReflectionInfo(asV1(), context)) {
        yield fromBinary(
          V1AlphaResponseSchema,
          toBinary(ServerReflectionResponseSchema, create(ServerReflectionResponseSchema, res)),
        );
      }
    },
  };
}
