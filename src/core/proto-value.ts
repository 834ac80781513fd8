/**
 * JSON scalars as `google.protobuf.Value`, built as plain message objects: the library's reflective
 * `fromJson` costs more per value than the rest of a batched put or an event's property on the hot paths
 * that carry them (queue payloads, analytics properties and conditions).
 */
import { NullValue, type Value } from "@bufbuild/protobuf/wkt";

/** A string, number, boolean or null as a Value; `undefined` for anything else (an array, an object, no JSON). */
export function scalarValue(json: unknown): Value | undefined {
  switch (typeof json) {
    case "string":
      return { $typeName: "google.protobuf.Value", kind: { case: "stringValue", value: json } };
    case "number":
      return { $typeName: "google.protobuf.Value", kind: { case: "numberValue", value: json } };
    case "boolean":
      return { $typeName: "google.protobuf.Value", kind: { case: "boolValue", value: json } };
    default:
      return json === null
        ? { $typeName: "google.protobuf.Value", kind: { case: "nullValue", value: NullValue.NULL_VALUE } }
        : undefined;
  }
}
