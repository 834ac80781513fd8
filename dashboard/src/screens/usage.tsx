/** Usage: today's use against each cap, and the last 30 days per counter. */
import { useMemo } from "react";
import { useQuery } from "@connectrpc/connect-query";
import { getUsage, getUsageHistory } from "../../../gen/platform/admin/v1/admin-AdminService_connectquery.js";
import type { App, UsageDay } from "../../../gen/platform/admin/v1/admin_pb.js";
import { Meter, QueryView } from "../ui.tsx";
import { TimeChart } from "../chart.tsx";

const COUNTERS = [
  { key: "events", label: "Events" },
  { key: "mail", label: "Mail" },
  { key: "fastTokens", label: "Fast model tokens" },
  { key: "embedTokens", label: "Embedding tokens" },
] as const;

export function UsageTab({ app }: { app: App }) {
  const today = useQuery(getUsage, { appId: app.id });
  const history = useQuery(getUsageHistory, { appId: app.id, days: 30 }, { refetchInterval: 60_000 });
  return (
    <>
      <div className="card">
        <QueryView query={today} what="today's usage">
          {(u) => (
            <>
              <h2>Today ({u.day}, UTC)</h2>
              <div className="meters">
                {COUNTERS.map((c) => (
                  <Meter
                    key={c.key}
                    label={c.label}
                    used={Number(u[c.key]?.used ?? 0)}
                    cap={Number(u[c.key]?.cap ?? 0)}
                  />
                ))}
              </div>
            </>
          )}
        </QueryView>
      </div>
      <div className="card">
        <h2>Last 30 days (UTC days)</h2>
        <QueryView query={history} what="the usage history">
          {(h) => <HistoryCharts days={h.days} />}
        </QueryView>
      </div>
    </>
  );
}

function HistoryCharts({ days }: { days: UsageDay[] }) {
  const x = useMemo(() => days.map((d) => Date.parse(`${d.day}T00:00:00Z`) / 1000), [days]);
  const series = useMemo(
    () => ({
      volume: [
        { label: "Events", values: days.map((d) => Number(d.events)) },
        { label: "Mail", values: days.map((d) => Number(d.mail)) },
      ],
      tokens: [
        { label: "Fast model tokens", values: days.map((d) => Number(d.fastTokens)) },
        { label: "Embedding tokens", values: days.map((d) => Number(d.embedTokens)) },
      ],
    }),
    [days],
  );
  return (
    <div className="charts">
      <TimeChart
        x={x}
        series={series.volume}
        height={220}
        label="Events and mail per day, last 30 days"
        timeZone="UTC"
        unit="day"
      />
      <TimeChart
        x={x}
        series={series.tokens}
        height={220}
        label="Model tokens per day, last 30 days"
        timeZone="UTC"
        unit="day"
      />
    </div>
  );
}
