/**
 * Array parameters made cheaply, for the statements that take a batch (up to
 * 1,000 messages, receipts or ids). pg sends a JavaScript array as an array
 * literal: every element quoted and escaped (two `replace` calls, so a copy of
 * each 1 KiB payload), and PostgreSQL's `array_in` then parses the escapes
 * back. For a batch of messages that was a tenth of everything the service
 * allocated. These send one string, the elements joined by a separator that
 * none of them can contain, which `string_to_array` splits on the server.
 */
import { sql, type RawBuilder } from "kysely";

/** UUIDs (hex digits and dashes) as `uuid[]`. */
export function uuidArray(ids: readonly string[]): RawBuilder<string[]> {
  return sql<string[]>`string_to_array(${ids.join(",")}::text, ',')::uuid[]`;
}

/** Integers as `int[]`. */
export function intArray(values: readonly number[]): RawBuilder<number[]> {
  return sql<number[]>`string_to_array(${values.join(",")}::text, ',')::int[]`;
}

/**
 * JSON texts as `text[]`. Valid JSON never holds a raw control character (a
 * string escapes them), so U+001E, the record separator, parts them.
 */
export function jsonTextArray(texts: readonly string[]): RawBuilder<string[]> {
  return sql<string[]>`string_to_array(${texts.join("\x1e")}::text, chr(30))`;
}
