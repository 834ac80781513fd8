/**
 * The analytics explorer: the app's own QueryEvents and QueryFunnel, run by
 * the admin API for that app (QueryAnalytics, QueryAnalyticsFunnel).
 *
 * Trends: what to compute (events, unique users or values, the sum, average,
 * minimum or maximum of a number property), filter conditions, and one or two
 * breakdowns, drawn as one line per group; the groups beyond the chosen limit
 * are folded by the server into one "other" line (its answer says how many),
 * because unique counts and averages cannot be added up afterwards. Per-group
 * totals, the buckets as a table, and a CSV export. The funnel view is
 * `funnel.tsx`.
 *
 * Time zones: day, week and month buckets start at midnight in the chosen
 * zone (the API's `timezone`); hourly buckets are whole UTC hours, so no zone
 * is sent for them (the API refuses one) and only their labels are shown in
 * the zone. The zone field applies once typing stops, not per keystroke.
 */
import { useMemo, useRef } from "react";
import { useQuery } from "@connectrpc/connect-query";
import { skipToken, type UseQueryResult } from "@tanstack/react-query";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { listEventTypes, queryAnalytics } from "../../../gen/platform/admin/v1/admin-AdminService_connectquery.js";
import type { App, ListEventTypesResponse, QueryAnalyticsResponse } from "../../../gen/platform/admin/v1/admin_pb.js";
import { Aggregate, Interval, type Bucket } from "../../../gen/platform/analytics/v1/analytics_pb.js";
import { Empty, QueryView, useDebounced, usePages } from "../ui.tsx";
import { TimeChart } from "../chart.tsx";
import { bucketIndex, bucketStarts, type BucketUnit } from "../time-buckets.ts";
import {
  areDraftConditions,
  declaredKinds,
  NO_CONDITIONS,
  toConditions,
  type DraftCondition,
} from "../condition-drafts.ts";
import { ConditionsEditor } from "../conditions.tsx";
import { FunnelView } from "./funnel.tsx";
import { RANGES } from "../ranges.ts";
import { EventTypeSelect, RangeFields, rangeBounds, useRangeChoice } from "../range-fields.tsx";
import { formatValue } from "../format.ts";
import { jsonCodec, oneOfCodec, textCodec, useHashState, type HashCodec } from "../router.ts";

const INTERVALS = [
  { label: "Hour", value: Interval.HOUR },
  { label: "Day", value: Interval.DAY },
  { label: "Week", value: Interval.WEEK },
  { label: "Month", value: Interval.MONTH },
];
const UNITS = new Map<Interval, BucketUnit>([
  [Interval.HOUR, "hour"],
  [Interval.DAY, "day"],
  [Interval.WEEK, "week"],
  [Interval.MONTH, "month"],
]);
/** How many groups the server answers (its `limit`); the rest are one "other" group. */
const GROUP_LIMITS = [5, 10, 20, 50];
const NO_GROUP = "(none)";
const OTHER = "other";

type AggregateName = "count" | "unique" | "sum" | "avg" | "min" | "max";
const AGGREGATES: { name: AggregateName; label: string; value: Aggregate }[] = [
  { name: "count", label: "Events (count)", value: Aggregate.COUNT },
  { name: "unique", label: "Unique (users or values)", value: Aggregate.UNIQUE },
  { name: "sum", label: "Sum", value: Aggregate.SUM },
  { name: "avg", label: "Average", value: Aggregate.AVG },
  { name: "min", label: "Minimum", value: Aggregate.MIN },
  { name: "max", label: "Maximum", value: Aggregate.MAX },
];
/** The choices of the Trends view kept in the address (`useHashState`), so a chart can be reloaded and shared. */
const VIEW_CODEC = oneOfCodec(["trends", "funnel"] as const);
const INTERVAL_CODEC: HashCodec<Interval> = {
  parse: (text) => [...UNITS].find(([, unit]) => unit === text)?.[0],
  format: (interval) => UNITS.get(interval) ?? "day",
};
const MEASURE_CODEC = oneOfCodec(AGGREGATES.map((a) => a.name));
const LIMIT_CODEC = oneOfCodec(GROUP_LIMITS);
const CONDITIONS_CODEC = jsonCodec(areDraftConditions);

/** Sum, average, minimum and maximum take a number property. */
const NUMERIC = new Set<AggregateName>(["sum", "avg", "min", "max"]);

