/**
 * Lengths of time in milliseconds, in one place: the hourly sweeps, the UTC
 * days of quotas and analytics buckets all count in these.
 */

import { timestampMs, type Timestamp } from "@bufbuild/protobuf/wkt";

export const HOUR_MS = 3_600_000;
export const DAY_MS = 86_400_000;

/** The instants a timestamp may take: years 0001 to 9999, as google.protobuf.Timestamp allows (and SQL stores). */
export const MIN_TIME_MS = -62_135_596_800_000;
export const MAX_TIME_MS = 253_402_300_799_999;

/**
 * Epoch ms of a timestamp, or undefined when it is out of range: binary
 * protobuf carries any seconds, which JSON and PostgreSQL do not.
 */
export function timestampToMs(ts: Timestamp): number | undefined {
  const ms = timestampMs(ts);
  return Number.isFinite(ms) && ms >= MIN_TIME_MS && ms <= MAX_TIME_MS ? Math.floor(ms) : undefined;
}

/** The last day `utcDayOf` formatted: every request of a day asks for the same one. */
let lastDay = { from: 0, to: 0, day: "1970-01-01" };

/**
 * The UTC day (`YYYY-MM-DD`) of an instant in epoch ms. Remembers the last day formatted, so that the
 * requests of one day (quota reads, request counts) do not each make a `Date` and its ISO text.
 */
export function utcDayOf(ms: number): string {
  if (ms >= lastDay.from && ms < lastDay.to) return lastDay.day;
  const from = ms - (((ms % DAY_MS) + DAY_MS) % DAY_MS);
  const day = new Date(from).toISOString().slice(0, 10);
  lastDay = { from, to: from + DAY_MS, day };
  return day;
}
