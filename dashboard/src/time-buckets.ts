/**
 * Calendar buckets and axis ticks in a time zone, for the charts.
 *
 * The analytics API answers only the buckets that hold events; a chart that
 * joined those points would draw a line across days that had none. So the
 * chart lays out every bucket of the range itself (`bucketStarts`) and puts
 * the answered counts into them (`bucketIndex`), zeros elsewhere. The rules
 * are the API's (docs/analytics.md): hours are whole UTC hours; days start
 * at local midnight in the chosen zone (23 or 25 hours across a summer-time
 * change), weeks on Monday, months on the 1st.
 *
 * Ticks are never finer than the buckets: a daily chart is labelled with
 * days (or weeks, months when days do not fit), never with hours.
 */
import { TZDate } from "@date-fns/tz";
import {
  addDays,
  addHours,
  addMonths,
  addYears,
  startOfDay,
  startOfISOWeek,
  startOfMonth,
  startOfYear,
} from "date-fns";

export type BucketUnit = "hour" | "day" | "week" | "month";

const HOUR_MS = 3_600_000;

/** At most this many buckets are laid out (the API answers at most 1000 per query). */
const MAX_BUCKETS = 2000;

/** The start of the bucket holding `ms`, in epoch ms. */
export function bucketStart(ms: number, unit: BucketUnit, zone: string): number {
  if (unit === "hour") return Math.floor(ms / HOUR_MS) * HOUR_MS;
  const d = new TZDate(ms, zone);
  return (unit === "day" ? startOfDay(d) : unit === "week" ? startOfISOWeek(d) : startOfMonth(d)).getTime();
}

/** The start of the bucket after the one starting at `start`. */
export function nextBucketStart(start: number, unit: BucketUnit, zone: string): number {
  if (unit === "hour") return start + HOUR_MS;
  const d = new TZDate(start, zone);
  // Normalised again: the wall clock of a start can be 01:00 where a zone skipped midnight.
  const later = unit === "day" ? addDays(d, 1) : unit === "week" ? addDays(d, 7) : addMonths(d, 1);
  const next = bucketStart(later.getTime(), unit, zone);
  return next > start ? next : bucketStart(later.getTime() + 6 * HOUR_MS, unit, zone);
}

/** The starts (epoch ms) of every bucket that `[since, until)` touches, in order. */
export function bucketStarts(since: number, until: number, unit: BucketUnit, zone: string): number[] {
  const starts: number[] = [];
  let t = bucketStart(since, unit, zone);
  while (t < until && starts.length < MAX_BUCKETS) {
    starts.push(t);
    t = nextBucketStart(t, unit, zone);
  }
  return starts;
}

/**
 * Finds the laid-out bucket of an answered bucket start: the last start at or
 * before it. A zoned start may differ from the answer by a summer-time shift
 * where a local midnight happened twice (the answer is its first instant), so
 * day, week and month starts are matched with two hours to spare.
 */
