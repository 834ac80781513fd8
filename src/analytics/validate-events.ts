/**
 * The rules an event must pass before any store sees it (docs/api.md#analytics,
 * docs/analytics.md), written once for REST and gRPC. A batch
 * is refused whole, and the message names the first bad event by its index,
 * e.g. `events[3].properties.plan: must be a string (declared string)`.
 */
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import type { Value } from "@bufbuild/protobuf/wkt";
import { NAME_PATTERN, NAME_RULE } from "../core/apps/apps.ts";
import { PlatformError, invalidArgument } from "../core/errors.ts";
import { characterCount, isWellFormedText } from "../core/text.ts";
import { DAY_MS, timestampToMs } from "../core/time.ts";
import type { EventTypeRecord, PropertyKindName } from "./event-type-store.ts";
import type { StoredEvent } from "./event-store.ts";

/** Events per log call (docs/api.md#analytics). */
export const MAX_EVENTS_PER_CALL = 1000;
/** How far ahead of now an event may be dated. */
const MAX_FUTURE_MS = DAY_MS;
/** Properties a type may declare: each one is a rollup row per event. */
export const MAX_PROPERTIES = 64;
/** Longest string value, in UTF-8 bytes (values are index keys of the rollups). */
const MAX_VALUE_BYTES = 1024;
/** Longest `distinctId`, in characters (code points): ids of other systems (emails, UUIDs, URNs) fit. */
const MAX_DISTINCT_ID_CHARS = 200;

/** Why a `distinctId` is refused, or undefined when it is a good one. */
export function distinctIdRule(id: string): string | undefined {
  // A string has at most as many characters as UTF-16 units, so only a longer one is counted.
  if (
    id.length === 0 ||
    (id.length > MAX_DISTINCT_ID_CHARS &&
      (id.length > 2 * MAX_DISTINCT_ID_CHARS || characterCount(id) > MAX_DISTINCT_ID_CHARS))
  )
    return `must be 1 to ${MAX_DISTINCT_ID_CHARS} characters`;
  if (!isWellFormedText(id) || id.includes("\u0000")) return "must be valid Unicode without NUL characters";
  return undefined;
}

/** The shape of an event as both protocols deliver it. */
export interface EventInput {
  type: string;
  at?: Timestamp | undefined;
  properties: Record<string, Value>;
  distinctId?: string | undefined;
}

function checkBatchSize(count: number): void {
  if (count < 1 || count > MAX_EVENTS_PER_CALL) {
    throw invalidArgument("events", `must have 1 to ${MAX_EVENTS_PER_CALL} items (got ${count})`);
  }
}

/** A name for use in a message: user input, so cut short and quoted. */
export function quoted(name: string): string {
  return JSON.stringify(name.length > 64 ? `${name.slice(0, 64)}…` : name);
}

/** A property value as stored, or the rule it breaks. */
function storedValue(value: Value | undefined, kind: PropertyKindName): string | { rule: string } {
  const v = value?.kind;
  switch (kind) {
    case "string":
      if (v?.case !== "stringValue") return { rule: "must be a string (declared string)" };
      if (!isWellFormedText(v.value) || v.value.includes("\u0000"))
        return { rule: "must be valid Unicode without NUL characters" };
      if (v.value.length > MAX_VALUE_BYTES / 3 && Buffer.byteLength(v.value, "utf8") > MAX_VALUE_BYTES) {
        return { rule: `must be at most ${MAX_VALUE_BYTES} bytes of UTF-8` };
      }
      return v.value;
    case "number":
      if (v?.case !== "numberValue") return { rule: "must be a number (declared number)" };
      if (!Number.isFinite(v.value)) return { rule: "must be a finite number" };
      return String(v.value);
    case "boolean":
      if (v?.case !== "boolValue") return { rule: "must be a boolean (declared boolean)" };
      return v.value ? "true" : "false";
  }
}

/**
 * Validates a batch against the app's types; returns the events as stored or
 * throws one 400 naming the first bad event (and up to 20 issues in details).
 */
export function validateEvents(
  events: readonly EventInput[],
  types: ReadonlyMap<string, EventTypeRecord>,
  now: number,
): StoredEvent[] {
  checkBatchSize(events.length);
  const issues: string[] = [];
  const out = new Array<StoredEvent>(events.length);
  const latest = now + MAX_FUTURE_MS;
  // The type of the event before, once found registered: a batch is mostly of one type, so its name is
  // checked and looked up once, not once per event.
  let lastName: string | undefined;
  let lastType: EventTypeRecord | undefined;
  for (let i = 0; i < events.length && issues.length < 20; i++) {
    const e = events[i];
    let type: EventTypeRecord | undefined;
    if (e.type === lastName) type = lastType!;
    else {
      if (!e.type) {
        issues.push(`events[${i}].type: is required`);
        continue;
      }
      if (!NAME_PATTERN.test(e.type)) {
        issues.push(`events[${i}].type: ${NAME_RULE}`);
        continue;
      }
      type = types.get(e.type);
      if (!type) {
        issues.push(`events[${i}].type: no event type named ${quoted(e.type)} is registered`);
        continue;
      }
      lastName = e.type;
      lastType = type;
    }
    let at = now;
    if (e.at !== undefined) {
      const ms = timestampToMs(e.at);
      if (ms === undefined) {
        issues.push(`events[${i}].at: must be between years 0001 and 9999`);
        continue;
      }
      if (ms > latest) {
        issues.push(`events[${i}].at: is more than 24 h in the future`);
        continue;
      }
      at = ms;
    }
    if (e.distinctId !== undefined) {
      const rule = distinctIdRule(e.distinctId);
      if (rule !== undefined) {
        issues.push(`events[${i}].distinctId: ${rule}`);
        continue;
      }
    }
    const properties: Record<string, string> = {};
    let numbers: Record<string, number> | undefined;
    let bad = false;
    for (const key in e.properties) {
      const kind = Object.hasOwn(type.properties, key) ? type.properties[key] : undefined;
      if (kind === undefined) {
        issues.push(
          `events[${i}].properties.${quoted(key).slice(1, -1)}: is not declared by type ${quoted(type.name)}`,
        );
        bad = true;
        break;
      }
      const value = storedValue(e.properties[key], kind);
      if (typeof value !== "string") {
        issues.push(`events[${i}].properties.${key}: ${value.rule}`);
        bad = true;
        break;
      }
      properties[key] = value;
      if (kind === "number") (numbers ??= {})[key] = (e.properties[key].kind as { value: number }).value;
    }
    if (bad) continue;
    const stored: StoredEvent = { type: e.type, at, properties };
    if (e.distinctId !== undefined) stored.distinctId = e.distinctId;
    if (numbers !== undefined) stored.numbers = numbers;
    out[i] = stored;
  }
  if (issues.length > 0) {
    throw new PlatformError("invalid_argument", issues[0], { details: issues });
  }
  return out;
}
