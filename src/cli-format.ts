/**
 * What the CLI prints: a message's proto3 JSON, as a person reads it. The
 * canonical JSON writes 64-bit integers as strings ("version": "3"), which is
 * right for machines that may exceed 2^53 and odd for a person reading a
 * count; here they are numbers. Enum values are their short names in lower
 * case (`string`, not `PROPERTY_KIND_STRING`), and a message's JSON payload
 * (a peeked message, a dead letter) is shown as JSON, not as an escaped
 * string. The message's internal `$typeName` never shows, and fields at their
 * default value are printed rather than omitted. (`--json` prints the
 * canonical form for scripts.)
 */
import {
  ScalarType,
  toJson,
  type DescEnum,
  type DescField,
  type DescMessage,
  type JsonValue,
  type MessageShape,
} from "@bufbuild/protobuf";

const INT64_TYPES = new Set([
  ScalarType.INT64,
  ScalarType.UINT64,
  ScalarType.SINT64,
  ScalarType.FIXED64,
  ScalarType.SFIXED64,
]);

export function readableJson<D extends DescMessage>(schema: D, message: MessageShape<D>): JsonValue {
  return readable(schema, toJson(schema, message, { alwaysEmitImplicit: true }));
}

function readable(schema: DescMessage, json: JsonValue): JsonValue {
  // Well-known types (Timestamp, Value, ...) already have a readable JSON form.
  if (
    schema.typeName.startsWith("google.protobuf.") ||
    json === null ||
    typeof json !== "object" ||
    Array.isArray(json)
  )
    return json;
  const out: { [key: string]: JsonValue } = { ...json };
  for (const field of schema.fields) {
    const value = out[field.jsonName];
    if (value !== undefined) out[field.jsonName] = readableField(field, value);
  }
  // A JSON payload kept as text, shown as the JSON it is (unless it was cut).
  if (typeof out.payload === "string" && schema.field.truncated && out.truncated !== true) {
    try {
      out.payload = JSON.parse(out.payload) as JsonValue;
    } catch {
      // Not JSON after all: shown as the text it is.
    }
  }
  return out;
}

function readableField(field: DescField, value: JsonValue): JsonValue {
  switch (field.fieldKind) {
    case "scalar":
      return INT64_TYPES.has(field.scalar) ? toNumber(value) : value;
    case "enum":
      return enumName(field.enum, value);
    case "message":
      return readable(field.message, value);
    case "list":
      if (!Array.isArray(value)) return value;
      if (field.listKind === "message") return value.map((v) => readable(field.message, v));
      if (field.listKind === "scalar" && INT64_TYPES.has(field.scalar)) return value.map(toNumber);
      if (field.listKind === "enum") return value.map((v) => enumName(field.enum, v));
      return value;
    case "map": {
      if (value === null || typeof value !== "object" || Array.isArray(value)) return value;
      const entries = Object.entries(value);
      if (field.mapKind === "message")
        return Object.fromEntries(entries.map(([k, v]) => [k, readable(field.message, v)]));
      if (field.mapKind === "scalar" && INT64_TYPES.has(field.scalar))
        return Object.fromEntries(entries.map(([k, v]) => [k, toNumber(v)]));
      return value;
    }
    default:
      return value;
  }
}

/** An enum value's name without the enum's prefix, in lower case: `APP_STATUS_RUNNING` is `running`. */
function enumName(desc: DescEnum, value: JsonValue): JsonValue {
  if (typeof value !== "string") return value;
  const found = desc.values.find((v) => v.name === value);
  return found ? found.localName.toLowerCase() : value;
}

/** A 64-bit integer string as a number while it is exact; beyond 2^53 the string stays. */
function toNumber(value: JsonValue): JsonValue {
  if (typeof value !== "string") return value;
  const n = Number(value);
  return Number.isSafeInteger(n) ? n : value;
}
