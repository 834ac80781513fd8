/**
 * A delivered message in the protobuf binary encoding of `platform.queues.v1.Message`, written straight
 * from the row as the claim returns it (the payload's stored JSON text), for `StreamMessages` over the
 * binary codecs (gRPC, gRPC-Web and Connect with protobuf).
 *
 * Made the general way, each message became a `Message` object, its payload a tree of
 * `google.protobuf.Value` objects (two to four objects per JSON value), three `Timestamp` objects with
 * 64-bit integers, and then the library's encoder walked all of it: the largest part of what the service
 * spent per streamed message, and of its garbage. Here the payload's text is parsed (`JSON.parse`, native)
 * and its values are written as `Value` fields directly, in two passes over it (sizes, then bytes), into
 * one buffer per message. The bytes are exactly those of `toBinary(MessageSchema, message)` for the same
 * message (test/queues/message-binary.test.ts compares them); a payload nested deeper than `FAST_DEPTH`,
 * or a time before 1970, goes through the library instead, as before.
 */
import { create, toBinary } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { MessageSchema } from "../../gen/platform/queues/v1/queues_pb.js";
import { valueFromJsonText } from "./payload-value.ts";
import type { StoredMessage } from "./queue-store.ts";
import { encodeReceipt } from "./receipt.ts";

/** Values nested deeper than this take the library's path (as in `payload-value.ts`). */
const FAST_DEPTH = 32;

class TooDeep extends Error {}

const varintSize = (n: number) => (n < 0x80 ? 1 : n < 0x4000 ? 2 : n < 0x200000 ? 3 : n < 0x10000000 ? 4 : 5);
/** Varint size of a non-negative integer up to 2^53. */
const varint64Size = (n: number) => {
  let size = 1;
  while (n >= 0x80) {
    n = Math.floor(n / 128);
    size++;
  }
  return size;
};
/** A length-delimited field of `n` bytes: tag, length, content. */
const delimited = (n: number) => 1 + varintSize(n) + n;

/**
 * The sizes the first pass works out, in the order the second pass needs them: for a string, its UTF-8
 * length; for an object or array, the size of its `Struct` or `ListValue`. Reused by every call (each
 * message is sized and written within one synchronous call).
 */
let sizes: number[] = [];
let sizeCount = 0;
let sizeRead = 0;

/** The encoded size of `json` as a `Value` message (its fields, without a field holding it). */
function valueSize(json: unknown, depth: number): number {
  switch (typeof json) {
    case "string": {
      const n = Buffer.byteLength(json, "utf8");
      sizes[sizeCount++] = n;
      return delimited(n);
    }
    case "number":
      return 9;
    case "boolean":
      return 2;
    case "object": {
      if (json === null) return 2;
      if (depth >= FAST_DEPTH) throw new TooDeep();
      const slot = sizeCount++;
      let n = 0;
      if (Array.isArray(json)) {
        for (let i = 0; i < json.length; i++) n += delimited(valueSize(json[i], depth + 1));
      } else {
        const record = json as Record<string, unknown>;
        for (const key of Object.keys(record)) {
          const keyBytes = Buffer.byteLength(key, "utf8");
          sizes[sizeCount++] = keyBytes;
          n += delimited(delimited(keyBytes) + delimited(valueSize(record[key], depth + 1)));
        }
      }
      sizes[slot] = n;
      return delimited(n);
    }
    default:
      throw new TooDeep();
  }
}

function writeVarint(buf: Buffer, at: number, n: number): number {
  while (n >= 0x80) {
    buf[at++] = (n & 0x7f) | 0x80;
    n = Math.floor(n / 128);
  }
  buf[at++] = n;
  return at;
}

function writeString(buf: Buffer, at: number, tag: number, s: string, bytes: number): number {
  buf[at++] = tag;
  at = writeVarint(buf, at, bytes);
  return at + buf.write(s, at, bytes, "utf8");
}

