/**
 * One queue's policy on the queues screen (AdminService GetQueuePolicy and
 * SetQueuePolicy): what happens to its messages on retries and when they die,
 * shown as it applies now and editable by an admin. Only the fields edited
 * are sent (SetQueuePolicy replaces the fields given), and the server applies
 * the app's own rules, so its refusal is shown as a sentence. The dead-letter
 * panel names the policy that makes letters dead with `deadLetterRule`.
 */
import { useState } from "react";
import { useMutation, useQuery } from "@connectrpc/connect-query";
import { useQueryClient } from "@tanstack/react-query";
import { getQueuePolicy, setQueuePolicy } from "../../../gen/platform/admin/v1/admin-AdminService_connectquery.js";
import type { GetQueuePolicyResponse } from "../../../gen/platform/admin/v1/admin_pb.js";
import type { QueuePolicy } from "../../../gen/platform/queues/v1/queues_pb.js";
import { FormOutcome, QueryView } from "../ui.tsx";
import { useOperator } from "../operator.ts";

type Field =
  | "maxDeliveries"
  | "deadLetterQueue"
  | "retryDelaySeconds"
  | "retryBackoff"
  | "maxRetryDelaySeconds"
  | "leaseSeconds"
  | "dedupWindowSeconds"
  | "maxDeliveriesPerSecond";

const FIELDS: { name: Field; label: string; hint: string }[] = [
  { name: "maxDeliveries", label: "Max deliveries", hint: "0 = unlimited" },
  { name: "deadLetterQueue", label: "Dead-letter queue", hint: "empty: the dead-letter list; _drop: deleted" },
  { name: "retryDelaySeconds", label: "Retry delay (seconds)", hint: "after a lapsed lease or a nack" },
  { name: "retryBackoff", label: "Retry backoff", hint: "the delay's factor per delivery, 1 to 10" },
  { name: "maxRetryDelaySeconds", label: "Max retry delay (seconds)", hint: "the backoff's ceiling" },
  { name: "leaseSeconds", label: "Lease (seconds)", hint: "of a consume that asks for none" },
  { name: "dedupWindowSeconds", label: "Dedup window (seconds)", hint: "how long a dedup key holds" },
  {
    name: "maxDeliveriesPerSecond",
    label: "Rate limit (deliveries a second)",
    hint: "across all consumers; 0 = no limit",
  },
];

const fieldText = (p: QueuePolicy | undefined, name: Field): string =>
  name === "deadLetterQueue" ? (p?.deadLetterQueue ?? "") : String(p?.[name] ?? "");

/** Where max deliveries comes from, as a sentence's end. */
function sourceText(r: GetQueuePolicyResponse): string {
  if (r.maxDeliveriesSource === "queue")
    return r.appMaxDeliveries > 0
      ? `set by this queue's policy (the app's default and ceiling: ${r.appMaxDeliveries})`
      : "set by this queue's policy (the app sets no default)";
  if (r.maxDeliveriesSource === "app") return "the app's default, from its settings (this queue sets none lower)";
  return "no limit: neither this queue's policy nor the app's settings set one";
}

/** The dead-letter panel's sentence: the policy that makes this queue's messages dead letters. */
export function deadLetterRule(r: GetQueuePolicyResponse): string {
  const max = r.policy?.maxDeliveries ?? 0;
  if (max === 0)
    return `This queue's policy now allows unlimited deliveries (${sourceText(r)}): the letters below died under an earlier one.`;
  const where =
    r.policy?.deadLetterQueue === "_drop"
      ? "are deleted"
      : r.policy?.deadLetterQueue
        ? `go to the queue ${r.policy.deadLetterQueue}`
        : "wait here";
  return `A message dies after ${max} deliver${max === 1 ? "y" : "ies"}, ${sourceText(r)}; dead messages ${where}.`;
}

/** The policy of `queue`: its values as they apply, each explained, editable by an admin. */
export function QueuePolicyPanel({ appId, queue, onClose }: { appId: string; queue: string; onClose: () => void }) {
  const policy = useQuery(getQueuePolicy, { appId, queue });
  const [edits, setEdits] = useState<Partial<Record<Field, string>>>({});
  const [fieldError, setFieldError] = useState<string | null>(null);
  const [saved, setSaved] = useState(false);
  const queryClient = useQueryClient();
  const { canWrite } = useOperator();
  const save = useMutation(setQueuePolicy, {
    onSuccess: async () => {
      setSaved(true);
      setEdits({});
      await queryClient.invalidateQueries();
    },
  });
  return (
    <div className="card" data-testid={`policy-${queue}`}>
      <div className="page-head">
        <h2>Policy of {queue}</h2>
        <button type="button" className="secondary" onClick={onClose}>
          Close
        </button>
      </div>
      <p className="muted">
        A queue&apos;s policy decides how its messages are retried and when they become dead letters; the app sets it
        with <code>PUT /v1/queues/{"{queue}"}/policy</code>, and its max deliveries may only lower the app&apos;s
        default from the settings.
      </p>
      <QueryView query={policy} what="the policy">
        {(data) => (
          <form
            onSubmit={(e) => {
              e.preventDefault();
              setSaved(false);
              save.reset();
              const change: Record<string, number | string> = {};
              for (const [name, given] of Object.entries(edits) as [Field, string][]) {
                const text = given.trim();
                if (text === fieldText(data.policy, name)) continue;
                if (name === "deadLetterQueue") change[name] = text;
                else if (
                  name === "retryBackoff" || name === "maxDeliveriesPerSecond"
                    ? !/^\d+(\.\d+)?$/.test(text)
                    : !/^\d{1,9}$/.test(text)
                ) {
                  setFieldError(`${FIELDS.find((f) => f.name === name)!.label}: write a number.`);
                  return;
                } else change[name] = Number(text);
              }
              setFieldError(null);
              if (Object.keys(change).length === 0) {
                setFieldError("Nothing changed.");
                return;
              }
              save.mutate({ appId, queue, ...change });
            }}
          >
            <p data-testid="policy-source">
              Max deliveries {data.policy?.maxDeliveries ?? 0}: {sourceText(data)}.
            </p>
            <div className="grid">
              {FIELDS.map((f) => (
                <label className="field" key={f.name}>
                  <span>{f.label}</span>
                  <input
                    name={f.name}
                    value={edits[f.name] ?? fieldText(data.policy, f.name)}
                    disabled={!canWrite}
                    inputMode={f.name === "deadLetterQueue" ? undefined : "decimal"}
                    autoComplete="off"
                    onChange={(e) => {
                      setSaved(false);
                      setEdits((x) => ({ ...x, [f.name]: e.target.value }));
                    }}
                  />
                  <small className="muted">{f.hint}</small>
                </label>
              ))}
            </div>
            <FormOutcome
              fieldError={fieldError}
              error={save.error}
              errorTitle="Not saved"
              done={saved ? "Saved: the queue's consumers follow it from their next delivery." : null}
            />
            <div className="actions">
              {canWrite ? (
                <button type="submit" disabled={save.isPending}>
                  Save policy
                </button>
              ) : (
                <p className="muted">Your operator role reads only: the policy cannot be changed here.</p>
              )}
            </div>
          </form>
        )}
      </QueryView>
    </div>
  );
}
