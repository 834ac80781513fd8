/**
 * The `/v1/analytics` routes (docs/api.md#analytics), mapped onto `AnalyticsService`. The
 * schemas check JSON shapes only (a wrong JSON type is a 400 naming the
 * field); every rule about values lives in the implementation, shared with
 * gRPC. Times arrive as epoch ms (integer) or ISO 8601 ending in `Z`, and
 * leave as epoch ms.
 */
import { create } from "@bufbuild/protobuf";
import { ListValueSchema, StructSchema, type Timestamp, type Value } from "@bufbuild/protobuf/wkt";
import { z } from "zod";
import {
  AnalyticsService,
  Interval,
  PropertyKind,
  Aggregate,
  type Event,
  type EventType,
  type FunnelStepResult,
  type QueryEventsResponse,
} from "../../gen/platform/analytics/v1/analytics_pb.js";
import { AGGREGATE_NAME, AGGREGATE_OF } from "./query-extensions.ts";
import { OP_OF } from "./where-conditions.ts";
import { defineRoute, type AnyRestRoute } from "../core/http/rest-router.ts";
import { scalarValue } from "../core/proto-value.ts";
import {
  epochMs,
  fixedObject,
  isJsonObject,
  jsonObject,
  optionalInteger,
  optionalString,
  passthroughObject,
  withFastPath,
} from "../core/http/validation.ts";
import { INTERVAL_OF, KIND_NAME, KIND_OF, UNIT_OF } from "./enum-names.ts";
import { MAX_EVENTS_PER_CALL } from "./validate-events.ts";

const TIME_RULE = "must be epoch milliseconds (an integer) or an ISO 8601 date-time ending in Z";
const KIND_RULE = 'must be "string", "number" or "boolean"';
const INTERVAL_RULE = "must be hour, day, week or month";

// Messages are built whole here (with `$typeName`), so that `create()` takes
// them as they are instead of copying a thousand events field by field.
function fromMs(ms: number): Timestamp {
  const seconds = Math.floor(ms / 1000);
  return { $typeName: "google.protobuf.Timestamp", seconds: BigInt(seconds), nanos: (ms - seconds * 1000) * 1_000_000 };
}

/** ISO 8601 in UTC (`Z`), seconds and fraction optional, calendar-checked (no February 30). */
const IsoUtc = z.iso.datetime();

/** A JSON time as a Timestamp, or undefined when it is not one (the caller names the field). */
export function parseTime(value: unknown): Timestamp | undefined {
  if (typeof value === "number") return Number.isSafeInteger(value) ? fromMs(value) : undefined;
  if (!IsoUtc.safeParse(value).success) return undefined;
  // Date.parse reads what the schema admitted; digits beyond milliseconds are dropped.
  return fromMs(Date.parse(value as string));
}

/** An optional JSON time (`null` is absent). */
const JsonTime = z
  .unknown()
  .meta({
    anyOf: [
      { type: "integer", description: "epoch ms" },
      { type: "string", format: "date-time", description: "ISO 8601 ending in Z" },
      { type: "null" },
    ],
  })
  .transform((value, ctx): Timestamp | undefined => {
    if (value === undefined || value === null) return undefined;
    const t = parseTime(value);
    if (!t) ctx.addIssue({ code: "custom", message: TIME_RULE, input: value });
    return t;
  });

/** Any JSON value as a google.protobuf.Value; kinds other than string/number/boolean are refused by the implementation. */
function jsonValue(v: unknown): Value {
  return (
    scalarValue(v) ??
    (Array.isArray(v)
      ? { $typeName: "google.protobuf.Value", kind: { case: "listValue", value: create(ListValueSchema) } }
      : { $typeName: "google.protobuf.Value", kind: { case: "structValue", value: create(StructSchema) } })
  );
}

function eventTypeJson(t: EventType | undefined) {
  const properties: Record<string, string> = {};
  for (const [name, kind] of Object.entries(t?.properties ?? {})) properties[name] = KIND_NAME[kind] ?? "string";
  return { name: t?.name ?? "", properties, createdAt: epochMs(t?.createdAt), updatedAt: epochMs(t?.updatedAt) };
}

/** `POST /v1/analytics/types`. Property names are the implementation's to check (a key such as `__proto__` stays a key). */
const RegisterTypeBody = jsonObject({
  properties: passthroughObject().superRefine((properties, ctx) => {
    for (const [name, kind] of Object.entries(properties)) {
      if (typeof kind !== "string" || !Object.hasOwn(KIND_OF, kind)) {
        ctx.addIssue({ code: "custom", path: [name], message: KIND_RULE, input: kind });
        return;
      }
    }
  }),
  name: optionalString(),
});