/** Writes `json` as a `Value`'s fields; the sizes come from `valueSize`, in the same order. */
function writeValue(buf: Buffer, at: number, json: unknown): number {
  switch (typeof json) {
    case "string":
      // Value.string_value = 3
      return writeString(buf, at, 0x1a, json, sizes[sizeRead++]);
    case "number":
      // Value.number_value = 2 (double)
      buf[at++] = 0x11;
      return buf.writeDoubleLE(json, at);
    case "boolean":
      // Value.bool_value = 4
      buf[at++] = 0x20;
      buf[at++] = json ? 1 : 0;
      return at;
    default: {
      if (json === null) {
        // Value.null_value = 1 (enum NULL_VALUE = 0)
        buf[at++] = 0x08;
        buf[at++] = 0;
        return at;
      }
      const size = sizes[sizeRead++];
      if (Array.isArray(json)) {
        // Value.list_value = 6, ListValue.values = 1
        buf[at++] = 0x32;
        at = writeVarint(buf, at, size);
        for (const item of json) at = writeNested(buf, at, 0x0a, item);
        return at;
      }
      // Value.struct_value = 5, Struct.fields = 1 (map entries: key = 1, value = 2)
      buf[at++] = 0x2a;
      at = writeVarint(buf, at, size);
      const record = json as Record<string, unknown>;
      for (const key of Object.keys(record)) {
        const keyBytes = sizes[sizeRead++];
        const valueStart = sizeRead;
        const value = record[key];
        const valueBytes = nestedSize(value, valueStart);
        buf[at++] = 0x0a;
        at = writeVarint(buf, at, delimited(keyBytes) + delimited(valueBytes));
        at = writeString(buf, at, 0x0a, key, keyBytes);
        buf[at++] = 0x12;
        at = writeVarint(buf, at, valueBytes);
        at = writeValue(buf, at, value);
      }
      return at;
    }
  }
}

/** The `Value` size of `json` again, from the sizes already worked out (its first at `slot`). */
function nestedSize(json: unknown, slot: number): number {
  switch (typeof json) {
    case "string":
      return delimited(sizes[slot]);
    case "number":
      return 9;
    case "boolean":
      return 2;
    default:
      return json === null ? 2 : delimited(sizes[slot]);
  }
}

/** Writes `json` as a length-delimited `Value` field with `tag`. */
function writeNested(buf: Buffer, at: number, tag: number, json: unknown): number {
  buf[at++] = tag;
  at = writeVarint(buf, at, nestedSize(json, sizeRead));
  return writeValue(buf, at, json);
}

/** A Timestamp's fields of a time in ms since 1970 (as `timestampFromMs`): seconds = 1, nanos = 2. */
function timestampSize(ms: number): number {
  const seconds = Math.floor(ms / 1000);
  const nanos = (ms - seconds * 1000) * 1_000_000;
  return (seconds === 0 ? 0 : 1 + varint64Size(seconds)) + (nanos === 0 ? 0 : 1 + varintSize(nanos));
}

function writeTimestamp(buf: Buffer, at: number, tag: number, ms: number): number {
  const seconds = Math.floor(ms / 1000);
  const nanos = (ms - seconds * 1000) * 1_000_000;
  buf[at++] = tag;
  at = writeVarint(buf, at, timestampSize(ms));
  if (seconds !== 0) {
    buf[at++] = 0x08;
    at = writeVarint(buf, at, seconds);
  }
  if (nanos !== 0) {
    buf[at++] = 0x10;
    at = writeVarint(buf, at, nanos);
  }
  return at;
}

/** The delivery `m` as the fields of a `Message` (the general way, for every codec). */
export function toMessage(m: StoredMessage) {
  return {
    id: m.id,
    queue: m.queue,
    payload: valueFromJsonText(m.payload),
    receipt: encodeReceipt(m.id, m.claims),
    enqueuedAt: timestampFromMs(m.enqueuedAt.getTime()),
    expiresAt: timestampFromMs(m.expiresAt.getTime()),
    leaseExpiresAt: timestampFromMs(m.leaseExpiresAt.getTime()),
    deliveries: m.deliveries,
    ...(m.groupKey !== undefined && { groupKey: m.groupKey }),
  };
}

