/** Apps: every app with its status and today's use, a filter, and "create". */
import { useMemo, useState } from "react";
import { useMutation, useQuery } from "@connectrpc/connect-query";
import { useQueryClient } from "@tanstack/react-query";
import { createApp, listApps } from "../../../gen/platform/admin/v1/admin-AdminService_connectquery.js";
import { AppStatus, type App, type AppUsageToday, type UsageCounter } from "../../../gen/platform/admin/v1/admin_pb.js";
import { navigate } from "../router.ts";
import { Empty, ErrorBox, QueryView, usePages } from "../ui.tsx";
import { formatTime } from "../format.ts";

export function AppsScreen() {
  const apps = useQuery(listApps, {});
  const [filter, setFilter] = useState("");
  return (
    <>
      <div className="page-head">
        <h1>Apps</h1>
      </div>
      <CreateApp />
      <QueryView query={apps} what="apps">
        {(data) =>
          data.apps.length === 0 ? (
            <Empty title="No apps yet">Create the first app above; then issue it a token on its Tokens tab.</Empty>
          ) : (
            <>
              <label className="field inline">
                <span>Filter</span>
                <input
                  type="search"
                  value={filter}
                  onChange={(e) => setFilter(e.target.value)}
                  placeholder="app name"
                />
              </label>
              <AppTable
                apps={data.apps.filter((a) => a.name.toLowerCase().includes(filter.trim().toLowerCase()))}
                usage={data.usageToday}
                filter={filter.trim().toLowerCase()}
              />
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

function AppTable({ apps, usage, filter }: { apps: App[]; usage: AppUsageToday[]; filter: string }) {
  const byApp = useMemo(() => new Map(usage.map((u) => [u.appId, u])), [usage]);
  const { rows, pager } = usePages(apps, 50, filter);
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
            {rows.map((app) => {
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
      {pager}
    </>
  );
}

export function StatusBadge({ status }: { status: AppStatus }) {
  const running = status === AppStatus.RUNNING;
  return <span className={`badge ${running ? "ok" : "stopped"}`}>{running ? "running" : "stopped"}</span>;
}
