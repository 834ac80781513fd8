/**
 * The conformance suite's reference service as the test server serves it (`testServices`): callable
 * without a token over every protocol, its `Any` fields written as Connect JSON (the registry reaches
 * both the short path and the plugin), and the facilities still refuse a call without a token.
 * The suite itself runs by `npm run conformance`.
 */
import { describe, expect, it } from "vitest";
import { createRegistry } from "@bufbuild/protobuf";
import { anyUnpack } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { ConformanceService, UnaryRequestSchema } from "../../gen/test-only/connectrpc/conformance/v1/service_pb.js";
import { QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import { useTestServer, type Protocol } from "../support/harness.ts";
import { conformanceRegistry, createConformanceImpl } from "./conformance-service.ts";

const t = useTestServer({
  testServices: {
    services: [{ service: ConformanceService, impl: createConformanceImpl() }],
    jsonRegistry: conformanceRegistry,
  },
});

describe("the conformance suite's reference service on the platform's stack", () => {
  it.each<Protocol>(["connect", "grpc", "grpc-web"])("answers Unary without a token over %s", async (protocol) => {
    const client = t.client(ConformanceService, undefined, protocol);
    const data = new TextEncoder().encode("hello");
    const res = await client.unary({ responseDefinition: { response: { case: "responseData", value: data } } });
    expect(res.payload?.data).toEqual(data);
    const echoed = res.payload?.requestInfo?.requests.map((any) => anyUnpack(any, createRegistry(UnaryRequestSchema)));
    expect(echoed?.[0]?.$typeName).toBe("connectrpc.conformance.v1.UnaryRequest");
  });

  it("writes the echoed request (an Any) as Connect JSON on the short path", async () => {
    const res = await t.request("POST", "/connectrpc.conformance.v1.ConformanceService/Unary", {
      body: { responseDefinition: { responseData: "aGk=" } },
    });
    expect(res.status).toBe(200);
    expect(res.body.payload.data).toBe("aGk=");
    expect(res.body.payload.requestInfo.requests[0]["@type"]).toBe(
      "type.googleapis.com/connectrpc.conformance.v1.UnaryRequest",
    );
  });

  it("leaves the facilities closed to a call without a token", async () => {
    const err = await t
      .client(QueueService)
      .listQueues({})
      .then(
        () => undefined,
        (e: unknown) => ConnectError.from(e),
      );
    expect(err?.code).toBe(Code.Unauthenticated);
  });
});