/** The zone when the runtime knows it, else undefined. */
export function knownZone(zone: string): string | undefined {
  const trimmed = zone.trim();
  if (trimmed === "") return undefined;
  try {
    return new Intl.DateTimeFormat("en", { timeZone: trimmed }).resolvedOptions().timeZone;
  } catch {
    return undefined;
  }
}

export function AnalyticsTab({ app }: { app: App }) {
  const types = useQuery(listEventTypes, { appId: app.id });
  const [view, setView] = useHashState("view", "trends", VIEW_CODEC);
  return (
    <>
      <div className="segmented" role="group" aria-label="Analytics view">
        <button type="button" aria-pressed={view === "trends"} onClick={() => setView("trends")}>
          Trends
        </button>
        <button type="button" aria-pressed={view === "funnel"} onClick={() => setView("funnel")}>
          Funnel
        </button>
      </div>
      {view === "trends" ? <TrendsView app={app} types={types} /> : <FunnelView app={app} types={types} />}
    </>
  );
}

/** What the answer's total says, after its figure: "events", "unique users", "sum of amount". */
function measureLabel(aggregate: AggregateName, of: string | undefined): string {
  switch (aggregate) {
    case "count":
      return "events";
    case "unique":
      return of ? `distinct values of ${of}` : "unique users";
    case "sum":
      return `sum of ${of}`;
    case "avg":
      return `average ${of}`;
    case "min":
      return `minimum ${of}`;
    case "max":
      return `maximum ${of}`;
  }
}

