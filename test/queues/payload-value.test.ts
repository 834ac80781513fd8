import { create, fromJson, toBinary, toJson, type JsonValue } from "@bufbuild/protobuf";
import { ValueSchema, type Value } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import {
  valueBinarySize,
  valueFromJson,
  valueFromJsonText,
  valueToJson,
  valueToJsonText,
} from "../../src/queues/payload-value.ts";

/** A deterministic pseudo-random JSON value (strings with escapes, non-ASCII and lone surrogates). */
function randomJson(seed: number, depth = 0): JsonValue {
  let s = seed;
  const next = () => (s = (s * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
  const pick = (d: number): JsonValue => {
    const r = next();
    if (d > 4 || r < 0.3) {
      const k = Math.floor(next() * 6);
      if (k === 0) return null;
      if (k === 1) return next() < 0.5;
      if (k === 2) return (next() - 0.5) * 10 ** Math.floor(next() * 20);
      if (k === 3) return -0;
      return ["", "x".repeat(Math.floor(next() * 300)), 'q"\\\n\u0001é€😀', "\ud800", "__proto__"][
        Math.floor(next() * 5)
      ];
    }
    if (r < 0.6) return Array.from({ length: Math.floor(next() * 5) }, () => pick(d + 1));
    const o: Record<string, JsonValue> = {};
    for (let i = Math.floor(next() * 5); i > 0; i--) o[["a", "é", "", "constructor", `k${i}`][i % 5]] = pick(d + 1);
    return o;
  };
  return pick(depth);
}

function nested(depth: number): JsonValue {
  let v: JsonValue = 1;
  for (let i = 0; i < depth; i++) v = i % 2 ? [v] : { a: v };
  return v;
}

describe("payload-value", () => {
  it("valueFromJson makes the message fromJson makes, and valueToJson reads it back as toJson does", () => {
    for (let seed = 1; seed < 400; seed++) {
      const json = randomJson(seed);
      const fast = valueFromJson(json);
      const library = fromJson(ValueSchema, json);
      expect(toBinary(ValueSchema, fast)).toEqual(toBinary(ValueSchema, library));
      expect(valueToJson(library)).toEqual(toJson(ValueSchema, library));
      expect(valueToJsonText(library)).toBe(JSON.stringify(toJson(ValueSchema, library)));
      expect(valueFromJsonText(JSON.stringify(json))).toEqual(fromJson(ValueSchema, JSON.parse(JSON.stringify(json))));
    }
  });

  it("keeps a key named __proto__ as an own field, both ways", () => {
    const json = JSON.parse('{"__proto__": {"x": 1}, "b": [true]}') as JsonValue;
    const value = valueFromJson(json);
    expect(toBinary(ValueSchema, value)).toEqual(toBinary(ValueSchema, fromJson(ValueSchema, json)));
    expect(valueToJsonText(value)).toBe('{"__proto__":{"x":1},"b":[true]}');
  });

  it("valueBinarySize is the encoded size", () => {
    for (let seed = 1; seed < 400; seed++) {
      const value = valueFromJson(randomJson(seed));
      expect(valueBinarySize(value)).toBe(toBinary(ValueSchema, value).byteLength);
    }
    const long = valueFromJson({ s: "é".repeat(100_000), n: [1, 2.5, null, false] });
    expect(valueBinarySize(long)).toBe(toBinary(ValueSchema, long).byteLength);
  });

  it("deep values take the library's path: its result, and its recursion limit", () => {
    const deep = nested(60);
    expect(toBinary(ValueSchema, valueFromJson(deep))).toEqual(toBinary(ValueSchema, fromJson(ValueSchema, deep)));
    expect(valueToJson(fromJson(ValueSchema, deep))).toEqual(deep);
    expect(() => valueFromJson(nested(150))).toThrow(/recursion depth/);
    expect(() => fromJson(ValueSchema, nested(150))).toThrow(/recursion depth/);
  });

  it("throws as toJson does on a Value JSON cannot hold", () => {
    const nan = create(ValueSchema, { kind: { case: "numberValue", value: NaN } });
    const empty: Value = create(ValueSchema);
    const inList = valueFromJson([1, { a: 2 }]);
    if (inList.kind.case === "listValue") inList.kind.value.values.push(nan);
    for (const bad of [nan, empty, inList]) {
      expect(() => toJson(ValueSchema, bad)).toThrow();
      expect(() => valueToJson(bad)).toThrow();
    }
  });
});
