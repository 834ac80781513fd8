/**
 * The analytics explorer: the app's own QueryEvents, run by the admin API
 * for that app, drawn as one line per group (the top N, the rest summed as
 * "other") with per-group totals, listed as a table and exportable as CSV.
 *
 * Time zones: day, week and month buckets start at midnight in the chosen
 * zone (the API's `timezone`); hourly buckets are whole UTC hours, so no zone
 * is sent for them (the API refuses one) and only their labels are shown in
 * the zone. The zone field applies once typing stops, not per keystroke.
 */
import { useMemo, useRef, useState } from "react";
import { useQuery } from "@connectrpc/connect-query";
import { skipToken } from "@tanstack/react-query";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { listEventTypes, queryAnalytics } from "../../../gen/platform/admin/v1/admin-AdminService_connectquery.js";
import type { App } from "../../../gen/platform/admin/v1/admin_pb.js";
import { Interval, type Bucket } from "../../../gen/platform/analytics/v1/analytics_pb.js";
import { Empty, QueryView, useDebounced, usePages } from "../ui.tsx";
import { TimeChart } from "../chart.tsx";
import { bucketIndex, bucketStarts, type BucketUnit } from "../time-buckets.ts";

const RANGES = [
  { label: "Last 24 hours", hours: 24 },
  { label: "Last 7 days", hours: 24 * 7 },
  { label: "Last 30 days", hours: 24 * 30 },
  { label: "Last 365 days", hours: 24 * 365 },
  { label: "Custom range", hours: 0 },
];
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
const TOP_N = [5, 10, 20];
const NO_GROUP = "(none)";
const OTHER = "other";

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

/** `YYYY-MM-DDTHH:mm` for a datetime-local field, in the browser's zone. */
function localInput(ms: number): string {
  const d = new Date(ms - new Date(ms).getTimezoneOffset() * 60_000);
  return d.toISOString().slice(0, 16);
}

