/**
 * A small hash router: `#/` (the overview), `#/apps`, `#/apps/<id>/<tab>`,
 * `#/operators`, `#/audit`. The hash keeps every screen
 * addressable and reloadable without the server knowing the dashboard's
 * routes, and nothing secret ever goes into it. After a `?`, the hash holds
 * the screen's own choices (`useHashState`: the analytics query), so a chart
 * can be reloaded, bookmarked and sent as a link; going to another screen
 * leaves them behind.
 */
import { useCallback, useMemo, useState, useSyncExternalStore } from "react";

export type Route =
  | { screen: "overview" }
  | { screen: "apps" }
  | { screen: "operators" }
  | { screen: "audit" }
  | { screen: "app"; appId: string; tab: AppTab };

export const APP_TABS = ["settings", "tokens", "usage", "analytics", "queues", "mail", "secrets"] as const;
export type AppTab = (typeof APP_TABS)[number];

/** The hash's screen and its choices (after the first `?`; an app id is encoded, so it holds none). */
function splitHash(hash: string): { path: string; params: URLSearchParams } {
  const at = hash.indexOf("?");
  return at < 0
    ? { path: hash, params: new URLSearchParams() }
    : { path: hash.slice(0, at), params: new URLSearchParams(hash.slice(at + 1)) };
}

export function parseRoute(hash: string): Route {
  const parts = splitHash(hash).path.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  if (parts[0] === "apps" && parts[1]) {
    const tab = (APP_TABS as readonly string[]).includes(parts[2] ?? "") ? (parts[2] as AppTab) : "settings";
    return { screen: "app", appId: parts[1], tab };
  }
  if (parts[0] === "apps") return { screen: "apps" };
  if (parts[0] === "operators") return { screen: "operators" };
  if (parts[0] === "audit") return { screen: "audit" };
  return { screen: "overview" };
}

export function href(route: Route): string {
  if (route.screen !== "app") return route.screen === "overview" ? "#/" : `#/${route.screen}`;
  return `#/apps/${encodeURIComponent(route.appId)}/${route.tab}`;
}

export function navigate(route: Route): void {
  window.location.hash = href(route);
}

/** Told when a choice changes: `history.replaceState` fires no `hashchange`. */
const CHOICE_CHANGED = "dashboard-choice";

const subscribe = (onChange: () => void) => {
  window.addEventListener("hashchange", onChange);
  window.addEventListener(CHOICE_CHANGED, onChange);
  return () => {
    window.removeEventListener("hashchange", onChange);
    window.removeEventListener(CHOICE_CHANGED, onChange);
  };
};

export function useRoute(): Route {
  const hash = useSyncExternalStore(subscribe, () => window.location.hash);
  return parseRoute(hash);
}

/** How a choice is written into the hash and read back; `parse` answers undefined for text it does not take. */
export interface HashCodec<T> {
  parse(text: string): T | undefined;
  format(value: T): string;
}

export const textCodec: HashCodec<string> = { parse: (text) => text, format: (value) => value };

/** One of `values`, written as its text. */
export function oneOfCodec<T extends string | number>(values: readonly T[]): HashCodec<T> {
  return { parse: (text) => values.find((v) => String(v) === text), format: String };
}

/** JSON, taken only when `accepts` says it has the shape the screen expects (a hand-edited link may not). */
export function jsonCodec<T>(accepts: (value: unknown) => value is T): HashCodec<T> {
  return {
    parse(text) {
      try {
        const value: unknown = JSON.parse(text);
        return accepts(value) ? value : undefined;
      } catch {
        return undefined;
      }
    },
    format: (value) => JSON.stringify(value),
  };
}

/**
 * A choice of the screen kept in the hash after `?`, under `key`, like `useState`. The hash is replaced, not
 * pushed: Back leaves the screen rather than undoing the last keystroke. A value equal to the initial one is
 * left out, so an untouched screen keeps its plain address; text that does not parse reads as the initial
 * value. `codec` is one object for the component's life (a module constant).
 */
export function useHashState<T>(
  key: string,
  initial: T | (() => T),
  codec: HashCodec<T>,
): [T, (next: T | ((current: T) => T)) => void] {
  const hash = useSyncExternalStore(subscribe, () => window.location.hash);
  const [fallback] = useState(initial);
  const text = splitHash(hash).params.get(key);
  // The same object while the text is the same, as useState's would be (effects and memos depend on it).
  const value = useMemo(() => (text === null ? fallback : (codec.parse(text) ?? fallback)), [text, fallback, codec]);
  const set = useCallback(
    (next: T | ((current: T) => T)) => {
      // Read from the address at the call, not from the render: several choices set in one handler all land.
      const { path, params } = splitHash(window.location.hash);
      const now = params.get(key);
      const current = now === null ? fallback : (codec.parse(now) ?? fallback);
      const chosen = typeof next === "function" ? (next as (current: T) => T)(current) : next;
      const written = codec.format(chosen);
      if (written === codec.format(fallback)) params.delete(key);
      else params.set(key, written);
      const query = params.toString();
      window.history.replaceState(window.history.state, "", `${path || "#/"}${query ? `?${query}` : ""}`);
      window.dispatchEvent(new Event(CHOICE_CHANGED));
    },
    [key, fallback, codec],
  );
  return [value, set];
}