const EventJson = fixedObject(
  {
    properties: passthroughObject(),
    type: optionalString(),
    at: JsonTime,
    // Extension: who did it (1 to 200 characters, checked by the implementation).
    distinctId: optionalString(),
  },
  "must be an object",
);

/** `POST /v1/analytics/events`: the batch size is checked before any event. */
export const LogEventsBody = withFastPath(
  jsonObject({
    events: z
      .array(z.unknown(), { error: "must be an array of events" })
      .refine((events) => events.length >= 1 && events.length <= MAX_EVENTS_PER_CALL, {
        error: (issue) => `must have 1 to ${MAX_EVENTS_PER_CALL} items (got ${(issue.input as unknown[]).length})`,
      })
      .pipe(z.array(EventJson)),
  }),
  plainEvents,
);

type LogEventsInput = z.output<typeof EventJson>[];

/**
 * `LogEventsBody`'s fast path (`withFastPath`): a batch whose every event plainly fits `EventJson` (no other
 * field; `type` and `distinctId` strings, `properties` an object, `at` a time, each or absent or null), as the
 * schema makes it;
 * undefined for anything else, which the schema parses. The schema walked each event field by field, a
 * quarter of the service's time for a batch of a thousand (test/analytics/log-events-fast-path.test.ts ties
 * the two).
 */
export function plainEvents(body: unknown): { events: LogEventsInput } | undefined {
  if (!isJsonObject(body)) return undefined;
  for (const key in body) if (key !== "events") return undefined;
  const events = body.events;
  if (!Array.isArray(events) || events.length < 1 || events.length > MAX_EVENTS_PER_CALL) return undefined;
  const out: LogEventsInput = new Array<LogEventsInput[number]>(events.length);
  for (let i = 0; i < events.length; i++) {
    const e: unknown = events[i];
    if (!isJsonObject(e)) return undefined;
    for (const key in e)
      if (key !== "type" && key !== "properties" && key !== "at" && key !== "distinctId") return undefined;
    const { type, properties, at, distinctId } = e;
    if (type !== undefined && type !== null && typeof type !== "string") return undefined;
    if (distinctId !== undefined && distinctId !== null && typeof distinctId !== "string") return undefined;
    if (properties !== undefined && properties !== null && !isJsonObject(properties)) return undefined;
    let time: Timestamp | undefined;
    if (at !== undefined && at !== null) {
      time = parseTime(at);
      if (!time) return undefined;
    }
    out[i] = { type: type ?? undefined, properties: properties ?? {}, at: time, distinctId: distinctId ?? undefined };
  }
  return { events: out };
}

const AGGREGATES = ["count", "unique", "sum", "avg", "min", "max"] as const;
const OPS = ["eq", "neq", "in", "contains", "gt", "gte", "lt", "lte", "exists"] as const;

/** Any JSON value as a Value, lists included (the values of an `in` condition). */
function conditionValue(v: unknown): Value {
  if (!Array.isArray(v)) return jsonValue(v);
  return {
    $typeName: "google.protobuf.Value",
    kind: { case: "listValue", value: create(ListValueSchema, { values: v.map(jsonValue) }) },
  };
}

/** One condition of `where`: `{ property, op, value }`; kinds are the implementation's to check. */
const SCALAR_VALUE = [{ type: "string" }, { type: "number" }, { type: "boolean" }];

const ConditionJson = fixedObject(
  {
    property: z.string({ error: "must be a string" }).meta({ description: 'A declared property, or "distinctId".' }),
    op: z.enum(OPS, {
      error: (issue) => (typeof issue.input === "string" ? `must be one of ${OPS.join(", ")}` : "must be a string"),
    }),
    // The document spells out the kinds a value can have (the implementation judges the rest): an
    // open `{}` would tell generators any JSON at all, nested three deep in a funnel's steps.
    value: z.unknown().meta({
      description: "Of the property's kind; a list for in; true/false for exists.",
      anyOf: [...SCALAR_VALUE, { type: "array", items: { anyOf: SCALAR_VALUE } }],
    }),
  },
  "must be an object { property, op, value }",
);

