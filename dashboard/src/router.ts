/**
 * A small hash router: `#/apps/<id>/<tab>`. The hash keeps every screen
 * addressable and reloadable without the server knowing the dashboard's
 * routes, and nothing secret ever goes into it.
 */
import { useSyncExternalStore } from "react";

export type Route = { screen: "apps" } | { screen: "app"; appId: string; tab: AppTab };

export const APP_TABS = ["settings", "tokens", "usage", "analytics", "queues", "mail", "secrets"] as const;
export type AppTab = (typeof APP_TABS)[number];

export function parseRoute(hash: string): Route {
  const parts = hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  if (parts[0] === "apps" && parts[1]) {
    const tab = (APP_TABS as readonly string[]).includes(parts[2] ?? "") ? (parts[2] as AppTab) : "settings";
    return { screen: "app", appId: parts[1], tab };
  }
  return { screen: "apps" };
}

export function href(route: Route): string {
  if (route.screen === "apps") return "#/apps";
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
