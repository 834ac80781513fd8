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

/** The fast paths of schemas (`withFastPath`). */
const FAST_PATHS = new WeakMap<z.ZodType, (value: unknown) => unknown>();

/**
 * Gives `schema` a fast path for `parseJson`: `fast` answers what the schema would answer for a value it
 * plainly admits, or undefined for anything else, which the schema then parses itself (so every refusal and
 * its message are the schema's). For the hot bodies only (a batch of a thousand events), where the schema's
 * walk cost more per event than storing it; a test ties each fast path to its schema.
 */
export function withFastPath<S extends z.ZodType>(schema: S, fast: (value: unknown) => z.output<S> | undefined): S {
  FAST_PATHS.set(schema, fast);
  return schema;
}

/** Parses `value` with `schema`, or throws `invalid_argument` naming the field and the rule. */
export function parseJson<T>(schema: z.ZodType<T>, value: unknown, root: InputRoot = "body"): T {
  const fast = FAST_PATHS.get(schema)?.(value);
  if (fast !== undefined) return fast as T;
  const result = schema.safeParse(value, { error: (issue) => unknownFieldsMessage(issue, root) });
  if (result.success) return result.data;
  // An unknown field's message names it already (`unknown field "delay"`), so it takes no prefix.
  const details = result.error.issues.map((issue) =>
    issue.code === "unrecognized_keys" ? issue.message : `${fieldPath(root, issue.path)}: ${issue.message}`,
  );
  throw new PlatformError("invalid_argument", details[0] ?? `${root}: invalid`, { details });
}

/** `events[3].properties.plan`; a user-chosen key is cut to 64 characters. */
function fieldPath(root: string, path: readonly PropertyKey[]): string {
  let out = root;
  for (const part of path) out += typeof part === "number" ? `[${part}]` : `.${String(part).slice(0, 64)}`;
  return out.startsWith("body.") ? out.slice(5) : out;
}

const JSON_OBJECT_RULE = "must be a JSON object";

/**
 * An object of fixed fields: any other field is refused (`unknown field "delay"`), since a
 * field the service does not read would otherwise be dropped and the answer be silently
 * wrong (a `delay` that does not delay). Free-form maps (payloads, properties) are not this.
 * `rule` is the message when the value is not an object at all.
 */
export function fixedObject<S extends z.ZodRawShape>(shape: S, rule = JSON_OBJECT_RULE) {
  // `undefined` for an unknown field leaves its message to `parseJson`, which knows the root.
  return z.strictObject(shape, { error: (issue) => (issue.code === "unrecognized_keys" ? undefined : rule) });
}

/** A JSON object body with the given fields, and no others. */
export function jsonObject<S extends z.ZodRawShape>(shape: S) {
  return fixedObject(shape);
}

/** The same, where no body (or `null`) means `{}`. */
export function optionalJsonObject<S extends z.ZodRawShape>(shape: S) {
  return z.preprocess((v) => (v === undefined || v === null ? {} : v), fixedObject(shape));
}

/** The body of an operation that takes none: absent, `null` or `{}`, nothing else. */
export const NoBody = optionalJsonObject({});

/**
 * Names other services use for something this API spells differently, or does not do.
 * Each answers, given the fields the object does define, what to say (or nothing, when
 * the word means nothing here: `delay` is a hint on a put, not on a consume).
 */
type Hint = (fields: ReadonlySet<string>) => string | undefined;

const use =
  (field: string, unit = ""): Hint =>
  (fields) =>
    fields.has(field) ? `use "${field}"${unit}` : undefined;
const unsupported =
  (what: string, when?: string): Hint =>
  (fields) =>
    when === undefined || fields.has(when) ? `not supported: ${what}` : undefined;
const either =
  (...hints: Hint[]): Hint =>
  (fields) => {
    for (const hint of hints) {
      const said = hint(fields);
      if (said !== undefined) return said;
    }
    return undefined;
  };

const NO_STREAMING = "generate answers with the whole text; there is no streaming";
const GENERATE_ONLY = (what: string) =>
  unsupported(`${what} (generate takes model, prompt or messages, maxTokens, temperature)`, "prompt");