const QueryBody = jsonObject({
  interval: z
    .enum(["hour", "day", "week", "month"], {
      error: (issue) => (typeof issue.input === "string" ? INTERVAL_RULE : "must be a string"),
    })
    .nullish()
    .transform((v) => v ?? undefined),
  type: optionalString(),
  since: JsonTime,
  // Optional (the implementation's default is now); says so in the OpenAPI document.
  until: JsonTime.optional(),
  // Extension: a second breakdown (a list of at most two properties).
  groupBy: z
    .union([z.string(), z.array(z.string({ error: "must be a string" }))], {
      error: "must be a property name or a list of at most two",
    })
    .nullish()
    .transform((v) => v ?? undefined),
  timezone: optionalString(),
  // Extensions: aggregations, filters, the most groups answered.
  aggregate: z
    .enum(AGGREGATES, {
      error: (issue) =>
        typeof issue.input === "string" ? `must be one of ${AGGREGATES.join(", ")}` : "must be a string",
    })
    .nullish()
    .transform((v) => v ?? undefined),
  of: optionalString(),
  where: z
    .array(ConditionJson, { error: "must be a list of conditions { property, op, value }" })
    .nullish()
    .transform((v) => v ?? []),
  limit: optionalInteger(),
});

/** `POST /v1/analytics/funnel` (extension). */
const FunnelBody = jsonObject({
  steps: z.array(
    fixedObject(
      {
        type: optionalString(),
        where: z
          .array(ConditionJson, { error: "must be a list of conditions { property, op, value }" })
          .nullish()
          .transform((v) => v ?? []),
      },
      "must be an object { type, where }",
    ),
    { error: "must be a list of 2 to 8 steps { type, where }" },
  ),
  since: JsonTime,
  until: JsonTime.optional(),
  windowSeconds: optionalInteger(),
  breakdown: optionalString(),
  limit: optionalInteger(),
});

function conditionMessages(where: z.infer<typeof ConditionJson>[]) {
  return where.map((c) => ({
    $typeName: "platform.analytics.v1.Condition" as const,
    property: c.property,
    op: OP_OF[c.op],
    ...(c.value === undefined ? {} : { value: conditionValue(c.value) }),
  }));
}

const NullableMs = z.number().int().nullable().meta({ description: "Epoch milliseconds." });

/** The 200 bodies of the routes below, as `response` and `eventTypeJson` build them (the OpenAPI document's response shapes). */
const EventTypeResponse = z.object({
  name: z.string(),
  properties: z.record(z.string(), z.enum(["string", "number", "boolean"])),
  createdAt: NullableMs,
  updatedAt: NullableMs,
});
const EventTypeListResponse = z.object({ types: z.array(EventTypeResponse) });
const LogEventsResponse = z.object({ recorded: z.number().int(), remainingToday: z.number().int() });
const QueryResponse = z.object({
  type: z.string(),
  interval: z.enum(["hour", "day", "week", "month"]),
  since: NullableMs,
  until: NullableMs,
  groupBy: z.string().nullable(),
  buckets: z.array(
    z.object({
      at: NullableMs,
      group: z.string().nullable().optional().meta({ description: "With groupBy a property (or none)." }),
      groups: z
        .array(z.string().nullable())
        .optional()
        .meta({ description: "Extension: with groupBy a list, each property's value." }),
      count: z.number().int(),
      value: z.number().optional().meta({ description: "Extension: the aggregate over the bucket." }),
      other: z.boolean().optional().meta({ description: "Extension: the groups beyond limit, folded into one." }),
    }),
  ),
  total: z.number().nullable().meta({ description: "With an extension: the aggregate over the whole range." }),
  aggregate: z.enum(AGGREGATES).optional(),
  of: z.string().nullable().optional(),
  limit: z.number().int().nullable().optional(),
  count: z.number().int().optional().meta({ description: "Extension: the events counted." }),
  otherGroups: z
    .number()
    .int()
    .optional()
    .meta({ description: "Extension: how many groups were folded into the buckets marked other." }),
});

const FunnelStepJson = z.object({
  type: z.string(),
  users: z.number().int(),
  conversionFromFirst: z.number(),
  conversionFromPrevious: z.number(),
  medianSecondsFromPrevious: z.number().nullable(),
});
const FunnelResponse = z.object({
  steps: z.array(FunnelStepJson),
  since: NullableMs,
  until: NullableMs,
  windowSeconds: z.number().int(),
  breakdown: z.string().nullable(),
  groups: z.array(z.object({ group: z.string().nullable(), other: z.boolean(), steps: z.array(FunnelStepJson) })),
  otherGroups: z.number().int(),
});

