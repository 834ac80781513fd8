/**
 * `gen/` is the workspace package `@platform-batteries/gen`: another service
 * (or a client) can depend on it and import the generated services by name.
 */
import { describe, expect, it } from "vitest";
import { QueueService } from "@platform-batteries/gen/platform/queues/v1/queues_pb.js";
import { QueueService as Local } from "../../gen/platform/queues/v1/queues_pb.js";

describe("@platform-batteries/gen", () => {
  it("resolves to the generated code", () => {
    expect(QueueService.typeName).toBe("platform.queues.v1.QueueService");
    expect(QueueService.method.streamMessages.name).toBe(Local.method.streamMessages.name);
  });
});
