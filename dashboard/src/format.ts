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
