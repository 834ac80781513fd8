/**
 * Receipts: what a consumer needs to ack one delivery of one message. A
 * receipt names the message and the lease (the message's `claims` count the
 * claim set), so nothing beyond the message row is stored: a redelivery
 * counts up, and every earlier receipt of that message stops matching. The
 * count never starts again (a replay from the dead letters resets
 * `deliveries`, not `claims`), so no earlier receipt ever matches again.
 * Opaque to callers: base64url of the 16 id bytes and a 4-byte count.
 */
import { invalidArgument } from "../core/errors.ts";

export interface Receipt {
  id: string;
  /** The message's `claims` when this lease was taken. */
  claim: number;
}

/**
 * One buffer for every receipt made: a stream hands out a receipt per message, and a buffer each (with the
 * id's bytes in a second one, copied over) was a measurable part of what a streamed message cost. Filled
 * and read within one synchronous call, so no two receipts ever share it.
 */
const scratch = Buffer.alloc(20);

export function encodeReceipt(id: string, claim: number): string {
  scratch.fill(0, 0, 16);
  scratch.write(id.replace(/-/g, ""), 0, 16, "hex");
  scratch.writeUInt32BE(claim, 16);
  return scratch.toString("base64url");
}

export function decodeReceipt(receipt: string): Receipt {
  if (receipt.length === 0) throw invalidArgument("receipt", "is required");
  if (!/^[A-Za-z0-9_-]{27}$/.test(receipt)) throw invalidArgument("receipt", "is not a receipt");
  const bytes = Buffer.from(receipt, "base64url");
  if (bytes.length !== 20) throw invalidArgument("receipt", "is not a receipt");
  const hex = bytes.subarray(0, 16).toString("hex");
  const id = `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
  const claim = bytes.readUInt32BE(16);
  if (claim < 1 || claim > 0x7fffffff) throw invalidArgument("receipt", "is not a receipt");
  return { id, claim };
}