export function AnalyticsTab({ app }: { app: App }) {
  const types = useQuery(listEventTypes, { appId: app.id });
  const [type, setType] = useState("");
  const [hours, setHours] = useState(24 * 7);
  const [from, setFrom] = useState(() => localInput(Date.now() - 7 * 86_400_000));
  const [to, setTo] = useState(() => localInput(Date.now()));
  const [interval, setInterval] = useState(Interval.DAY);
  const [groupBy, setGroupBy] = useState("");
  const [topN, setTopN] = useState(10);
  const [zoneText, setZoneText] = useState(() => Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC");
  const typedZone = useDebounced(zoneText, 600);
  const zone = knownZone(typedZone);
  const chosen = type || types.data?.types[0]?.name || "";
  const properties = Object.keys(types.data?.types.find((t) => t.name === chosen)?.properties ?? {}).sort();

  let since: number;
  let until: number;
  let rangeProblem: string | undefined;
  if (hours > 0) {
    // The range ends at the next whole minute so that refetches share one key for a minute.
    until = Math.ceil(Date.now() / 60_000) * 60_000;
    since = until - hours * 3600_000;
  } else {
    since = new Date(from).getTime();
    until = new Date(to).getTime();
    if (!Number.isFinite(since) || !Number.isFinite(until)) rangeProblem = "Enter both the start and the end.";
    else if (since >= until) rangeProblem = "The start of the range must be before its end.";
  }
  // Hourly buckets are UTC hours: a zone would be refused, and the labels still show the chosen zone.
  const sentZone = interval === Interval.HOUR ? undefined : zone;
  const query = useQuery(
    queryAnalytics,
    chosen && zone && !rangeProblem
      ? {
          appId: app.id,
          type: chosen,
          since: timestampFromDate(new Date(since)),
          until: timestampFromDate(new Date(until)),
          interval,
          groupBy: groupBy || undefined,
          timezone: sentZone,
        }
      : skipToken,
    { refetchInterval: hours > 0 ? 10_000 : false, placeholderData: (previous) => previous },
  );
  // The zone the shown answer was bucketed in (the answer names its range and interval, not its zone):
  // while the next answer loads, the last one stays laid out as it was counted.
  const answeredZone = useRef("UTC");
  if (query.data && !query.isPlaceholderData) answeredZone.current = sentZone ?? "UTC";
  return (
    <>
      <form className="card filters" onSubmit={(e) => e.preventDefault()} aria-label="Analytics query">
        <label className="field">
          <span>Event type</span>
          <select
            value={chosen}
            onChange={(e) => (setType(e.target.value), setGroupBy(""))}
            disabled={!types.data?.types.length}
          >
            {(types.data?.types ?? []).map((t) => (
              <option key={t.name}>{t.name}</option>
            ))}
          </select>
        </label>
        <label className="field">
          <span>Range</span>
          <select value={hours} onChange={(e) => setHours(Number(e.target.value))}>
            {RANGES.map((r) => (
              <option key={r.hours} value={r.hours}>
                {r.label}
              </option>
            ))}
          </select>
        </label>
        {hours === 0 ? (
          <>
            <label className="field">
              <span>From (your browser's time)</span>
              <input type="datetime-local" value={from} onChange={(e) => setFrom(e.target.value)} />
            </label>
            <label className="field">
              <span>To (your browser's time)</span>
              <input type="datetime-local" value={to} onChange={(e) => setTo(e.target.value)} />
            </label>
          </>
        ) : null}
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
          <select value={groupBy} onChange={(e) => setGroupBy(e.target.value)}>
            <option value="">(none)</option>
            {properties.map((p) => (
              <option key={p}>{p}</option>
            ))}
          </select>
        </label>
        {groupBy ? (
          <label className="field">
            <span>Lines drawn</span>
            <select value={topN} onChange={(e) => setTopN(Number(e.target.value))}>
              {TOP_N.map((n) => (
                <option key={n} value={n}>
                  Top {n} and other
                </option>
              ))}
            </select>
          </label>
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
      </form>
      {rangeProblem ? (
        <p className="error" role="alert">
          {rangeProblem}
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
                    buckets={result.buckets}
                    total={Number(result.total)}
                    grouped={result.groupBy !== undefined}
                    topN={topN}
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

function Buckets({
  buckets,
  total,
  grouped,
  topN,
  zone,
  since,
  until,
  unit,
  bucketZone,
  fileName,
}: {
  buckets: Bucket[];
  total: number;
  grouped: boolean;
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
  const format = useMemo(
    () => new Intl.DateTimeFormat(undefined, { timeZone: zone, dateStyle: "medium", timeStyle: "short" }),
    [zone],
  );
  const { x, starts, series, totals } = useMemo(() => {
    // Every bucket of the range, answered or not (the API answers only buckets with events): hours
    // are UTC hours, days, weeks and months start in the zone the query was bucketed in.
    const layout = bucketStarts(since, until, unit, unit === "hour" ? "UTC" : bucketZone);
    const slot = bucketIndex(layout, unit);
    const times = layout.map((t) => t / 1000);
    const sums = new Map<string, number>();
    for (const b of buckets) sums.set(b.group ?? NO_GROUP, (sums.get(b.group ?? NO_GROUP) ?? 0) + Number(b.count));
    const totals = [...sums].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
    // The top N groups get a line each; the rest are summed into one "other" line.
    const drawn = totals.length > topN + 1 ? totals.slice(0, topN) : totals;
    const lineOf = new Map(drawn.map(([g], i) => [g, i]));
    const otherTotal = totals.slice(drawn.length).reduce((n, [, c]) => n + c, 0);
    const series = drawn.map(([g]) => ({ label: grouped ? g : "count", values: times.map(() => 0) }));
    const other = { label: `${OTHER} (${totals.length - drawn.length} groups)`, values: times.map(() => 0) };
    for (const b of buckets) {
      const line = lineOf.get(b.group ?? NO_GROUP);
      const at = b.at ? Number(b.at.seconds) * 1000 + Math.floor(b.at.nanos / 1e6) : since;
      (line === undefined ? other : series[line]).values[slot(at)] += Number(b.count);
    }
    if (otherTotal > 0) series.push(other);
    const shownTotals: [string, number][] = otherTotal > 0 ? [...drawn, [other.label, otherTotal]] : drawn;
    // A first bucket that began before the range is drawn where its counted part begins: the axis spans the range.
    const x = times.map((t) => Math.max(t, since / 1000));
    return { x, starts: times, series, totals: shownTotals };
  }, [buckets, grouped, topN, since, until, unit, bucketZone]);
  const range = useMemo((): [number, number] => [since / 1000, until / 1000], [since, until]);
  const { rows, pager } = usePages(buckets, 100);
  if (buckets.length === 0)
    return <Empty title="No events in this range">Widen the range, or log events of this type.</Empty>;
  const download = () => {
    const lines = [["bucket_start_utc", `bucket_start_${zone}`, "group", "count"].map(csvField).join(",")];
    for (const b of buckets) {
      const at = b.at ? timestampDate(b.at) : undefined;
      lines.push(
        [at?.toISOString() ?? "", at ? format.format(at) : "", b.group ?? "", String(b.count)].map(csvField).join(","),
      );
    }
    const url = URL.createObjectURL(new Blob([lines.join("\r\n") + "\r\n"], { type: "text/csv" }));
    const a = document.createElement("a");
    a.href = url;
    a.download = fileName;
    a.click();
    setTimeout(() => URL.revokeObjectURL(url), 0);
  };
  return (
    <>
      <div className="page-head">
        <p>
          <strong data-testid="analytics-total">{total.toLocaleString()}</strong> events
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
        label="Events per bucket"
        timeZone={zone}
      />
      {grouped ? (
        <div className="table-wrap">
          <table data-testid="group-totals">
            <caption>Totals per group</caption>
            <thead>
              <tr>
                <th scope="col">Group</th>
                <th scope="col" className="right">
                  Events
                </th>
              </tr>
            </thead>
            <tbody>
              {totals.map(([g, n]) => (
                <tr key={g}>
                  <td>{g}</td>
                  <td className="right">{n.toLocaleString()}</td>
                </tr>
              ))}
            </tbody>
          </table>
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
            </tr>
          </thead>
          <tbody>
            {rows.map((b, i) => (
              <tr key={i}>
                <td>{b.at ? format.format(timestampDate(b.at)) : "—"}</td>
                {grouped ? <td>{b.group ?? NO_GROUP}</td> : null}
                <td className="right">{Number(b.count).toLocaleString()}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {pager}
    </>
  );
}
