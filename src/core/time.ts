/**
 * Lengths of time in milliseconds, in one place: the hourly sweeps, the UTC
 * days of quotas and analytics buckets all count in these.
 */

export const HOUR_MS = 3_600_000;
export const DAY_MS = 86_400_000;
