/**
 * A schedule's cron expression and time zone (docs/queues.md "Schedules"), read by `cron-parser`: five
 * fields, or six with seconds first; the zone is an IANA name, and daylight saving is the library's
 * (a local time skipped in spring fires at the same wall-clock offset after the jump, a repeated one
 * in autumn fires once).
 */
import { CronExpressionParser } from "cron-parser";
import { invalidArgument } from "../core/errors.ts";

/** The shortest interval between two ticks a schedule may have. */
const MIN_SCHEDULE_INTERVAL_MS = 1000;

/** Whether `zone` is a time zone this runtime knows (an IANA name such as `Europe/Berlin`, or `UTC`). */
function isTimeZone(zone: string): boolean {
  try {
    new Intl.DateTimeFormat("en", { timeZone: zone });
    return true;
  } catch {
    return false;
  }
}

function parse(cron: string, timezone: string, after: Date) {
  return CronExpressionParser.parse(cron, { currentDate: after, tz: timezone });
}

/** The first tick strictly after `after`, or null when none comes before `endAt`. */
export function nextRun(cron: string, timezone: string, after: Date, endAt?: Date | null): Date | null {
  const expression = parse(cron, timezone, after);
  if (!expression.hasNext()) return null;
  const next = expression.next().toDate();
  if (endAt && next.getTime() > endAt.getTime()) return null;
  return next;
}

/**
 * Checks a schedule's cron and zone as a request gives them, naming the field at fault; a cron whose
 * ticks come closer than `MIN_SCHEDULE_INTERVAL_MS` is refused too (checked over its next ticks).
 */
export function checkCron(cron: string, timezone: string): void {
  if (!isTimeZone(timezone))
    throw invalidArgument("timezone", `is not a known time zone (an IANA name such as "Europe/Berlin")`);
  const fields = cron.trim().split(/\s+/);
  if (cron.trim() === "" || fields.length < 5 || fields.length > 6)
    throw invalidArgument("cron", "must have 5 fields, or 6 with seconds first");
  let expression;
  try {
    expression = parse(cron, timezone, new Date());
  } catch (err) {
    throw invalidArgument("cron", `is not a cron expression: ${err instanceof Error ? err.message : String(err)}`);
  }
  let previous: number | undefined;
  for (let i = 0; i < 5 && expression.hasNext(); i++) {
    const at = expression.next().getTime();
    if (previous !== undefined && at - previous < MIN_SCHEDULE_INTERVAL_MS)
      throw invalidArgument("cron", `must not tick more often than every ${MIN_SCHEDULE_INTERVAL_MS / 1000} s`);
    previous = at;
  }
}
