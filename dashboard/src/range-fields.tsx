/**
 * The range picker of the analytics screens (Trends and Funnel): a preset range or a custom one with
 * its from/to fields, and the event-type select both screens start from. One component, given the
 * list of ranges the screen offers (a funnel spans at most a year).
 */
import { useState } from "react";
import type { EventType } from "../../gen/platform/analytics/v1/analytics_pb.js";
import { localInput, type Range } from "./ranges.ts";

/** A range as chosen: a preset's hours, or 0 and the custom fields (in the browser's time). */
export interface RangeChoice {
  hours: number;
  from: string;
  to: string;
}

/** The range state of a screen, starting at the preset of `hours` (the custom fields start on the same span). */
export function useRangeChoice(hours: number) {
  return useState<RangeChoice>(() => ({
    hours,
    from: localInput(Date.now() - hours * 3600_000),
    to: localInput(Date.now()),
  }));
}

/** The chosen range in epoch milliseconds, or what is wrong with the custom fields. */
export function rangeBounds(c: RangeChoice): { since: number; until: number; problem?: string } {
  if (c.hours > 0) {
    // The range ends at the next whole minute so that refetches share one key for a minute.
    const until = Math.ceil(Date.now() / 60_000) * 60_000;
    return { since: until - c.hours * 3600_000, until };
  }
  const since = new Date(c.from).getTime();
  const until = new Date(c.to).getTime();
  if (!Number.isFinite(since) || !Number.isFinite(until))
    return { since, until, problem: "Enter both the start and the end." };
  if (since >= until) return { since, until, problem: "The start of the range must be before its end." };
  return { since, until };
}

export function RangeFields({
  ranges,
  value,
  onChange,
}: {
  ranges: readonly Range[];
  value: RangeChoice;
  onChange: (c: RangeChoice) => void;
}) {
  return (
    <>
      <label className="field">
        <span>Range</span>
        <select value={value.hours} onChange={(e) => onChange({ ...value, hours: Number(e.target.value) })}>
          {ranges.map((r) => (
            <option key={r.hours} value={r.hours}>
              {r.label}
            </option>
          ))}
        </select>
      </label>
      {value.hours === 0 ? (
        <>
          <label className="field">
            <span>From (your browser's time)</span>
            <input
              type="datetime-local"
              value={value.from}
              onChange={(e) => onChange({ ...value, from: e.target.value })}
            />
          </label>
          <label className="field">
            <span>To (your browser's time)</span>
            <input
              type="datetime-local"
              value={value.to}
              onChange={(e) => onChange({ ...value, to: e.target.value })}
            />
          </label>
        </>
      ) : null}
    </>
  );
}

/** A select of the app's event types, by name. */
export function EventTypeSelect({
  label,
  types,
  value,
  onChange,
}: {
  label: string;
  types: readonly EventType[];
  value: string;
  onChange: (name: string) => void;
}) {
  return (
    <label className="field">
      <span>{label}</span>
      <select value={value} onChange={(e) => onChange(e.target.value)} disabled={types.length === 0}>
        {types.map((t) => (
          <option key={t.name}>{t.name}</option>
        ))}
      </select>
    </label>
  );
}