/** The message the general way: a `Message` object encoded by the library. */
function libraryEncoding(m: StoredMessage): Uint8Array {
  return toBinary(MessageSchema, create(MessageSchema, toMessage(m)));
}

const fastTime = (ms: number) => Number.isSafeInteger(ms) && ms >= 0;

/**
 * `toBinary(MessageSchema, message)` of the delivery `m` as `StreamMessages` sends it (its payload from
 * the stored JSON text, its receipt, times and deliveries), behind its length as a varint: the bytes of a
 * length-delimited field after its tag.
 */
export const encodeDelimitedMessage = (m: StoredMessage): Uint8Array => encode(m, true);

function prefixed(bytes: Uint8Array): Uint8Array {
  const out = Buffer.allocUnsafe(varintSize(bytes.length) + bytes.length);
  out.set(bytes, writeVarint(out, 0, bytes.length));
  return out;
}

function encode(m: StoredMessage, delimitedBytes: boolean): Uint8Array {
  const enqueuedMs = m.enqueuedAt.getTime();
  const expiresMs = m.expiresAt.getTime();
  const leaseMs = m.leaseExpiresAt.getTime();
  if (!fastTime(enqueuedMs) || !fastTime(expiresMs) || !fastTime(leaseMs) || !(m.deliveries >= 0))
    return delimitedBytes ? prefixed(libraryEncoding(m)) : libraryEncoding(m);
  const payload: unknown = JSON.parse(m.payload);
  sizeCount = 0;
  let payloadSize: number;
  try {
    payloadSize = valueSize(payload, 0);
  } catch (err) {
    if (err instanceof TooDeep) return delimitedBytes ? prefixed(libraryEncoding(m)) : libraryEncoding(m);
    throw err;
  }
  const receipt = encodeReceipt(m.id, m.claims);
  const idBytes = Buffer.byteLength(m.id, "utf8");
  const queueBytes = Buffer.byteLength(m.queue, "utf8");
  // group_key has explicit presence: written when the message has a group, even an empty one.
  const groupBytes = m.groupKey === undefined ? -1 : Buffer.byteLength(m.groupKey, "utf8");
  // The receipt is base64url: one byte a character.
  const size =
    (idBytes > 0 ? delimited(idBytes) : 0) +
    (queueBytes > 0 ? delimited(queueBytes) : 0) +
    delimited(payloadSize) +
    (receipt.length > 0 ? delimited(receipt.length) : 0) +
    delimited(timestampSize(enqueuedMs)) +
    delimited(timestampSize(expiresMs)) +
    delimited(timestampSize(leaseMs)) +
    (m.deliveries > 0 ? 1 + varintSize(m.deliveries) : 0) +
    (groupBytes >= 0 ? delimited(groupBytes) : 0);
  const buf = Buffer.allocUnsafe((delimitedBytes ? varintSize(size) : 0) + size);
  let at = delimitedBytes ? writeVarint(buf, 0, size) : 0;
  if (idBytes > 0) at = writeString(buf, at, 0x0a, m.id, idBytes);
  if (queueBytes > 0) at = writeString(buf, at, 0x12, m.queue, queueBytes);
  buf[at++] = 0x1a;
  at = writeVarint(buf, at, payloadSize);
  sizeRead = 0;
  at = writeValue(buf, at, payload);
  if (receipt.length > 0) at = writeString(buf, at, 0x22, receipt, receipt.length);
  at = writeTimestamp(buf, at, 0x2a, enqueuedMs);
  at = writeTimestamp(buf, at, 0x32, expiresMs);
  at = writeTimestamp(buf, at, 0x3a, leaseMs);
  if (m.deliveries > 0) {
    buf[at++] = 0x40;
    at = writeVarint(buf, at, m.deliveries);
  }
  // Message.group_key = 9
  if (m.groupKey !== undefined) at = writeString(buf, at, 0x4a, m.groupKey, groupBytes);
  if (sizes.length > 1 << 16) sizes = [];
  // The two passes agree, or the bytes would be garbage on the wire: never sent.
  if (at !== buf.length) throw new Error(`message encoding: wrote ${at} of ${buf.length} bytes`);
  return buf;
}