function TrendsView({ app, types }: { app: App; types: UseQueryResult<ListEventTypesResponse> }) {
  const [type, setType] = useHashState("type", "", textCodec);
  const [range, setRange] = useRangeChoice(24 * 7, "range", RANGES);
  const [interval, setInterval] = useHashState("interval", Interval.DAY, INTERVAL_CODEC);
  const [aggregate, setAggregate] = useHashState<AggregateName>("measure", "count", MEASURE_CODEC);
  const [of, setOf] = useHashState("of", "", textCodec);
  const [drafts, setDrafts] = useHashState<DraftCondition[]>("where", NO_CONDITIONS, CONDITIONS_CODEC);
  const [groupBy, setGroupBy] = useHashState("by", "", textCodec);
  const [thenBy, setThenBy] = useHashState("then", "", textCodec);
  const [limit, setLimit] = useHashState("limit", 10, LIMIT_CODEC);
  const [zoneText, setZoneText] = useHashState(
    "zone",
    () => Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC",
    textCodec,
  );
  const typedZone = useDebounced(zoneText, 600);
  const zone = knownZone(typedZone);
  // A value typed into a condition applies when typing stops, not per keystroke.
  const settledDrafts = useDebounced(drafts, 500);
  const chosen = type || types.data?.types[0]?.name || "";
  const eventType = types.data?.types.find((t) => t.name === chosen);
  const kinds = declaredKinds(eventType);
  const properties = kinds.map(([p]) => p);
  const numbers = kinds.filter(([, k]) => k === "number").map(([p]) => p);
  // `of`: any declared property (or, left empty, the users) for unique; a number property for the rest.
  const chosenOf = NUMERIC.has(aggregate)
    ? numbers.includes(of)
      ? of
      : numbers[0]
    : aggregate === "unique" && properties.includes(of)
      ? of
      : undefined;
  const where = toConditions(settledDrafts, eventType, (i) => `Filter ${i + 1}`);

  const bounds = rangeBounds(range);
  const { since, until } = bounds;
  let problem = bounds.problem;
  if (!problem && NUMERIC.has(aggregate) && eventType && !chosenOf)
    problem = `${chosen} declares no number property: sum, average, minimum and maximum need one.`;
  problem ??= where.problem;
  const breakdown = groupBy ? (thenBy && thenBy !== groupBy ? [groupBy, thenBy] : [groupBy]) : [];
  // Counts and sums of one breakdown add up, so every group is asked for (the CSV has them all) and the
  // smaller ones are summed here; unique counts, averages, minima and maxima do not add up, and two
  // breakdowns can have many groups: the server folds those beyond the limit.
  const foldsOnServer =
    breakdown.length === 2 || (breakdown.length === 1 && aggregate !== "count" && aggregate !== "sum");
  // Hourly buckets are UTC hours: a zone would be refused, and the labels still show the chosen zone.
  const sentZone = interval === Interval.HOUR ? undefined : zone;
  const query = useQuery(
    queryAnalytics,
    chosen && zone && !problem && where.conditions
      ? {
          appId: app.id,
          type: chosen,
          since: timestampFromDate(new Date(since)),
          until: timestampFromDate(new Date(until)),
          interval,
          // Leaving every extension out keeps the base count (and its answer's shape).
          aggregate:
            aggregate === "count" ? Aggregate.UNSPECIFIED : AGGREGATES.find((a) => a.name === aggregate)!.value,
          of: chosenOf,
          where: where.conditions,
          groupBy: breakdown.length === 1 ? breakdown[0] : undefined,
          groupByProperties: breakdown.length === 2 ? breakdown : [],
          limit: foldsOnServer ? limit : undefined,
          timezone: sentZone,
        }
      : skipToken,
    { refetchInterval: range.hours > 0 ? 10_000 : false, placeholderData: (previous) => previous },
  );
  // The zone the shown answer was bucketed in (the answer names its range and interval, not its zone):
  // while the next answer loads, the last one stays laid out as it was counted.
  const answeredZone = useRef("UTC");
  if (query.data && !query.isPlaceholderData) answeredZone.current = sentZone ?? "UTC";
  return (
    <>
      <form className="card" onSubmit={(e) => e.preventDefault()} aria-label="Analytics query">
        <div className="filters">
          <EventTypeSelect
            label="Event type"
            types={types.data?.types ?? []}
            value={chosen}
            onChange={(name) => (setType(name), setGroupBy(""), setThenBy(""), setOf(""), setDrafts([]))}
          />
          <label className="field">
            <span>Measure</span>
            <select value={aggregate} onChange={(e) => setAggregate(e.target.value as AggregateName)}>
              {AGGREGATES.map((a) => (
                <option key={a.name} value={a.name}>
                  {a.label}
                </option>
              ))}
            </select>
          </label>
          {aggregate !== "count" ? (
            <label className="field">
              <span>Of</span>
              <select value={chosenOf ?? ""} onChange={(e) => setOf(e.target.value)}>
                {aggregate === "unique" ? <option value="">users (distinctId)</option> : null}
                {(aggregate === "unique" ? properties : numbers).map((p) => (
                  <option key={p} value={p}>
                    {p}
                  </option>
                ))}
              </select>
            </label>
          ) : null}
          <RangeFields ranges={RANGES} value={range} onChange={setRange} />
          <label className="field">
            <span>Interval</span>
            <select value={interval} onChange={(e) => setInterval(Number(e.target.value))}>
              {INTERVALS.map((i) => (
                <option key={i.value} value={i.value}>
                  {i.label}
                </option>
              ))}
            </select>
          </label>
          <label className="field">
            <span>Group by</span>
            <select value={groupBy} onChange={(e) => (setGroupBy(e.target.value), e.target.value || setThenBy(""))}>
              <option value="">(none)</option>
              {properties.map((p) => (
                <option key={p}>{p}</option>
              ))}
            </select>
          </label>
          {groupBy ? (
            <>
              <label className="field">
                <span>Then by</span>
                <select value={thenBy === groupBy ? "" : thenBy} onChange={(e) => setThenBy(e.target.value)}>
                  <option value="">(none)</option>
                  {properties
                    .filter((p) => p !== groupBy)
                    .map((p) => (
                      <option key={p}>{p}</option>
                    ))}
                </select>
              </label>
              <label className="field">
                <span>Groups shown</span>
                <select value={limit} onChange={(e) => setLimit(Number(e.target.value))}>
                  {GROUP_LIMITS.map((n) => (
                    <option key={n} value={n}>
                      Top {n} and other
                    </option>
                  ))}
                </select>
              </label>
            </>
          ) : null}
          <label className="field">
            <span>Time zone</span>
            <input
              value={zoneText}
              onChange={(e) => setZoneText(e.target.value)}
              placeholder="Europe/Paris"
              aria-invalid={zone ? undefined : true}
              aria-describedby="zone-hint"
              autoComplete="off"
              spellCheck={false}
            />
            <small id="zone-hint" className={zone ? "muted" : "error-text"}>
              {!zone
                ? `"${typedZone}" is not a time zone this browser knows (for example Europe/Paris or UTC).`
                : interval === Interval.HOUR
                  ? "Hours are whole UTC hours, shown in this zone."
                  : "Days, weeks and months start at midnight here."}
            </small>
          </label>
        </div>
        <fieldset>
          <legend>Filters (all must hold)</legend>
          <ConditionsEditor drafts={drafts} onChange={setDrafts} type={eventType} name="Filter" addLabel="Add filter" />
        </fieldset>
      </form>
      {problem ? (
        <p className="error" role="alert">
          {problem}
        </p>
      ) : null}
      <QueryView query={types} what="event types">
        {(t) =>
          t.types.length === 0 ? (
            <Empty title="No event types yet">
              The app registers event types (<code>POST /v1/analytics/types</code>) and logs events (
              <code>POST /v1/analytics/events</code>); they appear here.
            </Empty>
          ) : (
            <div className="card">
              <QueryView query={query} what="the buckets">
                {(result) => (
                  <Buckets
                    result={result}
                    topN={limit}
                    zone={zone ?? "UTC"}
                    since={result.since ? timestampDate(result.since).getTime() : since}
                    until={result.until ? timestampDate(result.until).getTime() : until}
                    unit={UNITS.get(result.interval) ?? "day"}
                    bucketZone={answeredZone.current}
                    fileName={`${app.name}-${chosen}.csv`}
                  />
                )}
              </QueryView>
            </div>
          )
        }
      </QueryView>
    </>
  );
}

