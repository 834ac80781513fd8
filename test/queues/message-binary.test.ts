import { create, fromBinary, toBinary, toJson, type JsonValue } from "@bufbuild/protobuf";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { MessageSchema } from "../../gen/platform/queues/v1/queues_pb.js";
import { encodeDelimitedMessage, toMessage } from "../../src/queues/message-binary.ts";
import type { StoredMessage } from "../../src/queues/queue-store.ts";

/** The message as the library encodes it: the bytes `encodeMessage` must reproduce exactly. */
function libraryBytes(m: StoredMessage): Uint8Array {
  return toBinary(MessageSchema, create(MessageSchema, toMessage(m)));
}

function stored(payload: string, over: Partial<StoredMessage> = {}): StoredMessage {
  return {
    id: "0d8f6a52-7c1e-4e59-9a55-3c1f0e2b9d41",
    queue: "orders",
    payload,
    enqueuedAt: new Date(1_764_400_000_123),
    expiresAt: new Date(1_765_000_000_000),
    leaseExpiresAt: new Date(1_764_400_030_999),
    deliveries: 1,
    claims: 1,
    ...over,
  };
}

/** `encodeDelimitedMessage` without its length, after checking that the length is the rest's. */
function encodeMessage(m: StoredMessage): Uint8Array {
  const bytes = encodeDelimitedMessage(m);
  let length = 0;
  let at = 0;
  for (let shift = 0; ; shift += 7) {
    const b = bytes[at++];
    length += (b & 0x7f) * 2 ** shift;
    if (b < 0x80) break;
  }
  expect(length).toBe(bytes.length - at);
  return bytes.subarray(at);
}

const nested = (depth: number): JsonValue => (depth === 0 ? "leaf" : { [`d${depth}`]: [nested(depth - 1), depth] });

describe("encodeDelimitedMessage", () => {
  it("writes the bytes the library writes, for any JSON payload", () => {
    fc.assert(
      fc.property(fc.jsonValue(), (json) => {
        const m = stored(JSON.stringify(json));
        expect(Buffer.from(encodeMessage(m))).toEqual(Buffer.from(libraryBytes(m)));
      }),
      { numRuns: 500 },
    );
  });

  it("writes the bytes the library writes for keys and strings the plain path gets wrong easily", () => {
    const payloads = [
      "null",
      "-0",
      "1e308",
      "1e400",
      '""',
      '"x"',
      "[]",
      "{}",
      '{"__proto__":{"a":1},"constructor":[true,false,null]}',
      '{"2":"two","1":"one","b":"é€😀","":""}',
      JSON.stringify({ data: "x".repeat(1010) }),
      JSON.stringify({ big: "y".repeat(70_000), list: Array.from({ length: 300 }, (_, i) => i / 7) }),
      JSON.stringify(nested(31)),
      // Deeper than the direct path goes: the library's path, same bytes.
      JSON.stringify(nested(40)),
    ];
    for (const payload of payloads) {
      const m = stored(payload);
      expect(Buffer.from(encodeMessage(m)), payload.slice(0, 40)).toEqual(Buffer.from(libraryBytes(m)));
    }
  });

  it("writes every field of the message: times on whole seconds, before 1970, a queue name and counts", () => {
    const cases: Partial<StoredMessage>[] = [
      { enqueuedAt: new Date(0), expiresAt: new Date(1000), leaseExpiresAt: new Date(999) },
      { enqueuedAt: new Date(-1500), deliveries: 0 },
      { deliveries: 2 ** 31 - 1, claims: 2 ** 31 - 1 },
      { queue: "q-é", id: "ffffffff-ffff-4fff-bfff-ffffffffffff" },
      { groupKey: "customer-é-42" },
      { groupKey: "g".repeat(128), enqueuedAt: new Date(-1500) },
    ];
    for (const over of cases) {
      const m = stored('{"n":1}', over);
      const bytes = encodeMessage(m);
      expect(Buffer.from(bytes)).toEqual(Buffer.from(libraryBytes(m)));
      const decoded = fromBinary(MessageSchema, bytes);
      expect(decoded.id).toBe(m.id);
      expect(decoded.queue).toBe(m.queue);
      // A group key is sent when the message has one, and absent (not "") when it has none.
      expect(decoded.groupKey).toBe(m.groupKey);
      expect(toJson(MessageSchema, decoded)).toMatchObject({ payload: { n: 1 } });
    }
  });
});
