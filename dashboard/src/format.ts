/** Display helpers shared by the screens. */
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";

export function formatTime(ts: Timestamp | undefined): string {
  if (!ts) return "—";
  return timestampDate(ts).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
}

export function formatAge(ts: Timestamp | undefined, now = Date.now()): string {
  if (!ts) return "—";
  const seconds = Math.max(0, Math.round((now - timestampDate(ts).getTime()) / 1000));
  if (seconds < 60) return `${seconds} s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ${Math.floor((seconds % 3600) / 60)} min`;
  return `${Math.floor(seconds / 86400)} d`;
}

export function formatNumber(n: number | bigint): string {
  return Number(n).toLocaleString();
}

/** "delivered once", "delivered 3 times": a count of deliveries as a person would say it. */
export function formatDeliveries(n: number): string {
  return n === 1 ? "delivered once" : `delivered ${formatNumber(n)} times`;
}

/** A figure of analytics as the screens write it: grouped digits, at most two decimals (42.5, 1,234.57). */
export function formatValue(n: number): string {
  return n.toLocaleString(undefined, { maximumFractionDigits: 2 });
}

/** A share as a percentage: 60%, 66.7%. */
export function formatPercent(fraction: number): string {
  return `${(fraction * 100).toLocaleString(undefined, { maximumFractionDigits: 1 })}%`;
}

/** A duration as a person says it: 45 s, 12 min 5 s, 2 h 5 min, 3 d 4 h. */
export function formatDuration(seconds: number): string {
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min${s % 60 ? ` ${s % 60} s` : ""}`;
  if (s < 86_400) {
    const m = Math.floor((s % 3600) / 60);
    return `${Math.floor(s / 3600)} h${m ? ` ${m} min` : ""}`;
  }
  const h = Math.floor((s % 86_400) / 3600);
  return `${Math.floor(s / 86_400)} d${h ? ` ${h} h` : ""}`;
}