function funnelStepsJson(steps: FunnelStepResult[]) {
  return steps.map((s) => ({
    type: s.type,
    users: Number(s.users),
    conversionFromFirst: s.conversionFromFirst,
    conversionFromPrevious: s.conversionFromPrevious,
    medianSecondsFromPrevious: s.medianSecondsFromPrevious ?? null,
  }));
}

/** The answer of a query that used an extension (see `QueryResponse`). */
function extendedQueryJson(res: QueryEventsResponse) {
  const list = res.groupByProperties.length > 0;
  return {
    type: res.type,
    interval: UNIT_OF[res.interval] ?? "day",
    since: epochMs(res.since),
    until: epochMs(res.until),
    groupBy: list ? res.groupByProperties : (res.groupBy ?? null),
    aggregate: AGGREGATE_NAME[res.aggregate] ?? "count",
    of: res.of ?? null,
    limit: res.limit ?? null,
    buckets: res.buckets.map((bucket) => ({
      at: epochMs(bucket.at),
      ...(list ? { groups: bucket.groups.map((g) => g.value ?? null) } : { group: bucket.group ?? null }),
      count: Number(bucket.count),
      value: bucket.value ?? 0,
      other: bucket.other,
    })),
    total: res.totalValue ?? null,
    count: Number(res.total),
    otherGroups: Number(res.otherGroups),
  };
}

