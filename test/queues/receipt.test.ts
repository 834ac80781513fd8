/**
 * Receipts (`receipt.ts`): base64url of a message's 16 id bytes and its 4-byte claim count, made in one
 * buffer shared by every call; each receipt is the bytes of its own id and claim, and decodes back to them.
 */
import crypto from "node:crypto";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { decodeReceipt, encodeReceipt } from "../../src/queues/receipt.ts";

/** The receipt's bytes spelled out independently: the id's hex digits, then the claim big-endian. */
function expected(id: string, claim: number): string {
  const bytes = Buffer.alloc(20);
  Buffer.from(id.replaceAll("-", ""), "hex").copy(bytes, 0, 0, 16);
  bytes.writeUInt32BE(claim, 16);
  return bytes.toString("base64url");
}

describe("receipts", () => {
  it("encode a known id and claim", () => {
    expect(encodeReceipt("00112233-4455-6677-8899-aabbccddeeff", 1)).toBe("ABEiM0RVZneImaq7zN3u_wAAAAE");
  });

  it("are each their own id and claim, whatever was encoded before, and decode back", () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.uuid(), fc.integer({ min: 1, max: 0x7fffffff })), { minLength: 1 }), (rs) => {
        const receipts = rs.map(([id, claim]) => encodeReceipt(id, claim));
        rs.forEach(([id, claim], i) => {
          expect(receipts[i]).toBe(expected(id, claim));
          expect(decodeReceipt(receipts[i])).toEqual({ id, claim });
        });
      }),
    );
  });

  it("of a shorter id leave the missing bytes zero, not those of the receipt before", () => {
    const id = crypto.randomUUID();
    encodeReceipt("ffffffff-ffff-ffff-ffff-ffffffffffff", 9);
    expect(encodeReceipt(id.slice(0, 8), 2)).toBe(expected(id.slice(0, 8), 2));
  });
});
