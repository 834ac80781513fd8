/**
 * The SPEC.md `/v1/analytics` JSON routes, mapped onto `AnalyticsService`.
 * Only JSON shapes are checked here (a wrong JSON type is a 400 naming the
 * field); every rule about values lives in the implementation, shared with
 * gRPC. Times arrive as epoch ms (integer) or ISO 8601 ending in `Z`, and
 * leave as epoch ms.
 */
import { create } from "@bufbuild/protobuf";
import { ListValueSchema, NullValue, StructSchema, timestampMs, type Timestamp, type Value } from "@bufbuild/protobuf/wkt";
import { AnalyticsService, Interval, PropertyKind, type Event, type EventType } from "../../gen/platform/analytics/v1/analytics_pb.js";
import { invalidArgument } from "../core/errors.ts";
import { bodyObject, type RestRouter } from "../core/http/rest-router.ts";
import { checkBatchSize } from "./validate-events.ts";
import { INTERVAL_OF, KIND_NAME, KIND_OF, UNIT_OF } from "./enum-names.ts";

const TIME_RULE = "must be epoch milliseconds (an integer) or an ISO 8601 date-time ending in Z";
const ISO = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?Z$/;

// Messages are built whole here (with `$typeName`), so that `create()` takes
// them as they are instead of copying a thousand events field by field.
function fromMs(ms: number): Timestamp {
  const seconds = Math.floor(ms / 1000);
  return { $typeName: "google.protobuf.Timestamp", seconds: BigInt(seconds), nanos: (ms - seconds * 1000) * 1_000_000 };
}

/** Epoch ms from a JSON time, or undefined when it is not one (the caller names the field). */
export function parseTime(value: unknown): Timestamp | undefined {
  if (typeof value === "number") return Number.isSafeInteger(value) ? fromMs(value) : undefined;
  if (typeof value !== "string") return undefined;
  const m = ISO.exec(value);
  if (!m) return undefined;
  const [year, month, day, hour, minute, second] = [m[1], m[2], m[3], m[4], m[5], m[6] ?? "0"].map(Number) as [number, number, number, number, number, number];
  const d = new Date(0);
  d.setUTCFullYear(year, month - 1, day);
  d.setUTCHours(hour, minute, second, 0);
  if (d.getUTCFullYear() !== year || d.getUTCMonth() !== month - 1 || d.getUTCDate() !== day || d.getUTCHours() !== hour || d.getUTCMinutes() !== minute || d.getUTCSeconds() !== second) {
    return undefined;
  }
  const ms = Number((m[7] ?? "").padEnd(3, "0").slice(0, 3) || 0);
  return fromMs(d.getTime() + ms);
}

function time(value: unknown, field: string): Timestamp | undefined {
  if (value === undefined || value === null) return undefined;
  const t = parseTime(value);
  if (!t) throw invalidArgument(field, TIME_RULE);
  return t;
}

function optionalString(value: unknown, field: string): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "string") throw invalidArgument(field, "must be a string");
  return value;
}

function object(value: unknown, field: string): Record<string, unknown> {
  if (value === undefined || value === null) return {};
  if (typeof value !== "object" || Array.isArray(value)) throw invalidArgument(field, "must be an object");
  return value as Record<string, unknown>;
}

/** Any JSON value as a google.protobuf.Value; kinds other than string/number/boolean are refused by the implementation. */
function jsonValue(v: unknown): Value {
  switch (typeof v) {
    case "string":
      return { $typeName: "google.protobuf.Value", kind: { case: "stringValue", value: v } };
    case "number":
      return { $typeName: "google.protobuf.Value", kind: { case: "numberValue", value: v } };
    case "boolean":
      return { $typeName: "google.protobuf.Value", kind: { case: "boolValue", value: v } };
    default:
      if (v === null) return { $typeName: "google.protobuf.Value", kind: { case: "nullValue", value: NullValue.NULL_VALUE } };
      return Array.isArray(v)
        ? { $typeName: "google.protobuf.Value", kind: { case: "listValue", value: create(ListValueSchema) } }
        : { $typeName: "google.protobuf.Value", kind: { case: "structValue", value: create(StructSchema) } };
  }
}

