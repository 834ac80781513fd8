/**
 * The home screen: the platform at a glance (apps running and stopped, queue
 * backlog and dead letters, mail and tokens of the day), each facility's
 * requests of the last hour and day with their errors and a chart by hour,
 * the most active apps of the day, every dependency with its state, this
 * instance (version, uptime), and what needs attention across apps, each item
 * linking to the screen where it is dealt with. All of it is one GetOverview
 * call, refreshed with the page.
 */
import { useQuery } from "@connectrpc/connect-query";
import { getOverview } from "../../../gen/platform/admin/v1/admin-AdminService_connectquery.js";
import type { AttentionItem, GetOverviewResponse } from "../../../gen/platform/admin/v1/admin_pb.js";
import { Sparkline } from "../sparkline.tsx";
import { href, type AppTab } from "../router.ts";
import { Empty, QueryView } from "../ui.tsx";

/** Where each kind of attention item is dealt with. */
const TAB_OF: Record<string, AppTab> = {
  dead_letters: "queues",
  old_messages: "queues",
  cap_near: "usage",
  cap_reached: "usage",
  app_stopped: "settings",
  link_expiring: "secrets",
};

function formatUptime(seconds: number): string {
  const d = Math.floor(seconds / 86400);
  const h = Math.floor((seconds % 86400) / 3600);
  const m = Math.floor((seconds % 3600) / 60);
  if (d > 0) return `${d} d ${h} h`;
  if (h > 0) return `${h} h ${m} min`;
  return `${m} min`;
}

export function OverviewScreen() {
  const overview = useQuery(getOverview, {});
  return (
    <>
      <div className="page-head">
        <h1>Overview</h1>
      </div>
      <QueryView query={overview} what="the overview">
        {(o) => (
          <>
            <Figures o={o} />
            <Requests o={o} />
            <TopApps o={o} />
            <div className="overview">
              <section className="card" aria-labelledby="instance-heading">
                <h2 id="instance-heading">This instance</h2>
                <dl className="facts">
                  <dt>Version</dt>
                  <dd data-testid="version">{o.version}</dd>
                  <dt>Up for</dt>
                  <dd>{formatUptime(Number(o.uptimeSeconds))}</dd>
                </dl>
              </section>
              <section className="card" aria-labelledby="readiness-heading">
                <h2 id="readiness-heading">Dependencies</h2>
                <ul className="readiness">
                  {o.dependencies.map((d) => (
                    <li key={d.name} data-testid={`ready-${d.name}`}>
                      <span className={`badge ${d.ok ? "ok" : "stopped"}`}>
                        {d.state === "ok" ? "ready" : d.state === "embedded" ? "embedded" : "not ready"}
                      </span>{" "}
                      <strong>{d.name}</strong>
                      <span className="muted">
                        {" "}
                        · {d.provider}
                        {d.ok ? "" : ` · ${d.state}`}
                      </span>
                    </li>
                  ))}
                  {(o.dependencies.length > 0 ? [] : o.readiness).map((r) => (
                    <li key={r.name} data-testid={`ready-${r.name}`}>
                      <span className={`badge ${r.ok ? "ok" : "stopped"}`}>{r.ok ? "ready" : "not ready"}</span>{" "}
                      <strong>{r.name}</strong>
                      {r.detail ? <span className="muted"> · {r.detail}</span> : null}
                    </li>
                  ))}
                </ul>
              </section>
            </div>
            <section className="card" aria-labelledby="attention-heading">
              <h2 id="attention-heading">Needs attention</h2>
              {o.attention.length === 0 ? (
                <Empty title="Nothing needs attention">
                  Dead letters, old messages, apps near a daily cap, stopped apps and links about to expire show here.
                </Empty>
              ) : (
                <ul className="attention" data-testid="attention">
                  {o.attention.map((a, i) => (
                    <Attention key={i} item={a} />
                  ))}
                </ul>
              )}
            </section>
          </>
        )}
      </QueryView>
    </>
  );
}

const n = (v: bigint | number) => Number(v).toLocaleString();

/** A share as a percentage with one decimal, or a dash when nothing was counted. */
function rate(part: bigint, whole: bigint): string {
  if (whole === 0n) return "—";
  return `${((Number(part) / Number(whole)) * 100).toFixed(1)} %`;
}

function Figure({ label, value, detail, testId }: { label: string; value: string; detail: string; testId: string }) {
  return (
    <section className="card" aria-label={label}>
      <p className="muted figure-label">{label}</p>
      <p className="figure" data-testid={testId}>
        {value}
      </p>
      <p className="muted">{detail}</p>
    </section>
  );
}

