/**
 * Calendar arithmetic for query buckets, shared by the validation of a query
 * (how many buckets a range spans) and by tests. Buckets are calendar units in
 * UTC or, with the `timezone` extension, in an IANA zone: a day bucket is a
 * local day (23 or 25 hours long across a DST change), weeks start on Monday
 * (ISO), months are calendar months. The stores do the bucketing themselves
 * (`date_trunc` / `$dateTrunc`); this module only has to agree with them.
 */
import { invalidArgument } from "../core/errors.ts";
import { DAY_MS, HOUR_MS } from "../core/time.ts";

export type Unit = "hour" | "day" | "week" | "month";

/** At most this many buckets between `since` and `until` (docs/api.md#analytics). */
export const MAX_BUCKETS = 1000;

const ZONE_PATTERN = /^[A-Za-z][A-Za-z0-9_+-]*(\/[A-Za-z0-9_+-]+){0,3}$/;

const formatters = new Map<string, Intl.DateTimeFormat>();

function formatter(zone: string): Intl.DateTimeFormat {
  let f = formatters.get(zone);
  if (!f) {
    f = new Intl.DateTimeFormat("en-US", {
      timeZone: zone,
      hourCycle: "h23",
      year: "numeric",
      month: "numeric",
      day: "numeric",
      hour: "numeric",
      minute: "numeric",
      second: "numeric",
    });
    if (formatters.size > 500) formatters.clear();
    formatters.set(zone, f);
  }
  return f;
}

/**
 * Checks an IANA zone name. Offsets such as `+03:00` are refused: Intl reads
 * them as offsets while Postgres reads them as POSIX zones with the opposite
 * sign, and a zone must mean the same thing to every store.
 */
export function checkTimezone(zone: string, field = "timezone"): string {
  if (zone.length > 64 || !ZONE_PATTERN.test(zone))
    throw invalidArgument(field, "must be an IANA time zone name such as Europe/Berlin");
  // Abbreviations (IST, BST, NST...) are zones to ICU and abbreviations of other zones to PostgreSQL:
  // the two stores would count in different zones.
  if (/^[A-Z]{2,5}$/.test(zone) && !/^(UTC|GMT|UCT)$/.test(zone))
    throw invalidArgument(field, `must be an IANA time zone name such as Europe/Berlin, not an abbreviation (${zone})`);
  try {
    formatter(zone);
  } catch {
    throw invalidArgument(field, `unknown time zone ${JSON.stringify(zone)}`);
  }
  return zone;
}

export function isUtc(zone: string | undefined): boolean {
  return zone === undefined || /^(utc|etc\/utc|gmt|etc\/gmt|zulu|etc\/zulu|universal|etc\/universal)$/i.test(zone);
}

/**
 * The start of a zoned bucket as the stores answer it, made the first instant
 * of its wall-clock time. A local midnight can happen twice: a zone whose
 * summer time ends at 01:00, back to 00:00 (Atlantic/Azores in October,
 * America/Havana in November), has two. PostgreSQL's `date_trunc` answers the
 * second (it reads an ambiguous local time as standard time), which is after
 * events of that very day; the day starts at the first. MongoDB's answer is
 * made the same way, so the two stores agree whichever one each picks.
 */
export function firstInstantOfWallTime(ms: number, zone: string | undefined): number {
  if (isUtc(zone)) return ms;
  const f = formatter(zone!);
  const wall = f.format(new Date(ms));
  // Summer time shifts are 30 minutes, one hour or two: an earlier instant with the same wall clock is one of these back.
  for (const back of [2 * HOUR_MS, HOUR_MS, HOUR_MS / 2]) if (f.format(new Date(ms - back)) === wall) return ms - back;
  return ms;
}

/** The local calendar date of an instant in `zone`, as a UTC-midnight day number and its fields. */
function localDate(ms: number, zone: string | undefined): { year: number; month: number; day: number } {
  if (isUtc(zone)) {
    const d = new Date(ms);
    return { year: d.getUTCFullYear(), month: d.getUTCMonth() + 1, day: d.getUTCDate() };
  }
  const parts = formatter(zone!).formatToParts(new Date(ms));
  const get = (type: string) => Number(parts.find((p) => p.type === type)?.value);
  const year = parts.find((p) => p.type === "era")?.value === "BC" ? 1 - get("year") : get("year");
  return { year, month: get("month"), day: get("day") };
}

function dayNumber(date: { year: number; month: number; day: number }): number {
  const d = new Date(0);
  d.setUTCFullYear(date.year, date.month - 1, date.day);
  return Math.floor(d.getTime() / DAY_MS);
}

/** How many `unit` buckets the range `[since, until)` touches (both in epoch ms, `since < until`). */
export function bucketCount(since: number, until: number, unit: Unit, zone?: string): number {
  const last = until - 1;
  if (unit === "hour") return Math.floor(last / HOUR_MS) - Math.floor(since / HOUR_MS) + 1;
  const a = localDate(since, zone);
  const b = localDate(last, zone);
  if (unit === "month") return (b.year - a.year) * 12 + (b.month - a.month) + 1;
  const da = dayNumber(a);
  const db = dayNumber(b);
  if (unit === "day") return db - da + 1;
  // Day 0 (1970-01-01) was a Thursday; Monday-based week index.
  const week = (n: number) => Math.floor((n + 3) / 7);
  return week(db) - week(da) + 1;
}

/** The start of the UTC bucket holding `ms` (reference arithmetic for UTC; the stores bucket themselves). */
export function utcBucketStart(ms: number, unit: Unit): number {
  switch (unit) {
    case "hour":
      return Math.floor(ms / HOUR_MS) * HOUR_MS;
    case "day":
      return Math.floor(ms / DAY_MS) * DAY_MS;
    case "week": {
      const day = Math.floor(ms / DAY_MS);
      return (day - ((((day + 3) % 7) + 7) % 7)) * DAY_MS;
    }
    case "month": {
      const d = new Date(ms);
      const m = new Date(0);
      m.setUTCFullYear(d.getUTCFullYear(), d.getUTCMonth(), 1);
      return m.getTime();
    }
  }
}
