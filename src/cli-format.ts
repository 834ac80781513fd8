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
      // An event type's properties: `string`, not `PROPERTY_KIND_STRING`.
      if (field.mapKind === "enum") return Object.fromEntries(entries.map(([k, v]) => [k, enumName(field.enum, v)]));
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

type JsonObject = { [key: string]: JsonValue };

const isObject = (v: JsonValue | undefined): v is JsonObject =>
  v !== null && typeof v === "object" && !Array.isArray(v);
const isScalar = (v: JsonValue | undefined) => v === null || (typeof v !== "object" && v !== undefined);

/** The widest a table cell gets; longer text ends in "…" (--output json shows it whole). */
const CELL_MAX = 60;
/** Objects with at most this many plain values are shown in one cell as `key=value, ...`. */
const INLINE_FIELDS = 6;

/** `mailFrom` as a column heading: `MAIL FROM`. */
const heading = (key: string) => key.replace(/([a-z0-9])([A-Z])/g, "$1 $2").toUpperCase();

/**
 * Text safe on a terminal: control characters (a line break in a subject, an
 * escape sequence in a payload) are shown escaped, never sent to the terminal.
 */
function cellText(v: JsonValue | undefined): string {
  let text: string;
  if (v === undefined || v === null || v === "") text = "-";
  else if (Array.isArray(v)) text = v.every(isScalar) ? v.map((x) => cellText(x)).join(", ") || "-" : JSON.stringify(v);
  else if (isObject(v)) {
    const entries = Object.entries(v);
    text =
      entries.length === 0
        ? "-"
        : entries.every(([, x]) => isScalar(x))
          ? entries.map(([k, x]) => `${k}=${cellText(x)}`).join(", ")
          : JSON.stringify(v);
  } else text = String(v);
  // eslint-disable-next-line no-control-regex -- control characters are what it escapes
  text = text.replace(/[\u0000-\u001f\u007f-\u009f]/g, (c) => JSON.stringify(c).slice(1, -1));
  return text.length > CELL_MAX ? text.slice(0, CELL_MAX - 1) + "…" : text;
}

/** Rows under headings, columns padded to their widest cell (as `kubectl get` prints them). */
function columns(rows: string[][]): string {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  return rows.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]))).join("   ")).join("\n");
}

/** A value a table cell shows: plain, a list of plain values, or a small object of plain values. */
const fitsCell = (v: JsonValue | undefined) =>
  isScalar(v) ||
  (Array.isArray(v) && v.every(isScalar)) ||
  (isObject(v) && Object.keys(v).length <= INLINE_FIELDS && Object.values(v).every(isScalar));

/** A list of messages as a table: a column per field that fits a cell; the other fields named below. */
function listTable(items: JsonValue[]): string {
  if (items.length === 0) return "(none)";
  if (!items.every(isObject)) return items.map((v) => cellText(v)).join("\n");
  const all = [...new Set(items.flatMap((item) => Object.keys(item)))];
  const left = all.filter((k) => items.some((item) => !fitsCell(item[k])));
  const keys = all.filter((k) => !left.includes(k));
  const table = columns([keys.map(heading), ...items.map((item) => keys.map((k) => cellText(item[k])))]);
  return left.length ? `${table}\n(${left.join(", ")}: see --output json)` : table;
}

/** A single message as `FIELD  value` lines (nested fields by their path), its lists as tables below. */
function fieldLines(json: JsonObject): string {
  const lines: string[][] = [];
  const lists: string[] = [];
  const walk = (obj: JsonObject, prefix: string) => {
    for (const [k, v] of Object.entries(obj)) {
      const name = prefix + k;
      if (Array.isArray(v) && !v.every(isScalar)) lists.push(`${heading(name)}\n${listTable(v)}`);
      else if (isObject(v) && Object.keys(v).length > 0) walk(v, `${name}.`);
      else lines.push([heading(name), cellText(v)]);
    }
  };
  walk(json, "");
  return [lines.length ? columns(lines) : "", ...lists].filter((x) => x !== "").join("\n\n");
}

/**
 * What `--output table` prints (the default on a terminal): a response that
 * holds a list (apps, tokens, mail, audit entries...) as a table with a column
 * per field, its other fields (a next page's token, a total) as lines below;
 * anything else as one `FIELD  value` line per field.
 */
export function humanTable(json: JsonValue): string {
  if (!isObject(json)) return cellText(json);
  // The response's list: the first one holding messages (apps beside an empty usageToday), else the first one.
  const lists = Object.entries(json).filter(([, v]) => Array.isArray(v) && (v.length === 0 || !v.every(isScalar)));
  const main = lists.find(([, v]) => (v as JsonValue[]).length > 0) ?? lists[0];
  if (!main) return fieldLines(json);
  const [name, items] = main;
  const rest = Object.fromEntries(Object.entries(json).filter(([k]) => k !== name));
  const restLines = Object.keys(rest).length ? fieldLines(rest) : "";
  return [listTable(items as JsonValue[]), restLines].filter((x) => x !== "").join("\n\n");
}
