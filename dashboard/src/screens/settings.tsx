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
  { name: "retentionDays", label: "Mail and analytics kept (days)" },
  { name: "maxDeliveries", label: "Max deliveries (0 = no limit)" },
];

export function SettingsTab({ app }: { app: App }) {
  const queryClient = useQueryClient();
  const [mailFrom, setMailFrom] = useState(app.mailFrom);
  const [analytics, setAnalytics] = useState(app.analyticsEnabled);
  const [secrets, setSecrets] = useState(app.secretsEnabled);
  const [limits, setLimits] = useState<Record<LimitName, string>>(
    () =>
      Object.fromEntries(LIMITS.map((l) => [l.name, String(app.limits?.[l.name] ?? "")])) as Record<LimitName, string>,
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
    // A limit that is not a whole int32 cannot travel in the message; it goes as -1, which the API
    // refuses with its own rule text, so the operator reads the same message as any other client.
    const changedLimits: Partial<Record<LimitName, number>> = {};
    for (const { name } of LIMITS) {
      const text = limits[name].trim();
      if (text === String(app.limits?.[name] ?? "")) continue;
      const value = /^-?\d{1,10}$/.test(text) ? Number(text) : NaN;
      changedLimits[name] = Number.isInteger(value) && value >= -(2 ** 31) && value < 2 ** 31 ? value : -1;
    }
    update.mutate({
      appId: app.id,
      mailFrom: mailFrom !== app.mailFrom ? mailFrom.trim() : undefined,
      analyticsEnabled: analytics !== app.analyticsEnabled ? analytics : undefined,
      secretsEnabled: secrets !== app.secretsEnabled ? secrets : undefined,
      limits: changedLimits,
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
        <input
          type="email"
          value={mailFrom}
          onChange={(e) => setMailFrom(e.target.value)}
          placeholder="app@example.com"
          autoComplete="off"
        />
        <small className="muted">Mail cannot be sent until the app has a sender address.</small>
      </label>
      <fieldset className="switches">
        <legend>Facilities</legend>
        <label className="check">
          <input type="checkbox" checked={analytics} onChange={(e) => setAnalytics(e.target.checked)} /> Analytics
          enabled
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
              <input
                inputMode="numeric"
                value={limits[l.name]}
                onChange={(e) => setLimits({ ...limits, [l.name]: e.target.value })}
              />
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