const HINTS: Record<string, Hint> = {
  // Queues (BullMQ, SQS, pg-boss words).
  delay: use("delaySeconds", ", in seconds"),
  delayMs: use("delaySeconds", ", in seconds"),
  startAfter: use("delaySeconds", ", in seconds"),
  visibilityTimeout: either(use("leaseSeconds"), use("delaySeconds", " to make a message visible again later")),
  VisibilityTimeout: either(use("leaseSeconds"), use("delaySeconds", " to make a message visible again later")),
  WaitTimeSeconds: use("waitSeconds"),
  waitTimeSeconds: use("waitSeconds"),
  timeout: either(use("waitSeconds"), use("leaseSeconds")),
  MaxNumberOfMessages: use("max"),
  maxMessages: use("max"),
  batchSize: use("max"),
  ttl: use("ttlSeconds", ", in seconds"),
  expireInSeconds: use("ttlSeconds"),
  retentionSeconds: use("ttlSeconds"),
  jobId: use("dedupKey"),
  singletonKey: use("dedupKey"),
  MessageDeduplicationId: use("dedupKey"),
  deduplicationId: use("dedupKey"),
  attempts: unsupported("set maxDeliveries in the queue's policy (PUT /v1/queues/{queue}/policy)", "payload"),
  retryLimit: unsupported("set maxDeliveries in the queue's policy (PUT /v1/queues/{queue}/policy)", "payload"),
  stream: either(
    unsupported(
      "a REST consume answers once; to stream messages use the StreamMessages RPC (Connect/gRPC)",
      "waitSeconds",
    ),
    unsupported(NO_STREAMING, "prompt"),
  ),
  // Inference (OpenAI-style words).
  response_format: GENERATE_ONLY("no response formats"),
  responseFormat: GENERATE_ONLY("no response formats"),
  tools: GENERATE_ONLY("no tools"),
  tool_choice: GENERATE_ONLY("no tools"),
  functions: GENERATE_ONLY("no tools"),
  top_p: GENERATE_ONLY("no top_p"),
  topP: GENERATE_ONLY("no top_p"),
  stop: GENERATE_ONLY("no stop sequences"),
  n: GENERATE_ONLY("one answer per request"),
  system: unsupported('give messages with a "system" message first', "prompt"),
  // Analytics (Mixpanel, PostHog, Segment words).
  filter: use("where", ", a list of conditions { property, op, value }"),
  filters: use("where", ", a list of conditions { property, op, value }"),
  properties: use("where", ", a list of conditions { property, op, value }"),
  aggregation: use("aggregate"),
  math: use("aggregate"),
  breakdown: use("groupBy"),
  breakdowns: use("groupBy", ", a property or a list of two"),
  from: either(use("since"), unsupported("mail is sent from the app's own address", "subject")),
  to: use("until"),
  start: use("since"),
  end: use("until"),
  // An event's user is its `distinctId`; elsewhere (a mail, a put) no such field exists.
  distinct_id: use("distinctId"),
  userId: use("distinctId"),
  user_id: use("distinctId"),
  $user_id: use("distinctId"),
  event: use("type"),
  timestamp: use("at"),
  time: use("at"),
  // Mail.
  html: unsupported("mail is plain text (text)", "subject"),
  body: use("text"),
  cc: unsupported("one recipient per mail (to)", "subject"),
  bcc: unsupported("one recipient per mail (to)", "subject"),
  replyTo: unsupported("mail is sent from the app's own address", "subject"),
  attachments: unsupported("mail is plain text (text)", "subject"),
};

/** `maxtokens` for `max_tokens`, `maxTokens`, `MaxTokens`: to find a field spelled another way. */
const folded = (name: string) => name.replace(/[_-]/g, "").toLowerCase();

/** What to say of an unknown `name` in an object of `fields`: a hint, or `""`. */
function unknownFieldHint(name: string, fields: ReadonlySet<string>): string {
  const said = Object.hasOwn(HINTS, name) ? HINTS[name](fields) : undefined;
  if (said !== undefined) return `: ${said}`;
  const match = [...fields].find((field) => folded(field) === folded(name));
  return match === undefined ? "" : `: use "${match}"`;
}

/** The message of an unknown-fields issue: each named with its path, and a hint where one helps. */
function unknownFieldsMessage(issue: z.core.$ZodRawIssue, root: InputRoot): string | undefined {
  if (issue.code !== "unrecognized_keys") return undefined;
  const shape = (issue.inst as { _zod?: { def?: { shape?: object } } } | undefined)?._zod?.def?.shape ?? {};
  const fields = new Set(Object.keys(shape));
  return issue.keys
    .map((key) => `unknown field "${fieldPath(root, [...(issue.path ?? []), key])}"${unknownFieldHint(key, fields)}`)
    .join("; ");
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

/** A protobuf Timestamp as the REST API's JSON time (epoch milliseconds), or null when unset. */
export function epochMs(t: Timestamp | undefined): number | null {
  return t ? timestampMs(t) : null;
}
