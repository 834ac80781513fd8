/** One app: its name and status, stop/start and delete, and a tab per facility. */
import { useState } from "react";
import { useMutation, useQuery } from "@connectrpc/connect-query";
import { useQueryClient } from "@tanstack/react-query";
import { deleteApp, getApp, updateApp } from "../../../gen/platform/admin/v1/admin-AdminService_connectquery.js";
import { AppStatus, type App } from "../../../gen/platform/admin/v1/admin_pb.js";
import { APP_TABS, href, navigate, type AppTab } from "../router.ts";
import { ConfirmDialog, ErrorBox, QueryView } from "../ui.tsx";
import { useOperator } from "../operator.ts";
import { StatusBadge } from "./apps.tsx";
import { SettingsTab } from "./settings.tsx";
import { TokensTab } from "./tokens.tsx";
import { UsageTab } from "./usage.tsx";
import { AnalyticsTab } from "./analytics.tsx";
import { QueuesTab } from "./queues.tsx";
import { MailTab } from "./mail.tsx";
import { SecretsTab } from "./secrets.tsx";

const TAB_LABELS: Record<AppTab, string> = {
  settings: "Settings",
  tokens: "Tokens",
  usage: "Usage",
  analytics: "Analytics",
  queues: "Queues",
  mail: "Mail",
  secrets: "Secrets",
};

export function AppScreen({ appId, tab }: { appId: string; tab: AppTab }) {
  const app = useQuery(getApp, { appId });
  return (
    <QueryView query={app} what="the app">
      {(data) => (data.app ? <AppView app={data.app} tab={tab} /> : <ErrorBox error={new Error("no such app")} />)}
    </QueryView>
  );
}

function AppView({ app, tab }: { app: App; tab: AppTab }) {
  const queryClient = useQueryClient();
  const [confirmDelete, setConfirmDelete] = useState(false);
  const [confirmStop, setConfirmStop] = useState(false);
  const update = useMutation(updateApp, {
    onSuccess: () => {
      setConfirmStop(false);
      return queryClient.invalidateQueries();
    },
  });
  const remove = useMutation(deleteApp, {
    onSuccess: () => {
      setConfirmDelete(false);
      navigate({ screen: "apps" });
      // Dropped, not refetched: a refetch of this screen's queries would only find the app gone.
      queryClient.removeQueries();
    },
  });
  const running = app.status === AppStatus.RUNNING;
  const { canWrite } = useOperator();
  return (
    <>
      <p className="crumbs">
        <a href="#/apps">Apps</a> / {app.name}
      </p>
      <div className="page-head">
        <h1>
          {app.name} <StatusBadge status={app.status} />
        </h1>
        <div className="actions" hidden={!canWrite}>
          <button
            type="button"
            className="secondary"
            disabled={update.isPending}
            onClick={() =>
              running ? setConfirmStop(true) : update.mutate({ appId: app.id, status: AppStatus.RUNNING })
            }
          >
            {running ? "Stop app" : "Start app"}
          </button>
          <button type="button" className="danger" onClick={() => setConfirmDelete(true)}>
            Delete app
          </button>
        </div>
      </div>
      {update.error && !confirmStop ? <ErrorBox error={update.error} /> : null}
      <nav className="tabs" aria-label="App sections">
        {APP_TABS.map((t) => (
          <a
            key={t}
            href={href({ screen: "app", appId: app.id, tab: t })}
            aria-current={t === tab ? "page" : undefined}
          >
            {TAB_LABELS[t]}
          </a>
        ))}
      </nav>
      <section aria-label={TAB_LABELS[tab]}>
        {tab === "settings" ? <SettingsTab app={app} /> : null}
        {tab === "tokens" ? <TokensTab app={app} /> : null}
        {tab === "usage" ? <UsageTab app={app} /> : null}
        {tab === "analytics" ? <AnalyticsTab app={app} /> : null}
        {tab === "queues" ? <QueuesTab app={app} /> : null}
        {tab === "mail" ? <MailTab app={app} /> : null}
        {tab === "secrets" ? <SecretsTab app={app} /> : null}
      </section>
      <ConfirmDialog
        open={confirmStop}
        title={`Stop ${app.name}?`}
        confirmLabel="Stop app"
        busy={update.isPending}
        error={update.error}
        onClose={() => setConfirmStop(false)}
        onConfirm={() => update.mutate({ appId: app.id, status: AppStatus.STOPPED })}
      >
        <p>
          Every request with the app's tokens is refused (403 <code>app_stopped</code>) until it is started again.
          Nothing is deleted: queued messages, events, mail and secrets stay.
        </p>
      </ConfirmDialog>
      <ConfirmDialog
        open={confirmDelete}
        title={`Delete ${app.name}?`}
        confirmLabel="Delete forever"
        typeToConfirm={app.name}
        busy={remove.isPending}
        error={remove.error}
        onClose={() => setConfirmDelete(false)}
        onConfirm={() => remove.mutate({ appId: app.id })}
      >
        <p>The app, its tokens, events, messages, mail log and secrets are deleted. This cannot be undone.</p>
      </ConfirmDialog>
    </>
  );
}
