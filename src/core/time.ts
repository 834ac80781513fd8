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
