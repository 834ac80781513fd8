/**
 * The analytics explorer: the app's own QueryEvents, run by the admin API
 * for that app, drawn as one line per group and listed as a table.
 */
import { useMemo, useState } from "react";
import { useQuery } from "@connectrpc/connect-query";
import { skipToken } from "@tanstack/react-query";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { listEventTypes, queryAnalytics } from "../../../gen/platform/admin/v1/admin-AdminService_connectquery.js";
import type { App } from "../../../gen/platform/admin/v1/admin_pb.js";
import { Interval, type Bucket } from "../../../gen/platform/analytics/v1/analytics_pb.js";
import { Empty, QueryView, usePages } from "../ui.tsx";
import { TimeChart } from "../chart.tsx";

const RANGES = [
  { label: "Last 24 hours", hours: 24 },
  { label: "Last 7 days", hours: 24 * 7 },
  { label: "Last 30 days", hours: 24 * 30 },
  { label: "Last 365 days", hours: 24 * 365 },
];
const INTERVALS = [
  { label: "Hour", value: Interval.HOUR },
  { label: "Day", value: Interval.DAY },
  { label: "Week", value: Interval.WEEK },
  { label: "Month", value: Interval.MONTH },
];

export function AnalyticsTab({ app }: { app: App }) {
  const types = useQuery(listEventTypes, { appId: app.id });
  const [type, setType] = useState("");
  const [hours, setHours] = useState(24 * 7);
  const [interval, setInterval] = useState(Interval.DAY);
  const [groupBy, setGroupBy] = useState("");
  const [timezone, setTimezone] = useState(() => Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC");
  const chosen = type || types.data?.types[0]?.name || "";
  const properties = Object.keys(types.data?.types.find((t) => t.name === chosen)?.properties ?? {}).sort();
  // The range ends at the next whole minute so that refetches share one key for a minute.
  const until = Math.ceil(Date.now() / 60_000) * 60_000;
  const query = useQuery(
    queryAnalytics,
    chosen
      ? {
          appId: app.id,
          type: chosen,
          since: timestampFromDate(new Date(until - hours * 3600_000)),
          until: timestampFromDate(new Date(until)),
          interval,
          groupBy: groupBy || undefined,
          timezone: timezone || undefined,
        }
      : skipToken,
    { refetchInterval: 10_000, placeholderData: (previous) => previous },
  );
  return (
    <>
      <form className="card filters" onSubmit={(e) => e.preventDefault()}>
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
        <label className="field">
          <span>Time zone</span>
          <input value={timezone} onChange={(e) => setTimezone(e.target.value)} placeholder="Europe/Paris" />
        </label>
      </form>
      <QueryView query={types} what="event types">
        {(t) =>
          t.types.length === 0 ? (
            <Empty title="No event types yet">
              The app registers event types (PUT /v1/analytics/event-types/:name) and logs events; they appear here.
            </Empty>
          ) : (
            <div className="card">
              <QueryView query={query} what="the buckets">
                {(result) => (
                  <Buckets
                    buckets={result.buckets}
                    total={Number(result.total)}
                    grouped={result.groupBy !== undefined}
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

function Buckets({ buckets, total, grouped }: { buckets: Bucket[]; total: number; grouped: boolean }) {
  const { x, series } = useMemo(() => {
    const times = [...new Set(buckets.map((b) => Number(b.at?.seconds ?? 0n)))].sort((a, b) => a - b);
    const groups = [...new Set(buckets.map((b) => b.group ?? "(none)"))];
    const index = new Map(times.map((t, i) => [t, i]));
    const series = groups.map((g) => ({ label: grouped ? g : "count", values: times.map(() => 0) }));
    for (const b of buckets) {
      const s = series[groups.indexOf(b.group ?? "(none)")];
      s.values[index.get(Number(b.at?.seconds ?? 0n))!] = Number(b.count);
    }
    return { x: times, series };
  }, [buckets, grouped]);
  const { rows, pager } = usePages(buckets, 100);
  if (buckets.length === 0)
    return <Empty title="No events in this range">Widen the range, or log events of this type.</Empty>;
  return (
    <>
      <p>
        <strong data-testid="analytics-total">{total.toLocaleString()}</strong> events
      </p>
      <TimeChart x={x} series={series} label="Events per bucket" />
      <div className="table-wrap">
        <table>
          <thead>
            <tr>
              <th scope="col">Bucket start</th>
              {grouped ? <th scope="col">Group</th> : null}
              <th scope="col" className="right">
                Count
              </th>
            </tr>
          </thead>
          <tbody>
            {rows.map((b, i) => (
              <tr key={i}>
                <td>{b.at ? timestampDate(b.at).toLocaleString() : "—"}</td>
                {grouped ? <td>{b.group ?? "(none)"}</td> : null}
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