/** A CSV field: quoted when it holds a comma, a quote or a line break. */
const csvField = (text: string) => (/[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text);

const AGGREGATE_NAME = new Map<Aggregate, AggregateName>(AGGREGATES.map((a) => [a.value, a.name]));

/** One group of the answer over the whole range. */
interface GroupTotal {
  label: string;
  events: number;
  /** The aggregate over the group's events, when the buckets give it exactly (not for unique over several). */
  value: number | undefined;
  other: boolean;
}

/**
 * A group's aggregate over the range from its buckets: counts and sums add up,
 * an average is weighted by the events each bucket averaged, minima and
 * maxima are the least and greatest; unique counts do not add up (one user in
 * two buckets is one), so only a group with one bucket has its exact figure.
 */
function combine(aggregate: AggregateName, buckets: { value: number | null; count: number }[]): number | undefined {
  const valued = buckets.filter((b): b is { value: number; count: number } => b.value !== null);
  switch (aggregate) {
    case "count":
      return buckets.reduce((n, b) => n + b.count, 0);
    case "sum":
      return valued.reduce((n, b) => n + b.value, 0);
    case "avg": {
      const events = valued.reduce((n, b) => n + b.count, 0);
      return events > 0 ? valued.reduce((n, b) => n + b.value * b.count, 0) / events : undefined;
    }
    case "min":
      return valued.length ? Math.min(...valued.map((b) => b.value)) : undefined;
    case "max":
      return valued.length ? Math.max(...valued.map((b) => b.value)) : undefined;
    case "unique":
      return buckets.length === 1 ? (buckets[0].value ?? 0) : undefined;
  }
}

function Buckets({
  result,
  topN,
  zone,
  since,
  until,
  unit,
  bucketZone,
  fileName,
}: {
  result: QueryAnalyticsResponse;
  /** Groups drawn when the answer has them all (counts and sums); the rest are summed as "other". */
  topN: number;
  zone: string;
  /** The range asked for, epoch ms: every bucket it touches is drawn, with 0 where none was answered. */
  since: number;
  until: number;
  unit: BucketUnit;
  /** The zone the buckets were counted in (UTC for hours). */
  bucketZone: string;
  fileName: string;
}) {
  const buckets = result.buckets;
  const format = useMemo(
    () => new Intl.DateTimeFormat(undefined, { timeZone: zone, dateStyle: "medium", timeStyle: "short" }),
    [zone],
  );
  // The base count answers `count` only; an extension's answer carries each bucket's `value` too.
  const extended = result.aggregate !== Aggregate.UNSPECIFIED;
  const aggregate = AGGREGATE_NAME.get(result.aggregate) ?? "count";
  const properties = result.groupByProperties.length
    ? result.groupByProperties
    : result.groupBy
      ? [result.groupBy]
      : [];
  const grouped = properties.length > 0;
  const otherName = (n: number) => `${OTHER} (${n.toLocaleString()} ${n === 1 ? "group" : "groups"})`;
  const otherLabel = otherName(Number(result.otherGroups));
  const measure = measureLabel(aggregate, result.of);
  const { x, starts, series, totals, folded } = useMemo(() => {
    const groupOf = (b: Bucket) =>
      b.other
        ? otherLabel
        : result.groupByProperties.length
          ? b.groups.map((g) => g.value ?? NO_GROUP).join(" · ")
          : (b.group ?? NO_GROUP);
    const valueOf = (b: Bucket) => (extended ? (b.value ?? null) : Number(b.count));
    // Every bucket of the range, answered or not (the API answers only buckets with events): hours
    // are UTC hours, days, weeks and months start in the zone the query was bucketed in.
    const layout = bucketStarts(since, until, unit, unit === "hour" ? "UTC" : bucketZone);
    const slot = bucketIndex(layout, unit);
    const times = layout.map((t) => t / 1000);
    const byGroup = new Map<string, { value: number | null; count: number }[]>();
    for (const b of buckets) {
      const g = groupOf(b);
      if (!byGroup.has(g)) byGroup.set(g, []);
      byGroup.get(g)!.push({ value: valueOf(b), count: Number(b.count) });
    }
    let totals: GroupTotal[] = [...byGroup].map(([label, bs]) => ({
      label,
      events: bs.reduce((n, b) => n + b.count, 0),
      value: combine(aggregate, bs),
      other: label === otherLabel,
    }));
    // Largest first (the server ranked them so when it chose which to keep); "other" last.
    const rank = (g: GroupTotal) => g.value ?? g.events;
    totals.sort((a, b) => Number(a.other) - Number(b.other) || rank(b) - rank(a) || a.label.localeCompare(b.label));
    // An answer with every group of a count or a sum: the top N get a line each, the rest are summed into one.
    const lineLabel = new Map<string, string>();
    let folded = 0;
    if (!totals.some((g) => g.other) && (aggregate === "count" || aggregate === "sum") && totals.length > topN + 1) {
      const rest = totals.slice(topN);
      folded = rest.length;
      const label = otherName(folded);
      for (const g of rest) lineLabel.set(g.label, label);
      totals = [
        ...totals.slice(0, topN),
        {
          label,
          events: rest.reduce((n, g) => n + g.events, 0),
          value: rest.reduce((n, g) => n + (g.value ?? 0), 0),
          other: true,
        },
      ];
    }
    // A bucket without events is 0 events, users or sum; it has no average, minimum or maximum (a gap).
    const empty = aggregate === "count" || aggregate === "sum" || aggregate === "unique" ? 0 : null;
    const lineOf = new Map(totals.map((g, i) => [g.label, i]));
    const series = totals.map((g) => ({
      label: grouped ? g.label : measure,
      values: times.map((): number | null => empty),
    }));
    for (const b of buckets) {
      const g = groupOf(b);
      const line = series[lineOf.get(lineLabel.get(g) ?? g)!];
      const at = b.at ? Number(b.at.seconds) * 1000 + Math.floor(b.at.nanos / 1e6) : since;
      const i = slot(at);
      const v = valueOf(b);
      // Two answered buckets in one laid-out slot (a summer-time edge) add up where the measure adds up.
      line.values[i] = empty === 0 && line.values[i] !== null && v !== null ? line.values[i] + v : v;
    }
    // A first bucket that began before the range is drawn where its counted part begins: the axis spans the range.
    const x = times.map((t) => Math.max(t, since / 1000));
    return { x, starts: times, series, totals, folded };
  }, [buckets, result, extended, aggregate, grouped, measure, otherLabel, topN, since, until, unit, bucketZone]);
  const range = useMemo((): [number, number] => [since / 1000, until / 1000], [since, until]);
  const { rows, pager } = usePages(buckets, 100);
  if (buckets.length === 0)
    return (
      <Empty title="No events in this range">Widen the range, loosen the filters, or log events of this type.</Empty>
    );
  const total = extended ? result.totalValue : Number(result.total);
  const otherGroups = Number(result.otherGroups) + folded;
  const groupCells = (b: Bucket) =>
    b.other
      ? [otherLabel]
      : result.groupByProperties.length
        ? b.groups.map((g) => g.value ?? NO_GROUP)
        : [b.group ?? NO_GROUP];
  const download = () => {
    const head = [
      "bucket_start_utc",
      `bucket_start_${zone}`,
      ...(result.groupByProperties.length ? properties : ["group"]),
      "count",
    ];
    // The measure's own column, unless it is the count already there.
    const valued = extended && aggregate !== "count";
    const lines = [[...head, ...(valued ? [aggregate] : [])].map(csvField).join(",")];
    for (const b of buckets) {
      const at = b.at ? timestampDate(b.at) : undefined;
      const groups = grouped
        ? b.other
          ? properties.map(() => OTHER)
          : groupCells(b).map((g) => (g === NO_GROUP ? "" : g))
        : [""];
      lines.push(
        [
          at?.toISOString() ?? "",
          at ? format.format(at) : "",
          ...groups,
          String(b.count),
          ...(valued ? [b.value === undefined ? "" : String(b.value)] : []),
        ]
          .map(csvField)
          .join(","),
      );
    }
    const url = URL.createObjectURL(new Blob([lines.join("\r\n") + "\r\n"], { type: "text/csv" }));
    const a = document.createElement("a");
    a.href = url;
    a.download = fileName;
    a.click();
    setTimeout(() => URL.revokeObjectURL(url), 0);
  };
  const measureTitle = measure[0].toUpperCase() + measure.slice(1);
  return (
    <>
      <div className="page-head">
        <p>
          <strong data-testid="analytics-total">{total === undefined ? "—" : formatValue(total)}</strong> {measure}
          {aggregate !== "count" ? (
            <span className="muted">
              {" "}
              over <span data-testid="analytics-events">{Number(result.total).toLocaleString()}</span> events
            </span>
          ) : null}
          {otherGroups > 0 ? (
            <span className="muted">
              {" "}
              · {otherGroups.toLocaleString()} more {otherGroups === 1 ? "group" : "groups"} shown as “other”
            </span>
          ) : null}
        </p>
        <button type="button" className="secondary" onClick={download}>
          Export CSV
        </button>
      </div>
      <TimeChart
        x={x}
        starts={starts}
        range={range}
        unit={unit}
        series={series}
        label={aggregate === "count" ? "Events per bucket" : `${measureTitle} per bucket`}
        timeZone={zone}
        integers={aggregate === "count" || aggregate === "unique"}
      />
      {grouped ? (
        <div className="table-wrap">
          <table data-testid="group-totals">
            <caption>Totals per group</caption>
            <thead>
              <tr>
                <th scope="col">{properties.join(" · ")}</th>
                <th scope="col" className="right">
                  Events
                </th>
                {aggregate !== "count" ? (
                  <th scope="col" className="right">
                    {measureTitle}
                  </th>
                ) : null}
              </tr>
            </thead>
            <tbody>
              {totals.map((g) => (
                <tr key={g.label} className={g.other ? "other-group" : undefined}>
                  <td>{g.label}</td>
                  <td className="right">{g.events.toLocaleString()}</td>
                  {aggregate !== "count" ? (
                    <td className="right">{g.value === undefined ? "—" : formatValue(g.value)}</td>
                  ) : null}
                </tr>
              ))}
            </tbody>
          </table>
          {aggregate === "unique" && totals.some((g) => g.value === undefined) ? (
            <p className="muted">
              — : a group seen in several buckets has no range-wide unique count here (one user in two buckets is one
              user, so the buckets do not add up); the total above is unique over the whole range.
            </p>
          ) : null}
        </div>
      ) : null}
      <div className="table-wrap">
        <table data-testid="buckets">
          <caption className="sr-only">Buckets</caption>
          <thead>
            <tr>
              <th scope="col">Bucket start ({zone})</th>
              {grouped ? <th scope="col">Group</th> : null}
              <th scope="col" className="right">
                Count
              </th>
              {aggregate !== "count" ? (
                <th scope="col" className="right">
                  {measureTitle}
                </th>
              ) : null}
            </tr>
          </thead>
          <tbody>
            {rows.map((b, i) => (
              <tr key={i}>
                <td>{b.at ? format.format(timestampDate(b.at)) : "—"}</td>
                {grouped ? <td>{groupCells(b).join(" · ")}</td> : null}
                <td className="right">{Number(b.count).toLocaleString()}</td>
                {aggregate !== "count" ? (
                  <td className="right">{b.value === undefined ? "—" : formatValue(b.value)}</td>
                ) : null}
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {pager}
    </>
  );
}