export function bucketIndex(starts: number[], unit: BucketUnit): (at: number) => number {
  const slack = unit === "hour" ? 0 : 2 * HOUR_MS;
  return (at) => {
    let lo = 0;
    let hi = starts.length - 1;
    while (lo < hi) {
      const mid = Math.ceil((lo + hi) / 2);
      if (starts[mid] <= at + slack) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  };
}

/** A tick spacing: every `n`th hour, day, week (Mondays), month or year. */
interface Step {
  unit: "hour" | "day" | "week" | "month" | "year";
  n: number;
}

const APPROX_MS = {
  hour: HOUR_MS,
  day: 24 * HOUR_MS,
  week: 7 * 24 * HOUR_MS,
  month: 30.44 * 24 * HOUR_MS,
  year: 365.25 * 24 * HOUR_MS,
};

const step = (unit: Step["unit"], ...ns: number[]): Step[] => ns.map((n) => ({ unit, n }));
const COARSE: Step[] = [...step("month", 1, 2, 3, 6), ...step("year", 1, 2, 5, 10, 20, 50, 100)];
/** The spacings a chart of each bucket unit may use, finest first: never finer than the buckets. */
const STEPS: Record<BucketUnit, Step[]> = {
  hour: [...step("hour", 1, 2, 3, 6, 12), ...step("day", 1, 2), ...step("week", 1, 2), ...COARSE],
  day: [...step("day", 1, 2), ...step("week", 1, 2), ...COARSE],
  week: [...step("week", 1, 2, 4), ...COARSE],
  month: COARSE,
};

/** Where the first boundary of `unit` at or after `ms` is, and the ones after it. */
function boundaries(min: number, max: number, unit: Step["unit"], zone: string): TZDate[] {
  const d = new TZDate(min, zone);
  const floor =
    unit === "hour"
      ? new TZDate(Math.floor(min / HOUR_MS) * HOUR_MS, zone)
      : unit === "day"
        ? startOfDay(d)
        : unit === "week"
          ? startOfISOWeek(d)
          : unit === "month"
            ? startOfMonth(d)
            : startOfYear(d);
  const add = (t: TZDate, k: number): TZDate =>
    unit === "hour"
      ? addHours(t, k)
      : unit === "day"
        ? startOfDay(addDays(t, k))
        : unit === "week"
          ? startOfISOWeek(addDays(t, 7 * k))
          : unit === "month"
            ? startOfMonth(addMonths(t, k))
            : startOfYear(addYears(t, k));
  const out: TZDate[] = [];
  for (let t = floor, k = 0; t.getTime() <= max && out.length < 5000; t = add(floor, ++k))
    if (t.getTime() >= min) out.push(t);
  return out;
}

/** The ticks (epoch ms) for `[min, max]` of a chart of `unit` buckets, `width` pixels wide. */
export function timeTicks(
  min: number,
  max: number,
  unit: BucketUnit,
  zone: string,
  width: number,
  minSpace = 64,
): { ticks: number[]; step: Step } {
  const fit = Math.max(2, Math.floor(width / minSpace));
  const steps = STEPS[unit];
  const chosen = steps.find((s) => (max - min) / (s.n * APPROX_MS[s.unit]) <= fit) ?? steps[steps.length - 1];
  const all = boundaries(min, max, chosen.unit, zone);
  const ticks =
    chosen.unit === "hour"
      ? all.filter((t) => t.getHours() % chosen.n === 0)
      : chosen.unit === "month"
        ? all.filter((t) => t.getMonth() % chosen.n === 0)
        : chosen.unit === "year"
          ? all.filter((t) => t.getFullYear() % chosen.n === 0)
          : all.filter((_, i) => i % chosen.n === 0);
  return { ticks: ticks.map((t) => t.getTime()), step: chosen };
}

const formats = new Map<string, Intl.DateTimeFormat>();
function format(zone: string, options: Intl.DateTimeFormatOptions): Intl.DateTimeFormat {
  const key = zone + JSON.stringify(options);
  let f = formats.get(key);
  if (!f) formats.set(key, (f = new Intl.DateTimeFormat(undefined, { timeZone: zone, ...options })));
  return f;
}

/**
 * The labels of `ticks`: the time of day for hourly ticks (with the date under
 * the first one and under each midnight), the date for days and weeks, the
 * month for months (with the year under the first one and under each January).
 */
export function tickLabels(ticks: number[], step: Step, zone: string): string[] {
  const year = format(zone, { year: "numeric" });
  return ticks.map((t, i) => {
    const d = new TZDate(t, zone);
    switch (step.unit) {
      case "hour": {
        const time = format(zone, { hour: "numeric", minute: "2-digit" }).format(t);
        return i === 0 || (d.getHours() === 0 && d.getMinutes() === 0)
          ? `${time}\n${format(zone, { month: "short", day: "numeric" }).format(t)}`
          : time;
      }
      case "day":
      case "week": {
        const day = format(zone, { month: "short", day: "numeric" }).format(t);
        const previous = i > 0 ? new TZDate(ticks[i - 1], zone).getFullYear() : undefined;
        return previous === d.getFullYear() ? day : `${day}\n${year.format(t)}`;
      }
      case "month": {
        const month = format(zone, { month: "short" }).format(t);
        return i === 0 || d.getMonth() === 0 ? `${month}\n${year.format(t)}` : month;
      }
      case "year":
        return year.format(t);
    }
  });
}

/** How a bucket is named where one is shown on its own (the chart's legend): its whole calendar unit. */
export function bucketLabel(start: number, unit: BucketUnit, zone: string): string {
  switch (unit) {
    case "hour":
      return format(zone, { dateStyle: "medium", timeStyle: "short" }).format(start);
    case "day":
      return format(zone, { weekday: "short", month: "short", day: "numeric", year: "numeric" }).format(start);
    case "week":
      return `Week of ${format(zone, { month: "short", day: "numeric", year: "numeric" }).format(start)}`;
    case "month":
      return format(zone, { month: "long", year: "numeric" }).format(start);
  }
}
