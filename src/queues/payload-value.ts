/**
 * Payloads between their JSON text (as stored) and `google.protobuf.Value`
 * (as the API carries them), on the hot paths of puts and deliveries.
 *
 * The library's reflective `fromJson` / `toJson` (which these replace for the
 * common case) cost more per message than the rest of a batched put or
 * delivery; these build and read the same plain message objects directly.
 * A value nested deeper than `FAST_DEPTH` goes through the library, so its
 * limits (the recursion limit of `fromJson`) and errors stay exactly its own.
 */
import { fromJson, toJson, type JsonValue } from "@bufbuild/protobuf";
import { scalarValue } from "../core/proto-value.ts";
import { ValueSchema, type ListValue, type Struct, type Value } from "@bufbuild/protobuf/wkt";

/** Values nested deeper than this take the library's path (well below its recursion limit of 100). */
const FAST_DEPTH = 32;

class TooDeep extends Error {}

function fastValue(json: JsonValue, depth: number): Value {
  const scalar = scalarValue(json);
  if (scalar !== undefined) return scalar;
  // Not a JSON value (undefined, a function), or nested too deep: the library's way, and its error.
  if (typeof json !== "object" || json === null || depth >= FAST_DEPTH) throw new TooDeep();
  if (Array.isArray(json)) {
    const values = new Array<Value>(json.length);
    for (let i = 0; i < json.length; i++) values[i] = fastValue(json[i], depth + 1);
    const list: ListValue = { $typeName: "google.protobuf.ListValue", values };
    return { $typeName: "google.protobuf.Value", kind: { case: "listValue", value: list } };
  }
  const fields: Struct["fields"] = {};
  for (const key of Object.keys(json)) setOwn(fields, key, fastValue(json[key], depth + 1));
  const struct: Struct = { $typeName: "google.protobuf.Struct", fields };
  return { $typeName: "google.protobuf.Value", kind: { case: "structValue", value: struct } };
}

/** `fast(input, 0)`, or the library's `slow(input)` where the fast path gives up (TooDeep). */
function fastOr<I, O>(fast: (input: I, depth: number) => O, slow: (input: I) => O, input: I): O {
  try {
    return fast(input, 0);
  } catch (err) {
    if (err instanceof TooDeep) return slow(input);
    throw err;
  }
}

const libraryValue = (json: JsonValue) => fromJson(ValueSchema, json);
const libraryJson = (value: Value) => toJson(ValueSchema, value);

/** `fromJson(ValueSchema, json)`, the same message and the same errors. */
export function valueFromJson(json: JsonValue): Value {
  return fastOr(fastValue, libraryValue, json);
}

function fastJson(value: Value, depth: number): JsonValue {
  const kind = value.kind;
  switch (kind.case) {
    case "stringValue":
    case "boolValue":
      return kind.value;
    case "numberValue":
      if (!Number.isFinite(kind.value)) throw new TooDeep();
      return kind.value;
    case "nullValue":
      return null;
    case "listValue": {
      if (depth >= FAST_DEPTH) throw new TooDeep();
      const values = kind.value.values;
      const out = new Array<JsonValue>(values.length);
      for (let i = 0; i < values.length; i++) out[i] = fastJson(values[i], depth + 1);
      return out;
    }
    case "structValue": {
      if (depth >= FAST_DEPTH) throw new TooDeep();
      const fields = kind.value.fields;
      const out: { [k: string]: JsonValue } = {};
      for (const key of Object.keys(fields)) setOwn(out, key, fastJson(fields[key], depth + 1));
      return out;
    }
    default:
      // No kind set: the library's error.
      throw new TooDeep();
  }
}

/** `toJson(ValueSchema, value)`, the same JSON and the same errors. */
export function valueToJson(value: Value): JsonValue {
  return fastOr(fastJson, libraryJson, value);
}

/** A payload's stored JSON text as a `Value`. */
export function valueFromJsonText(text: string): Value {
  return valueFromJson(JSON.parse(text) as JsonValue);
}

/** A payload `Value` as the JSON text stored (`JSON.stringify(toJson(ValueSchema, value))`). */
export function valueToJsonText(value: Value): string {
  return JSON.stringify(valueToJson(value));
}

const varintSize = (n: number) => (n < 0x80 ? 1 : n < 0x4000 ? 2 : n < 0x200000 ? 3 : n < 0x10000000 ? 4 : 5);

/** The bytes a length-delimited field of `n` bytes takes (tag, length, content). */
const delimited = (n: number) => 1 + varintSize(n) + n;

/** The protobuf binary size of a `Value` (the message itself, without the field that holds it). */
export function valueBinarySize(value: Value): number {
  const kind = value.kind;
  switch (kind.case) {
    case "nullValue":
      return 2;
    case "boolValue":
      return 2;
    case "numberValue":
      return 9;
    case "stringValue":
      return delimited(Buffer.byteLength(kind.value, "utf8"));
    case "listValue": {
      let n = 0;
      for (const v of kind.value.values) n += delimited(valueBinarySize(v));
      return delimited(n);
    }
    case "structValue": {
      let n = 0;
      const fields = kind.value.fields;
      for (const key of Object.keys(fields))
        n += delimited(delimited(Buffer.byteLength(key, "utf8")) + delimited(valueBinarySize(fields[key])));
      return delimited(n);
    }
    default:
      return 0;
  }
}

/** Sets an own property, even one named `__proto__` (as the library's `setOwn` does). */
function setOwn<T>(target: Record<string, T>, key: string, value: T): void {
  if (key === "__proto__")
    Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
  else target[key] = value;
}
