/**
 * The home screen: this instance (version, uptime), the readiness of each
 * dependency, and what needs attention across apps, each item linking to the
 * screen where it is dealt with.
 */
import { useQuery } from "@connectrpc/connect-query";
import { getOverview } from "../../../gen/platform/admin/v1/admin-AdminService_connectquery.js";
import type { AttentionItem } from "../../../gen/platform/admin/v1/admin_pb.js";
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
                  {o.readiness.map((r) => (
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
