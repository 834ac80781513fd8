/**
 * The range picker of the analytics screens (Trends and Funnel): a preset range or a custom one with
 * its from/to fields, and the event-type select both screens start from. One component, given the
 * list of ranges the screen offers (a funnel spans at most a year).
 */
import { useMemo } from "react";
import type { EventType } from "../../gen/platform/analytics/v1/analytics_pb.js";
import { localInput, type Range } from "./ranges.ts";
import { useHashState, type HashCodec } from "./router.ts";

/** A range as chosen: a preset's hours, or 0 and the custom fields (in the browser's time). */
export interface RangeChoice {
  hours: number;
  from: string;
  to: string;
}

/** A preset's hours, or the custom range's fields as `from_to` (e.g. `2026-11-01T00:00_2026-11-08T00:00`). */
const CUSTOM_TEXT = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2})_(\d{4}-\d{2}-\d{2}T\d{2}:\d{2})$/;

function rangeCodec(ranges: readonly Range[]): HashCodec<RangeChoice> {
  return {
    parse(text) {
      const custom = CUSTOM_TEXT.exec(text);
      if (custom) return ranges.some((r) => r.hours === 0) ? { hours: 0, from: custom[1], to: custom[2] } : undefined;
      const preset = ranges.find((r) => r.hours > 0 && String(r.hours) === text);
      return preset && spanOf(preset.hours);
    },
    format: (c) => (c.hours > 0 ? String(c.hours) : `${c.from}_${c.to}`),
  };
}

/** The preset of `hours`, its custom fields on the same span up to now. */
function spanOf(hours: number): RangeChoice {
  return { hours, from: localInput(Date.now() - hours * 3600_000), to: localInput(Date.now()) };
}

/**
 * The range state of a screen, starting at the preset of `hours` (the custom fields start on the same span),
 * kept in the address under `key` (`useHashState`) as one of `ranges`.
 */
export function useRangeChoice(hours: number, key: string, ranges: readonly Range[]) {
  const codec = useMemo(() => rangeCodec(ranges), [ranges]);
  return useHashState<RangeChoice>(key, () => spanOf(hours), codec);
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
