/**
 * The one validation style at the edge: a zod schema per JSON body, query or
 * path, and one function that applies it. A mismatch is a 400 whose message
 * names the first bad field and the rule (`events[3].type: must be a string`),
 * with every issue in `details`.
 */
import { timestampMs, type Timestamp } from "@bufbuild/protobuf/wkt";
import { z } from "zod";
import { PlatformError } from "../errors.ts";

/** Where a value came from; `body` is left out of field names (`to`, not `body.to`). */
export type InputRoot = "body" | "query" | "path";

/** Parses `value` with `schema`, or throws `invalid_argument` naming the field and the rule. */
export function parseJson<T>(schema: z.ZodType<T>, value: unknown, root: InputRoot = "body"): T {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const details = result.error.issues.map((issue) => `${fieldPath(root, issue.path)}: ${issue.message}`);
  throw new PlatformError("invalid_argument", details[0] ?? `${root}: invalid`, { details });
}

/** `events[3].properties.plan`; a user-chosen key is cut to 64 characters. */
export function fieldPath(root: string, path: readonly PropertyKey[]): string {
  let out = root;
  for (const part of path) out += typeof part === "number" ? `[${part}]` : `.${String(part).slice(0, 64)}`;
  return out.startsWith("body.") ? out.slice(5) : out;
}

const JSON_OBJECT_RULE = "must be a JSON object";

/** A JSON object body with the given fields (unknown fields are ignored, as before). */
export function jsonObject<S extends z.ZodRawShape>(shape: S) {
  return z.object(shape, { error: JSON_OBJECT_RULE });
}

/** The same, where no body (or `null`) means `{}`. */
export function optionalJsonObject<S extends z.ZodRawShape>(shape: S) {
  return z.preprocess((v) => (v === undefined || v === null ? {} : v), z.object(shape, { error: JSON_OBJECT_RULE }));
}

/** True for a JSON object (not null, not an array). */
export function isJsonObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * A JSON object passed through as it came (not copied key by key, so a key
 * such as `__proto__` stays a key), `undefined`/`null` meaning `{}`.
 */
export function passthroughObject(rule = "must be an object") {
  return z
    .custom<Record<string, unknown>>((v) => v === undefined || v === null || isJsonObject(v), { error: rule })
    .meta({ type: ["object", "null"] })
    .transform((v) => v ?? {});
}

/** An integer when present; JSON `null` means absent. */
export function optionalInteger(rule = "must be an integer") {
  return (
    z
      .custom<number>((v) => typeof v === "number" && Number.isInteger(v), { error: rule })
      // A custom check has no JSON Schema of its own; this is what it admits (for the OpenAPI document).
      .meta({ type: "integer" })
      .nullish()
      .transform((v) => v ?? undefined)
  );
}

/** A string when present; JSON `null` means absent. */
export function optionalString(rule = "must be a string") {
  return z
    .string({ error: rule })
    .nullish()
    .transform((v) => v ?? undefined);
}

/** A protobuf Timestamp as SPEC.md's JSON time (epoch milliseconds), or null when unset. */
export function epochMs(t: Timestamp | undefined): number | null {
  return t ? timestampMs(t) : null;
}
