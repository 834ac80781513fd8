/**
 * mingo's `$dateTrunc` with a `timezone` truncates in UTC and then shifts,
 * which is not what MongoDB does. Tests that run the MongoDB store's pipelines
 * on mingo use this context instead: zoned day, week (from Monday) and month
 * truncation done on the zone's wall clock (the instant of the local midnight
 * that starts the bucket), and mingo's own operator for everything else.
 */
import { Aggregator } from "mingo/aggregator";
import { Context, evalExpr } from "mingo/core";
import * as accumulator from "mingo/operators/accumulator";
import * as expression from "mingo/operators/expression";
import { $dateTrunc } from "mingo/operators/expression/date";
import * as pipeline from "mingo/operators/pipeline";
import * as projection from "mingo/operators/projection";
import * as query from "mingo/operators/query";
import { isUtc } from "../../src/analytics/buckets.ts";

type Options = Parameters<typeof $dateTrunc>[2];

const formatters = new Map<string, Intl.DateTimeFormat>();
function wall(ms: number, zone: string) {
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
    formatters.set(zone, f);
  }
  const parts = Object.fromEntries(f.formatToParts(new Date(ms)).map((p) => [p.type, p.value]));
  return {
    y: Number(parts.year),
    mo: Number(parts.month),
    d: Number(parts.day),
    h: Number(parts.hour),
    mi: Number(parts.minute),
    s: Number(parts.second),
  };
}

/** The zone's offset at an instant, in ms (local wall clock less UTC). */
function offsetAt(ms: number, zone: string): number {
  const w = wall(ms, zone);
  return Date.UTC(w.y, w.mo - 1, w.d, w.h, w.mi, w.s) - Math.floor(ms / 1000) * 1000;
}

/** The instant of a local midnight (`Date.UTC` of the wall date), found in two steps across an offset change. */
function instantOfWallMidnight(utcWall: number, zone: string): number {
  let guess = utcWall - offsetAt(utcWall, zone);
  guess = utcWall - offsetAt(guess, zone);
  return guess;
}

export function zonedTrunc(ms: number, unit: string, zone: string): number {
  const w = wall(ms, zone);
  switch (unit) {
    case "day":
      return instantOfWallMidnight(Date.UTC(w.y, w.mo - 1, w.d), zone);
    case "week": {
      const dow = new Date(Date.UTC(w.y, w.mo - 1, w.d)).getUTCDay();
      return instantOfWallMidnight(Date.UTC(w.y, w.mo - 1, w.d - ((dow + 6) % 7)), zone);
    }
    case "month":
      return instantOfWallMidnight(Date.UTC(w.y, w.mo - 1, 1), zone);
    default:
      throw new Error(`zoned ${unit} truncation is not needed by the stores`);
  }
}

/**
 * mingo's operators with `$dateTrunc` replaced. The first context given an operator keeps it (mingo's
 * `aggregate` puts its own first), so pipelines run through `zonedAggregate`, not `aggregate`.
 */
const ZONED_CONTEXT = Context.init({
  accumulator,
  pipeline,
  projection,
  query,
  expression: {
    ...expression,
    $dateTrunc: (obj: unknown, expr: unknown, options: Options) => {
      const args = evalExpr(obj, expr, options) as {
        date: Date;
        unit: string;
        timezone?: string;
      };
      if (args.timezone === undefined || isUtc(args.timezone))
        return $dateTrunc(obj as Record<string, unknown>, expr, options);
      return new Date(zonedTrunc(args.date.getTime(), args.unit, args.timezone));
    },
  },
});

/** Runs a pipeline on mingo with zoned `$dateTrunc` done as MongoDB does it. */
export function zonedAggregate<T>(docs: readonly object[], stages: object[]): T[] {
  return new Aggregator(stages as Record<string, unknown>[], { context: ZONED_CONTEXT }).run(
    docs as Record<string, unknown>[],
  ) as T[];
}
