/**
 * A small hash router: `#/` (the overview), `#/apps`, `#/apps/<id>/<tab>`,
 * `#/operators`, `#/audit`. The hash keeps every screen
 * addressable and reloadable without the server knowing the dashboard's
 * routes, and nothing secret ever goes into it.
 */
import { useSyncExternalStore } from "react";

export type Route =
  | { screen: "overview" }
  | { screen: "apps" }
  | { screen: "operators" }
  | { screen: "audit" }
  | { screen: "app"; appId: string; tab: AppTab };

export const APP_TABS = ["settings", "tokens", "usage", "analytics", "queues", "mail", "secrets"] as const;
export type AppTab = (typeof APP_TABS)[number];

export function parseRoute(hash: string): Route {
  const parts = hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
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

const subscribe = (onChange: () => void) => {
  window.addEventListener("hashchange", onChange);
  return () => window.removeEventListener("hashchange", onChange);
};

export function useRoute(): Route {
  const hash = useSyncExternalStore(subscribe, () => window.location.hash);
  return parseRoute(hash);
}
