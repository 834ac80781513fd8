/**
 * Settings: mail sender, the analytics and secrets switches and every limit.
 * Only changed fields are sent; the API validates them and its message is
 * shown as is.
 */
import { useState } from "react";
import { useMutation } from "@connectrpc/connect-query";
import { useQueryClient } from "@tanstack/react-query";
import { updateApp } from "../../../gen/platform/admin/v1/admin-AdminService_connectquery.js";
import type { App, AppLimits } from "../../../gen/platform/admin/v1/admin_pb.js";
import { ErrorBox } from "../ui.tsx";

type LimitName = Exclude<keyof AppLimits, "$typeName" | "$unknown">;

const LIMITS: { name: LimitName; label: string }[] = [
  { name: "eventsPerDay", label: "Events per day" },
  { name: "mailPerDay", label: "Mail per day" },
  { name: "fastTokensPerDay", label: "Fast model tokens per day" },
  { name: "embedTokensPerDay", label: "Embedding tokens per day" },
  { name: "maxQueueDepth", label: "Max queue depth" },
  { name: "maxPayloadBytes", label: "Max payload bytes" },
  { name: "messageTtlSeconds", label: "Message TTL (seconds)" },
  { name: "leaseSeconds", label: "Lease (seconds)" },
  { name: "maxOutstandingLinks", label: "Max outstanding secret links" },
  { name: "linkTtlSeconds", label: "Secret link TTL (seconds)" },
];

export function SettingsTab({ app }: { app: App }) {
  const queryClient = useQueryClient();
  const [mailFrom, setMailFrom] = useState(app.mailFrom);
  const [analytics, setAnalytics] = useState(app.analyticsEnabled);
  const [secrets, setSecrets] = useState(app.secretsEnabled);
  const [limits, setLimits] = useState<Record<LimitName, string>>(
    () => Object.fromEntries(LIMITS.map((l) => [l.name, String(app.limits?.[l.name] ?? "")])) as Record<LimitName, string>,
  );
  const [saved, setSaved] = useState(false);
  const update = useMutation(updateApp, {
    onSuccess: async () => {
      setSaved(true);
      await queryClient.invalidateQueries();
    },
  });

  const submit = () => {
    setSaved(false);
    const changedLimits: Partial<Record<LimitName, number>> = {};
    for (const { name } of LIMITS) {
      if (limits[name] !== String(app.limits?.[name] ?? "")) changedLimits[name] = limits[name].trim() === "" ? NaN : Number(limits[name]);
    }
    update.mutate({
      appId: app.id,
      mailFrom: mailFrom !== app.mailFrom ? mailFrom.trim() : undefined,
      analyticsEnabled: analytics !== app.analyticsEnabled ? analytics : undefined,
      secretsEnabled: secrets !== app.secretsEnabled ? secrets : undefined,
      // A value that is not a whole number goes as is (or as -1 when unreadable), so the API's rule is what the operator reads.
      limits: Object.fromEntries(Object.entries(changedLimits).map(([k, v]) => [k, Number.isFinite(v) ? Math.trunc(v!) === v ? v : -1 : -1])),
    });
  };

  return (
    <form
      className="card settings"
      onSubmit={(e) => {
        e.preventDefault();
        submit();
      }}
      onChange={() => setSaved(false)}
    >
      <h2>Settings</h2>
      <label className="field">
        <span>Mail sender (mailFrom)</span>
        <input type="email" value={mailFrom} onChange={(e) => setMailFrom(e.target.value)} placeholder="app@example.com" autoComplete="off" />
        <small className="muted">Mail cannot be sent until the app has a sender address.</small>
      </label>
      <fieldset className="switches">
        <legend>Facilities</legend>
        <label className="check">
          <input type="checkbox" checked={analytics} onChange={(e) => setAnalytics(e.target.checked)} /> Analytics enabled
        </label>
        <label className="check">
          <input type="checkbox" checked={secrets} onChange={(e) => setSecrets(e.target.checked)} /> Secrets enabled
        </label>
      </fieldset>
      <fieldset>
        <legend>Limits</legend>
        <div className="grid">
          {LIMITS.map((l) => (
            <label className="field" key={l.name}>
              <span>{l.label}</span>
              <input inputMode="numeric" value={limits[l.name]} onChange={(e) => setLimits({ ...limits, [l.name]: e.target.value })} />
            </label>
          ))}
        </div>
      </fieldset>
      {update.error ? <ErrorBox error={update.error} title="Not saved" /> : null}
      {saved && !update.error ? (
        <p role="status" className="ok-text">
          Saved.
        </p>
      ) : null}
      <div className="actions">
        <button type="submit" disabled={update.isPending}>
          Save settings
        </button>
      </div>
    </form>
  );
}
