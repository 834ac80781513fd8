/**
 * gRPC server reflection (grpc.reflection.v1), so `buf curl` and `grpcurl`
 * can call the services without a local copy of the schema. It answers from
 * the descriptors compiled into `gen/`, so it always matches what is served.
 */
import { createRegistry, toBinary, type DescFile, type DescService } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  ServerReflection,
  type ServerReflectionRequest,
  type ServerReflectionResponseSchema,
} from "../../gen/grpc/reflection/v1/reflection_pb.js";
import type { MessageInitShape } from "@bufbuild/protobuf";

export { ServerReflection };

type Response = MessageInitShape<typeof ServerReflectionResponseSchema>;

export function createReflectionImpl(services: DescService[]): ServiceImpl<typeof ServerReflection> {
  const files = new Map<string, DescFile>();
  const addFile = (file: DescFile) => {
    if (files.has(file.name)) return;
    files.set(file.name, file);
    file.dependencies.forEach(addFile);
  };
  for (const service of [...services, ServerReflection]) addFile(service.file);
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

  const answer = (req: ServerReflectionRequest): Response => {
    const base = { validHost: req.host, originalRequest: req };
    const r = req.messageRequest;
    switch (r.case) {
      case "listServices":
        return {
          ...base,
          messageResponse: {
            case: "listServicesResponse",
            value: { service: [...services, ServerReflection].map((s) => ({ name: s.typeName })) },
          },
        };
      case "fileByFilename": {
        const file = files.get(r.value);
        return {
          ...base,
          ...(file
            ? {
                messageResponse: {
                  case: "fileDescriptorResponse",
                  value: { fileDescriptorProto: withDependencies(file) },
                },
              }
            : notFound(`no file ${r.value}`)),
        };
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
        return {
          ...base,
          ...(file
            ? {
                messageResponse: {
                  case: "fileDescriptorResponse",
                  value: { fileDescriptorProto: withDependencies(file) },
                },
              }
            : notFound(`no symbol ${symbol}`)),
        };
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
