/** The ranges the analytics screens offer, and the custom range's fields. */

/** A preset range; `hours: 0` is the custom range. */
export interface Range {
  label: string;
  hours: number;
}

export const RANGES: readonly Range[] = [
  { label: "Last 24 hours", hours: 24 },
  { label: "Last 7 days", hours: 24 * 7 },
  { label: "Last 30 days", hours: 24 * 30 },
  { label: "Last 365 days", hours: 24 * 365 },
  { label: "Custom range", hours: 0 },
];

/** `YYYY-MM-DDTHH:mm` for a datetime-local field, in the browser's zone. */
export function localInput(ms: number): string {
  const d = new Date(ms - new Date(ms).getTimezoneOffset() * 60_000);
  return d.toISOString().slice(0, 16);
}