const ms = (t: Timestamp | undefined) => (t ? timestampMs(t) : null);

function eventTypeJson(t: EventType | undefined) {
  const properties: Record<string, string> = {};
  for (const [name, kind] of Object.entries(t?.properties ?? {})) properties[name] = KIND_NAME[kind] ?? "string";
  return { name: t?.name ?? "", properties, createdAt: ms(t?.createdAt), updatedAt: ms(t?.updatedAt) };
}

export function registerAnalyticsRoutes(rest: RestRouter): void {
  rest.route({
    method: "POST",
    url: "/v1/analytics/types",
    rpc: AnalyticsService.method.registerEventType,
    request: ({ body }) => {
      const b = bodyObject(body);
      // No prototype: a key such as "__proto__" stays a key, and is refused by the name rule.
      const properties: Record<string, PropertyKind> = Object.create(null);
      for (const [name, kind] of Object.entries(object(b.properties, "properties"))) {
        const k = typeof kind === "string" && Object.hasOwn(KIND_OF, kind) ? KIND_OF[kind as keyof typeof KIND_OF] : undefined;
        if (k === undefined) throw invalidArgument(`properties.${name.slice(0, 64)}`, 'must be "string", "number" or "boolean"');
        properties[name] = k;
      }
      return { name: optionalString(b.name, "name") ?? "", properties };
    },
    response: (res) => eventTypeJson(res.eventType),
  });

  rest.route({
    method: "GET",
    url: "/v1/analytics/types",
    rpc: AnalyticsService.method.listEventTypes,
    response: (res) => ({ types: res.types.map(eventTypeJson) }),
  });

  rest.route({
    method: "POST",
    url: "/v1/analytics/events",
    rpc: AnalyticsService.method.logEvents,
    request: ({ body }) => {
      const b = bodyObject(body);
      if (!Array.isArray(b.events)) throw invalidArgument("events", "must be an array of events");
      checkBatchSize(b.events.length);
      const events: Event[] = new Array(b.events.length);
      for (let i = 0; i < b.events.length; i++) {
        const e = b.events[i] as Record<string, unknown>;
        if (typeof e !== "object" || e === null || Array.isArray(e)) throw invalidArgument(`events[${i}]`, "must be an object");
        const props = object(e.properties, `events[${i}].properties`);
        const properties: Record<string, Value> = Object.create(null);
        for (const key of Object.keys(props)) properties[key] = jsonValue(props[key]);
        const event: Event = { $typeName: "platform.analytics.v1.Event", type: optionalString(e.type, `events[${i}].type`) ?? "", properties };
        const at = time(e.at, `events[${i}].at`);
        if (at) event.at = at;
        events[i] = event;
      }
      return { events };
    },
    response: (res) => ({ recorded: Number(res.recorded), remainingToday: Number(res.remainingToday) }),
  });

  rest.route({
    method: "POST",
    url: "/v1/analytics/query",
    rpc: AnalyticsService.method.queryEvents,
    request: ({ body }) => {
      const b = bodyObject(body);
      const interval = optionalString(b.interval, "interval");
      if (interval !== undefined && !Object.hasOwn(INTERVAL_OF, interval)) {
        throw invalidArgument("interval", "must be hour, day, week or month");
      }
      return {
        type: optionalString(b.type, "type") ?? "",
        since: time(b.since, "since"),
        until: time(b.until, "until"),
        interval: interval === undefined ? Interval.UNSPECIFIED : INTERVAL_OF[interval as keyof typeof INTERVAL_OF],
        groupBy: optionalString(b.groupBy, "groupBy"),
        timezone: optionalString(b.timezone, "timezone"),
      };
    },
    response: (res) => ({
      type: res.type,
      interval: UNIT_OF[res.interval] ?? "day",
      since: ms(res.since),
      until: ms(res.until),
      groupBy: res.groupBy ?? null,
      buckets: res.buckets.map((bucket) => ({ at: ms(bucket.at), group: bucket.group ?? null, count: Number(bucket.count) })),
      total: Number(res.total),
    }),
  });
}