export const analyticsRoutes: readonly AnyRestRoute[] = [
  defineRoute({
    method: "POST",
    url: "/v1/analytics/types",
    rpc: AnalyticsService.method.registerEventType,
    responseSchema: EventTypeResponse,
    doc: {
      summary: "Register (or replace) an event type",
      errors: ["app_stopped"],
      requestExample: { name: "signup", properties: { plan: "string", seats: "number" } },
      responseExample: {
        name: "signup",
        properties: { plan: "string", seats: "number" },
        createdAt: 1763892000000,
        updatedAt: 1763892000000,
      },
    },
    body: RegisterTypeBody,
    request: ({ body }) => {
      // No prototype: a key such as "__proto__" stays a key, and is refused by the name rule.
      const properties: Record<string, PropertyKind> = Object.create(null) as Record<string, PropertyKind>;
      for (const [name, kind] of Object.entries(body.properties))
        properties[name] = KIND_OF[kind as keyof typeof KIND_OF];
      return { name: body.name ?? "", properties };
    },
    response: (res) => eventTypeJson(res.eventType),
  }),

  defineRoute({
    method: "GET",
    url: "/v1/analytics/types",
    rpc: AnalyticsService.method.listEventTypes,
    responseSchema: EventTypeListResponse,
    doc: {
      summary: "List the registered event types",
      errors: [],
      responseExample: {
        types: [{ name: "signup", properties: { plan: "string" }, createdAt: 1763892000000, updatedAt: 1763892000000 }],
      },
    },
    response: (res) => ({ types: res.types.map(eventTypeJson) }),
  }),

  defineRoute({
    method: "POST",
    url: "/v1/analytics/events",
    rpc: AnalyticsService.method.logEvents,
    idempotent: true,
    responseSchema: LogEventsResponse,
    doc: {
      summary: "Log events",
      errors: ["app_stopped", "quota_exceeded", "not_configured", "upstream_error"],
      requestExample: { events: [{ type: "signup", properties: { plan: "pro" }, at: "2026-11-23T10:00:00Z" }] },
      responseExample: { recorded: 1, remainingToday: 99999 },
    },
    body: LogEventsBody,
    request: ({ body }) => {
      const events: Event[] = new Array<Event>(body.events.length);
      for (let i = 0; i < body.events.length; i++) {
        const e = body.events[i];
        const keys = Object.keys(e.properties);
        // A key such as "__proto__" stays a key (and is refused as undeclared): such a map has no prototype.
        // Only then: a map without one is a dictionary to V8, slower to fill and to walk for every event.
        const properties: Record<string, Value> = keys.includes("__proto__")
          ? (Object.create(null) as Record<string, Value>)
          : {};
        for (const key of keys) properties[key] = jsonValue(e.properties[key]);
        const event: Event = { $typeName: "platform.analytics.v1.Event", type: e.type ?? "", properties };
        if (e.at) event.at = e.at;
        if (e.distinctId !== undefined) event.distinctId = e.distinctId;
        events[i] = event;
      }
      return { events };
    },
    response: (res) => ({ recorded: Number(res.recorded), remainingToday: Number(res.remainingToday) }),
  }),

  defineRoute({
    method: "POST",
    url: "/v1/analytics/query",
    rpc: AnalyticsService.method.queryEvents,
    responseSchema: QueryResponse,
    doc: {
      summary: "Count events over a range",
      description: "`timezone` (an IANA zone) sets where day, week and month buckets start; UTC otherwise.",
      errors: ["not_configured", "upstream_error"],
      requestExample: {
        type: "signup",
        since: "2026-11-01T00:00:00Z",
        interval: "day",
        groupBy: "plan",
        timezone: "Europe/Berlin",
      },
      responseExample: {
        type: "signup",
        interval: "day",
        since: 1761951600000,
        until: 1763892000000,
        groupBy: "plan",
        buckets: [{ at: 1763852400000, group: "pro", count: 4 }],
        total: 4,
      },
    },
    body: QueryBody,
    request: ({ body }) => ({
      type: body.type ?? "",
      since: body.since,
      until: body.until,
      interval: body.interval === undefined ? Interval.UNSPECIFIED : INTERVAL_OF[body.interval],
      groupBy: typeof body.groupBy === "string" ? body.groupBy : undefined,
      // An empty list is a list: it asks for the extended answer with no groups.
      groupByProperties: Array.isArray(body.groupBy) ? body.groupBy : [],
      timezone: body.timezone,
      aggregate:
        body.aggregate === undefined
          ? Array.isArray(body.groupBy)
            ? Aggregate.COUNT
            : Aggregate.UNSPECIFIED
          : AGGREGATE_OF[body.aggregate],
      of: body.of,
      where: conditionMessages(body.where),
      limit: body.limit,
    }),
    response: (res) =>
      res.aggregate !== Aggregate.UNSPECIFIED
        ? extendedQueryJson(res)
        : {
            type: res.type,
            interval: UNIT_OF[res.interval] ?? "day",
            since: epochMs(res.since),
            until: epochMs(res.until),
            groupBy: res.groupBy ?? null,
            buckets: res.buckets.map((bucket) => ({
              at: epochMs(bucket.at),
              group: bucket.group ?? null,
              count: Number(bucket.count),
            })),
            total: Number(res.total),
          },
  }),

  defineRoute({
    method: "POST",
    url: "/v1/analytics/funnel",
    rpc: AnalyticsService.method.queryFunnel,
    responseSchema: FunnelResponse,
    doc: {
      summary: "Count the users who did a sequence of events, in order, within a window (extension)",
      description:
        "Users are events' `distinctId`s. 2 to 8 steps; `windowSeconds` (default 7 days) counts from the first step; `breakdown` is a property of the first step's type.",
      errors: ["not_configured", "upstream_error"],
      requestExample: {
        steps: [{ type: "signup", where: [{ property: "plan", op: "eq", value: "pro" }] }, { type: "project.created" }],
        since: "2026-11-01T00:00:00Z",
        windowSeconds: 604800,
      },
      responseExample: {
        steps: [
          {
            type: "signup",
            users: 120,
            conversionFromFirst: 1,
            conversionFromPrevious: 1,
            medianSecondsFromPrevious: null,
          },
          {
            type: "project.created",
            users: 54,
            conversionFromFirst: 0.45,
            conversionFromPrevious: 0.45,
            medianSecondsFromPrevious: 5400,
          },
        ],
        since: 1761955200000,
        until: 1763892000000,
        windowSeconds: 604800,
        breakdown: null,
        groups: [],
        otherGroups: 0,
      },
    },
    body: FunnelBody,
    request: ({ body }) => ({
      steps: body.steps.map((step) => ({ type: step.type ?? "", where: conditionMessages(step.where) })),
      since: body.since,
      until: body.until,
      windowSeconds: body.windowSeconds === undefined ? undefined : BigInt(body.windowSeconds),
      breakdown: body.breakdown,
      limit: body.limit,
    }),
    response: (res) => ({
      steps: funnelStepsJson(res.steps),
      since: epochMs(res.since),
      until: epochMs(res.until),
      windowSeconds: Number(res.windowSeconds),
      breakdown: res.breakdown ?? null,
      groups: res.groups.map((g) => ({ group: g.group ?? null, other: g.other, steps: funnelStepsJson(g.steps) })),
      otherGroups: Number(res.otherGroups),
    }),
  }),
];
