/**
 * Settings: mail sender, the analytics and secrets switches and every limit.
 * Only the fields the operator edited are sent (UpdateApp replaces the fields
 * given), so a value changed elsewhere while the form is open is not written
 * back; the API validates them and its message is shown as a sentence.
 */
import { useEffect, useState } from "react";
import { useMutation } from "@connectrpc/connect-query";
import { useQueryClient } from "@tanstack/react-query";
import { updateApp } from "../../../gen/platform/admin/v1/admin-AdminService_connectquery.js";
import type { App, AppLimits } from "../../../gen/platform/admin/v1/admin_pb.js";
import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorBox } from "../ui.tsx";
import { useOperator } from "../operator.ts";

type LimitName = Exclude<keyof AppLimits, "$typeName" | "$unknown">;

interface Edits {
  mailFrom?: string;
  analyticsEnabled?: boolean;
  secretsEnabled?: boolean;
  limits?: Partial<Record<LimitName, string>>;
}

const LIMITS: { name: LimitName; label: string; hint?: string }[] = [
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
  {
    name: "maxDeliveries",
    label: "Max deliveries (0 = no limit)",
    hint: "The default of every queue of the app and the ceiling of a queue's own policy (set on the Queues tab), which may only lower it.",
  },
  { name: "eventsPerSecond", label: "Events per second (0 = no limit)" },
  { name: "eventsBurst", label: "Events burst" },
  { name: "queuePutsPerSecond", label: "Queue puts per second (0 = no limit)" },
  { name: "queuePutsBurst", label: "Queue puts burst" },
  { name: "requestsPerSecond", label: "Other requests per second (0 = no limit)" },
  { name: "requestsBurst", label: "Other requests burst" },
  { name: "maxWaitingConsumes", label: "Max consumes at once (0 = no limit)" },
  { name: "maxOpenStreams", label: "Max open streams (0 = no limit)" },
  { name: "maxInFlightRequests", label: "Max other requests at once (0 = no limit)" },
];

export function SettingsTab({ app }: { app: App }) {
  const queryClient = useQueryClient();
  // Only what the operator edited is kept here; every other field shows the app as last loaded (it
  // refreshes), and only the edited fields are sent: a limit changed elsewhere is never written back.
  const [edits, setEdits] = useState<Edits>({});
  // The revision the edits were made on: a save is refused if the app changed since (then reloaded).
  const [base, setBase] = useState<bigint | null>(null);
  const [saved, setSaved] = useState(false);
  const [conflict, setConflict] = useState(false);
  // After a conflict: the revision the refused save was made on, until the app reloaded past it.
  const [refused, setRefused] = useState<bigint | null>(null);
  const { canWrite } = useOperator();
  const update = useMutation(updateApp, {
    onSuccess: async () => {
      setSaved(true);
      setConflict(false);
      setEdits({});
      setBase(null);
      setRefused(null);
      await queryClient.invalidateQueries();
    },
    onError: async (err, sent) => {
      if (err instanceof ConnectError && err.code === Code.Aborted) {
        // Changed elsewhere: reload, keep the operator's edits on top of the new values, and say so. The
        // next save is made on the revision reloaded now (the one the banner speaks of), never on whatever
        // the page refreshes to later: a change made meanwhile is refused again, not overwritten unseen.
        setConflict(true);
        setRefused(sent.expectedRevision ?? null);
        await queryClient.invalidateQueries();
      }
    },
  });
  useEffect(() => {
    if (refused !== null && app.revision !== refused) {
      setBase(app.revision);
      setRefused(null);
    }
  }, [refused, app.revision]);
  const mailFrom = edits.mailFrom ?? app.mailFrom;
  const analytics = edits.analyticsEnabled ?? app.analyticsEnabled;
  const secrets = edits.secretsEnabled ?? app.secretsEnabled;
  const limitText = (name: LimitName) => edits.limits?.[name] ?? String(app.limits?.[name] ?? "");
  const edit = (change: Edits) => {
    setSaved(false);
    if (base === null) setBase(app.revision);
    setEdits((e) => ({ ...e, ...change, limits: { ...e.limits, ...change.limits } }));
  };

  const submit = () => {
    setSaved(false);
    // A limit that is not a whole int32 cannot travel in the message; it goes as -1, which the API
    // refuses with its own rule text, so the operator reads the same message as any other client.
    const changedLimits: Partial<Record<LimitName, number>> = {};
    for (const [name, given] of Object.entries(edits.limits ?? {}) as [LimitName, string][]) {
      const text = given.trim();
      if (text === String(app.limits?.[name] ?? "")) continue;
      const value = /^-?\d{1,10}$/.test(text) ? Number(text) : NaN;
      changedLimits[name] = Number.isInteger(value) && value >= -(2 ** 31) && value < 2 ** 31 ? value : -1;
    }
    setConflict(false);
    update.mutate({
      appId: app.id,
      expectedRevision: base ?? app.revision,
      mailFrom: edits.mailFrom !== undefined && edits.mailFrom !== app.mailFrom ? edits.mailFrom.trim() : undefined,
      analyticsEnabled:
        edits.analyticsEnabled !== undefined && edits.analyticsEnabled !== app.analyticsEnabled
          ? edits.analyticsEnabled
          : undefined,
      secretsEnabled:
        edits.secretsEnabled !== undefined && edits.secretsEnabled !== app.secretsEnabled
          ? edits.secretsEnabled
          : undefined,
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
    >
      <h2>Settings</h2>
      <label className="field">
        <span>Mail sender (mailFrom)</span>
        <input
          type="email"
          value={mailFrom}
          onChange={(e) => edit({ mailFrom: e.target.value })}
          placeholder="app@example.com"
          autoComplete="off"
        />
        {mailFrom.trim() === "" ? (
          <small className="muted">Mail cannot be sent until the app has a sender address.</small>
        ) : null}
      </label>
      <fieldset className="switches">
        <legend>Facilities</legend>
        <label className="check">
          <input type="checkbox" checked={analytics} onChange={(e) => edit({ analyticsEnabled: e.target.checked })} />{" "}
          Analytics enabled
        </label>
        <label className="check">
          <input type="checkbox" checked={secrets} onChange={(e) => edit({ secretsEnabled: e.target.checked })} />{" "}
          Secrets enabled
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
                value={limitText(l.name)}
                onChange={(e) => edit({ limits: { [l.name]: e.target.value } })}
              />
              {l.hint ? <small className="muted">{l.hint}</small> : null}
            </label>
          ))}
        </div>
      </fieldset>
      {conflict ? (
        <div className="banner" role="alert">
          <strong>Not saved: the app was changed elsewhere since you started editing.</strong> The form now shows its
          current values, with your edits kept on top. Check them and save again, or{" "}
          <button
            type="button"
            className="link"
            onClick={() => {
              setEdits({});
              setBase(null);
              setRefused(null);
              setConflict(false);
            }}
          >
            discard your edits
          </button>
          .
        </div>
      ) : update.error ? (
        <ErrorBox error={update.error} title="Not saved" />
      ) : null}
      {saved && !update.error ? (
        <p role="status" className="ok-text">
          Saved.
        </p>
      ) : null}
      <div className="actions">
        {canWrite ? (
          <button type="submit" disabled={update.isPending}>
            Save settings
          </button>
        ) : (
          <p className="muted">Your operator role reads only: the settings cannot be changed here.</p>
        )}
      </div>
    </form>
  );
}