function Figures({ o }: { o: GetOverviewResponse }) {
  return (
    <div className="figures">
      <Figure
        label="Apps"
        testId="apps-running"
        value={`${n(o.appsRunning)} running`}
        detail={`${n(o.appsStopped)} stopped`}
      />
      <Figure
        label="Queues"
        testId="queue-backlog"
        value={`${n(o.queueBacklog)} queued`}
        detail={`${n(o.deadLetters)} dead letter${o.deadLetters === 1n ? "" : "s"}, all apps`}
      />
      <Figure
        label={`Mail today (${o.day}, UTC)`}
        testId="mail-today"
        value={`${n(o.mailSentToday)} sent`}
        detail={`${n(o.mailFailedToday)} failed`}
      />
      <Figure
        label="Tokens today"
        testId="tokens-today"
        value={n(o.fastTokensToday + o.embedTokensToday)}
        detail={`${n(o.fastTokensToday)} generate, ${n(o.embedTokensToday)} embed`}
      />
    </div>
  );
}

/** Each facility's requests: the last hour, the last 24 hours by hour, and the share answered 4xx and 5xx. */
function Requests({ o }: { o: GetOverviewResponse }) {
  // The chart's last bar is the current hour, which ends at the next full hour.
  const endMs = Math.ceil(Date.now() / 3_600_000) * 3_600_000;
  return (
    <section className="card" aria-labelledby="requests-heading">
      <h2 id="requests-heading">Requests</h2>
      <p className="muted">
        App requests per facility (REST, Connect and gRPC), counted as they are answered; errors are of the last 24
        hours.
      </p>
      <div className="table-wrap">
        <table>
          <thead>
            <tr>
              <th scope="col">Facility</th>
              <th scope="col" className="right">
                Last hour
              </th>
              <th scope="col" className="right">
                Last 24 hours
              </th>
              <th scope="col" className="hide-narrow">
                By hour (24 h, UTC)
              </th>
              <th scope="col" className="right">
                4xx
              </th>
              <th scope="col" className="right">
                5xx
              </th>
            </tr>
          </thead>
          <tbody>
            {o.facilities.map((f) => (
              <tr key={f.facility} data-testid={`requests-${f.facility}`}>
                <th scope="row">{f.facility}</th>
                <td className="right" data-label="Last hour">
                  {n(f.requestsLastHour)}
                </td>
                <td className="right" data-label="Last 24 hours">
                  {n(f.requestsLastDay)}
                </td>
                <td className="hide-narrow">
                  <Sparkline values={f.hourly.map(Number)} label={`Requests per hour of ${f.facility}`} endMs={endMs} />
                </td>
                <td className="right" data-label="4xx" title={`${n(f.clientErrorsLastDay)} answered 4xx`}>
                  {rate(f.clientErrorsLastDay, f.requestsLastDay)}
                </td>
                <td className="right" data-label="5xx" title={`${n(f.serverErrorsLastDay)} answered 5xx`}>
                  {rate(f.serverErrorsLastDay, f.requestsLastDay)}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </section>
  );
}

function TopApps({ o }: { o: GetOverviewResponse }) {
  return (
    <section className="card" aria-labelledby="top-apps-heading">
      <h2 id="top-apps-heading">Most active apps today</h2>
      {o.topApps.length === 0 ? (
        <Empty title="No requests today">The apps with the most requests since midnight UTC show here.</Empty>
      ) : (
        <div className="table-wrap">
          <table data-testid="top-apps">
            <thead>
              <tr>
                <th scope="col">App</th>
                <th scope="col" className="right">
                  Requests
                </th>
                <th scope="col" className="right">
                  4xx
                </th>
                <th scope="col" className="right">
                  5xx
                </th>
              </tr>
            </thead>
            <tbody>
              {o.topApps.map((a) => (
                <tr key={a.appId}>
                  <td>
                    <a href={href({ screen: "app", appId: a.appId, tab: "usage" })}>{a.appName}</a>
                  </td>
                  <td className="right">{n(a.requests)}</td>
                  <td className="right">{rate(a.clientErrors, a.requests)}</td>
                  <td className="right">{rate(a.serverErrors, a.requests)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}

function Attention({ item }: { item: AttentionItem }) {
  const tab = TAB_OF[item.kind] ?? "settings";
  return (
    <li className={`attention-${item.severity === "critical" ? "critical" : "warning"}`} data-kind={item.kind}>
      <span className={`badge ${item.severity === "critical" ? "stopped" : "pending"}`}>
        {item.severity === "critical" ? "critical" : "warning"}
      </span>{" "}
      {item.appId ? (
        <a href={href({ screen: "app", appId: item.appId, tab })}>
          {item.appName}
          {item.subject ? ` · ${item.subject}` : ""}
        </a>
      ) : (
        <strong>{item.subject}</strong>
      )}
      : {item.message}
    </li>
  );
}
