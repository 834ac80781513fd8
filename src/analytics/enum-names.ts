/**
 * The protobuf enums of AnalyticsService and the words the REST API uses for them
 * ("string", "day", ...), in both directions, for the implementation and the
 * REST mapping alike.
 */
import { Interval, PropertyKind } from "../../gen/platform/analytics/v1/analytics_pb.js";
import type { Unit } from "./buckets.ts";
import type { PropertyKindName } from "./event-type-store.ts";

/** The other direction of a word-to-value table: the word of each value. */
export function wordsOf<W extends string, E extends number>(valueOf: Record<W, E>): Record<number, W> {
  return Object.fromEntries(Object.entries(valueOf).map(([word, value]) => [value, word])) as Record<number, W>;
}

export const KIND_OF: Record<PropertyKindName, PropertyKind> = {
  string: PropertyKind.STRING,
  number: PropertyKind.NUMBER,
  boolean: PropertyKind.BOOLEAN,
};
export const KIND_NAME: Record<number, PropertyKindName> = wordsOf(KIND_OF);
export const INTERVAL_OF: Record<Unit, Interval> = {
  hour: Interval.HOUR,
  day: Interval.DAY,
  week: Interval.WEEK,
  month: Interval.MONTH,
};
/** An unset interval is a day, as the API documents. */
export const UNIT_OF: Record<number, Unit> = { ...wordsOf(INTERVAL_OF), [Interval.UNSPECIFIED]: "day" };
