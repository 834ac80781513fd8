/** Apps: a page of apps with their status and today's use; filter, status, sort; and "create". */
import { useMemo, useState } from "react";
import { useMutation, useQuery } from "@connectrpc/connect-query";
import { useQueryClient } from "@tanstack/react-query";
import { createApp, listApps } from "../../../gen/platform/admin/v1/admin-AdminService_connectquery.js";
import { AppStatus, type App, type AppUsageToday, type UsageCounter } from "../../../gen/platform/admin/v1/admin_pb.js";
import { navigate } from "../router.ts";
import { Empty, ErrorBox, QueryView, useDebounced } from "../ui.tsx";
import { useOperator } from "../operator.ts";
import { formatTime } from "../format.ts";

const PAGE_SIZE = 50;
const ORDERS = [
  { value: "name", label: "Name, A to Z" },
  { value: "-name", label: "Name, Z to A" },
  { value: "-created_at", label: "Newest first" },
  { value: "created_at", label: "Oldest first" },
];

/**
 * The list is paged, sorted and filtered by the server (ListApps with
 * page_size): a page of 50 travels every refresh, not every app. A new
 * filter, status or order starts again from page 1.
 */
export function AppsScreen() {
  const { canWrite } = useOperator();
  const [filterText, setFilterText] = useState("");
  const filter = useDebounced(filterText.trim(), 300);
  const [status, setStatus] = useState<AppStatus | undefined>(undefined);
  const [orderBy, setOrderBy] = useState("name");
  // The page tokens walked so far (the first page's is ""): Previous goes back one.
  const [tokens, setTokens] = useState<string[]>([""]);
  const key = JSON.stringify([filter, status, orderBy]);
  const [lastKey, setLastKey] = useState(key);
  if (lastKey !== key) {
    setLastKey(key);
    setTokens([""]);
  }
  const apps = useQuery(
    listApps,
    {
      pageSize: PAGE_SIZE,
      pageToken: tokens[tokens.length - 1],
      filter: filter || undefined,
      status,
      orderBy,
    },
    { placeholderData: (previous) => previous },
  );
  const narrowed = filter !== "" || status !== undefined;
  return (
    <>
      <div className="page-head">
        <h1>Apps</h1>
      </div>
      {canWrite ? <CreateApp /> : null}
      <form className="card filters" onSubmit={(e) => e.preventDefault()} aria-label="Find apps">
        <label className="field">
          <span>Filter</span>
          <input
            type="search"
            value={filterText}
            onChange={(e) => setFilterText(e.target.value)}
            placeholder="part of the name"
            autoComplete="off"
          />
        </label>
        <label className="field">
          <span>Status</span>
          <select
            value={status ?? ""}
            onChange={(e) => setStatus(e.target.value === "" ? undefined : Number(e.target.value))}
          >
            <option value="">(any)</option>
            <option value={AppStatus.RUNNING}>running</option>
            <option value={AppStatus.STOPPED}>stopped</option>
          </select>
        </label>
        <label className="field">
          <span>Sort</span>
          <select value={orderBy} onChange={(e) => setOrderBy(e.target.value)}>
            {ORDERS.map((o) => (
              <option key={o.value} value={o.value}>
                {o.label}
              </option>
            ))}
          </select>
        </label>
      </form>
      <QueryView query={apps} what="apps">
        {(data) =>
          data.apps.length === 0 ? (
            narrowed ? (
              <Empty title="No app matches">Change the filter or the status.</Empty>
            ) : (
              <Empty title="No apps yet">Create the first app above; then issue it a token on its Tokens tab.</Empty>
            )
          ) : (
            <>
              <AppTable apps={data.apps} usage={data.usageToday} />
              {data.totalSize > PAGE_SIZE ? (
                <nav className="pager" aria-label="Pages">
                  <button
                    type="button"
                    className="secondary"
                    disabled={tokens.length === 1}
                    onClick={() => setTokens(tokens.slice(0, -1))}
                  >
                    Previous
                  </button>
                  <span>
                    Page {tokens.length} of {Math.ceil(data.totalSize / PAGE_SIZE)} ({data.totalSize.toLocaleString()}{" "}
                    in all)
                  </span>
                  <button
                    type="button"
                    className="secondary"
                    disabled={!data.nextPageToken}
                    onClick={() => setTokens([...tokens, data.nextPageToken])}
                  >
                    Next
                  </button>
                </nav>
              ) : null}
            </>
          )
        }
      </QueryView>
    </>
  );
}

function CreateApp() {
  const [name, setName] = useState("");
  const queryClient = useQueryClient();
  const create = useMutation(createApp, {
    onSuccess: async (res) => {
      setName("");
      await queryClient.invalidateQueries();
      if (res.app) navigate({ screen: "app", appId: res.app.id, tab: "settings" });
    },
  });
  return (
    <form
      className="card row-form"
      onSubmit={(e) => {
        e.preventDefault();
        create.mutate({ name: name.trim() });
      }}
    >
      <label className="field">
        <span>New app name</span>
        <input value={name} onChange={(e) => setName(e.target.value)} placeholder="my-app" autoComplete="off" />
      </label>
      <button type="submit" disabled={create.isPending || name.trim() === ""}>
        Create app
      </button>
      {create.error ? <ErrorBox error={create.error} title="Not created" /> : null}
    </form>
  );
}

/** "used / cap"; an app with no use today has no counter, so its cap comes from its limits. */
function ratio(c: UsageCounter | undefined, cap: number | undefined): string {
  return `${Number(c?.used ?? 0).toLocaleString()} / ${Number(c?.cap ?? cap ?? 0).toLocaleString()}`;
}

function AppTable({ apps, usage }: { apps: App[]; usage: AppUsageToday[] }) {
  const byApp = useMemo(() => new Map(usage.map((u) => [u.appId, u])), [usage]);
  return (
    <>
      <div className="table-wrap">
        <table>
          <caption className="sr-only">Apps</caption>
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Status</th>
              <th scope="col">Events today</th>
              <th scope="col">Mail today</th>
              <th scope="col" className="hide-narrow">
                Tokens (fast / embed)
              </th>
              <th scope="col" className="hide-narrow">
                Created
              </th>
            </tr>
          </thead>
          <tbody>
            {apps.map((app) => {
              const u = byApp.get(app.id);
              return (
                <tr key={app.id}>
                  <td>
                    <a href={`#/apps/${app.id}/settings`}>{app.name}</a>
                  </td>
                  <td>
                    <StatusBadge status={app.status} />
                  </td>
                  <td>{ratio(u?.events, app.limits?.eventsPerDay)}</td>
                  <td>{ratio(u?.mail, app.limits?.mailPerDay)}</td>
                  <td className="hide-narrow">
                    {Number(u?.fastTokens?.used ?? 0).toLocaleString()} /{" "}
                    {Number(u?.embedTokens?.used ?? 0).toLocaleString()}
                  </td>
                  <td className="hide-narrow">{formatTime(app.createdAt)}</td>
                </tr>
              );
            })}
          </tbody>
        </table>
      </div>
    </>
  );
}

export function StatusBadge({ status }: { status: AppStatus }) {
  const running = status === AppStatus.RUNNING;
  return <span className={`badge ${running ? "ok" : "stopped"}`}>{running ? "running" : "stopped"}</span>;
}
