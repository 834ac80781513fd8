/**
 * The protobuf enums of AnalyticsService and the words the REST API uses for them
 * ("string", "day", ...), in both directions, for the implementation and the
 * REST mapping alike.
 */
import { Interval, PropertyKind } from "../../gen/platform/analytics/v1/analytics_pb.js";
import type { Unit } from "./buckets.ts";
import type { PropertyKindName } from "./event-type-store.ts";

export const KIND_NAME: Record<number, PropertyKindName> = {
  [PropertyKind.STRING]: "string",
  [PropertyKind.NUMBER]: "number",
  [PropertyKind.BOOLEAN]: "boolean",
};
export const KIND_OF: Record<PropertyKindName, PropertyKind> = {
  string: PropertyKind.STRING,
  number: PropertyKind.NUMBER,
  boolean: PropertyKind.BOOLEAN,
};
export const UNIT_OF: Record<number, Unit> = {
  [Interval.UNSPECIFIED]: "day",
  [Interval.HOUR]: "hour",
  [Interval.DAY]: "day",
  [Interval.WEEK]: "week",
  [Interval.MONTH]: "month",
};
export const INTERVAL_OF: Record<Unit, Interval> = {
  hour: Interval.HOUR,
  day: Interval.DAY,
  week: Interval.WEEK,
  month: Interval.MONTH,
};
