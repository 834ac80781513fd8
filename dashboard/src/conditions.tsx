/**
 * The editor of filter conditions: one row each (property, operator, value), the rules of
 * condition-drafts.ts applied as a person types.
 */
import {
  MAX_CONDITIONS,
  DISTINCT_ID,
  OP_LABEL,
  OPS_OF,
  conditionKinds,
  newCondition,
  type DraftCondition,
  type OpName,
} from "./condition-drafts.ts";
import type { EventType } from "../../gen/platform/analytics/v1/analytics_pb.js";

/**
 * The rows of conditions with their add and remove buttons. `name` prefixes
 * every field's label ("Filter 1 property", "Step 2 condition 1 value"), so
 * each is found by its label alone.
 */
export function ConditionsEditor({
  drafts,
  onChange,
  type,
  name,
  addLabel,
}: {
  drafts: DraftCondition[];
  onChange: (drafts: DraftCondition[]) => void;
  type: EventType | undefined;
  name: string;
  addLabel: string;
}) {
  const kinds = conditionKinds(type);
  const set = (i: number, change: Partial<DraftCondition>) =>
    onChange(drafts.map((d, j) => (j === i ? { ...d, ...change } : d)));
  return (
    <div className="conditions">
      {drafts.map((d, i) => {
        const kind = kinds.get(d.property) ?? "string";
        const label = `${name} ${i + 1}`;
        return (
          <div className="condition" key={i}>
            <label className="field">
              <span>{label} property</span>
              <select
                value={d.property}
                onChange={(e) => {
                  const next = kinds.get(e.target.value) ?? "string";
                  // A kept operator must still apply; a typed value of another kind would only be refused.
                  set(i, {
                    property: e.target.value,
                    op: OPS_OF[next].includes(d.op) ? d.op : "eq",
                    text: next === kind ? d.text : next === "boolean" ? "true" : "",
                  });
                }}
              >
                {[...kinds].map(([p, k]) => (
                  <option key={p} value={p}>
                    {p === DISTINCT_ID ? `${p} (who)` : `${p} (${k})`}
                  </option>
                ))}
              </select>
            </label>
            <label className="field">
              <span>{label} operator</span>
              <select
                value={d.op}
                onChange={(e) => {
                  const op = e.target.value as OpName;
                  set(i, { op, text: op === "exists" ? "true" : d.op === "exists" ? "" : d.text });
                }}
              >
                {OPS_OF[kind].map((op) => (
                  <option key={op} value={op}>
                    {OP_LABEL[op]}
                  </option>
                ))}
              </select>
            </label>
            {d.op === "exists" || (kind === "boolean" && d.op !== "in") ? (
              <label className="field">
                <span>{label} value</span>
                <select
                  value={d.text === "false" ? "false" : "true"}
                  onChange={(e) => set(i, { text: e.target.value })}
                >
                  <option value="true">{d.op === "exists" ? "is set" : "true"}</option>
                  <option value="false">{d.op === "exists" ? "is not set" : "false"}</option>
                </select>
              </label>
            ) : (
              <label className="field">
                <span>{label} value</span>
                <input
                  value={d.text}
                  inputMode={kind === "number" && d.op !== "in" ? "decimal" : undefined}
                  placeholder={
                    d.op === "in" ? (kind === "number" ? "10, 20" : "pro, team") : kind === "number" ? "42" : ""
                  }
                  onChange={(e) => set(i, { text: e.target.value })}
                  autoComplete="off"
                  spellCheck={false}
                />
              </label>
            )}
            <button
              type="button"
              className="secondary small"
              aria-label={`Remove ${label.toLowerCase()}`}
              onClick={() => onChange(drafts.filter((_, j) => j !== i))}
            >
              Remove
            </button>
          </div>
        );
      })}
      <button
        type="button"
        className="secondary small"
        disabled={drafts.length >= MAX_CONDITIONS || !type}
        onClick={() => onChange([...drafts, newCondition(type)])}
      >
        {addLabel}
      </button>
    </div>
  );
}
