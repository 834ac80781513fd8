/**
 * The audit log: every change an operator made (never a value), newest first,
 * filtered by app, operator, action and time, a page at a time.
 */
import { useState } from "react";
import { useQuery } from "@connectrpc/connect-query";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { listAuditEntries, listOperators } from "../../../gen/platform/admin/v1/admin-AdminService_connectquery.js";
import { Empty, QueryView, useDebounced } from "../ui.tsx";
import { formatTime } from "../format.ts";
import { AUDIT_FILTER_ACTIONS } from "../audit-actions.ts";

export function AuditScreen() {
  const operators = useQuery(listOperators, {});
  const [appText, setAppText] = useState("");
  const app = useDebounced(appText.trim(), 500);
  const [operatorId, setOperatorId] = useState("");
  const [action, setAction] = useState("");
  const [since, setSince] = useState("");
  const [until, setUntil] = useState("");
  // The page tokens walked so far: "Newer" goes back one.
  const [pages, setPages] = useState<string[]>([""]);
  const filters = { app, operatorId, action, since, until };
  const [lastFilters, setLastFilters] = useState(JSON.stringify(filters));
  if (lastFilters !== JSON.stringify(filters)) {
    setLastFilters(JSON.stringify(filters));
    setPages([""]);
  }
  const pageToken = pages[pages.length - 1];
  const entries = useQuery(
    listAuditEntries,
    {
      appId: app || undefined,
      operatorId: operatorId || undefined,
      action: action || undefined,
      since: since ? timestampFromDate(new Date(since)) : undefined,
      until: until ? timestampFromDate(new Date(until)) : undefined,
      pageSize: 50,
      pageToken,
    },
    { placeholderData: (previous) => previous },
  );
  return (
    <>
      <div className="page-head">
        <h1>Audit log</h1>
      </div>
      <form className="card filters" onSubmit={(e) => e.preventDefault()} aria-label="Audit filters">
        <label className="field">
          <span>App (name or id)</span>
          <input value={appText} onChange={(e) => setAppText(e.target.value)} autoComplete="off" />
        </label>
        <label className="field">
          <span>Operator</span>
          <select value={operatorId} onChange={(e) => setOperatorId(e.target.value)}>
            <option value="">(anyone)</option>
            {(operators.data?.operators ?? []).map((o) => (
              <option key={o.id} value={o.id}>
                {o.name}
              </option>
            ))}
          </select>
        </label>
        <label className="field">
          <span>Action</span>
          <select value={action} onChange={(e) => setAction(e.target.value)}>
            <option value="">(any)</option>
            {AUDIT_FILTER_ACTIONS.map((a) => (
              <option key={a}>{a}</option>
            ))}
          </select>
        </label>
        <label className="field">
          <span>From (your browser's time)</span>
          <input type="datetime-local" value={since} onChange={(e) => setSince(e.target.value)} />
        </label>
        <label className="field">
          <span>To (your browser's time)</span>
          <input type="datetime-local" value={until} onChange={(e) => setUntil(e.target.value)} />
        </label>
      </form>
      <div className="card">
        <QueryView query={entries} what="the audit log">
          {(data) =>
            data.entries.length === 0 ? (
              <Empty title="No audit entries">
                Every change made through AdminService, the CLI or this dashboard is recorded here, with its operator.
              </Empty>
            ) : (
              <>
                <div className="table-wrap">
                  <table className="stack-narrow" data-testid="audit">
                    <caption className="sr-only">Audit entries</caption>
                    <thead>
                      <tr>
                        <th scope="col">When</th>
                        <th scope="col">Operator</th>
                        <th scope="col">Action</th>
                        <th scope="col">App</th>
                        <th scope="col">Outcome</th>
                        <th scope="col">Detail</th>
                      </tr>
                    </thead>
                    <tbody>
                      {data.entries.map((e) => (
                        <tr key={e.id}>
                          <td data-label="When" className="nowrap">
                            {formatTime(e.at)}
                          </td>
                          <td data-label="Operator">{e.operatorName || e.operatorId}</td>
                          <td data-label="Action">
                            <code>{e.action}</code>
                          </td>
                          <td data-label="App">
                            {e.appId ? <a href={`#/apps/${e.appId}/settings`}>{e.appName || e.appId}</a> : "—"}
                          </td>
                          <td data-label="Outcome">
                            <span className={`badge ${e.outcome === "ok" ? "ok" : "stopped"}`}>{e.outcome}</span>
                          </td>
                          <td data-label="Detail">
                            <code className="detail">{e.detail ? JSON.stringify(e.detail) : ""}</code>
                            {e.requestId ? <span className="muted"> · request {e.requestId}</span> : null}
                          </td>
                        </tr>
                      ))}
                    </tbody>
                  </table>
                </div>
                <nav className="pager" aria-label="Audit pages">
                  <button
                    type="button"
                    className="secondary"
                    disabled={pages.length === 1}
                    onClick={() => setPages(pages.slice(0, -1))}
                  >
                    Newer
                  </button>
                  <span>Page {pages.length}</span>
                  <button
                    type="button"
                    className="secondary"
                    disabled={!data.nextPageToken}
                    onClick={() => setPages([...pages, data.nextPageToken])}
                  >
                    Older
                  </button>
                </nav>
              </>
            )
          }
        </QueryView>
      </div>
    </>
  );
}
