/** Small helpers shared by the client's tests. */
import { expect } from "vitest";
import type { TestApp, TestServer } from "../../test/support/harness.ts";
import { createClient, PlatformError } from "../src/index.ts";

/** The URL a `fetch` was called with, whichever form it was given in. */
export function urlOf(input: string | URL | Request): string {
  return typeof input === "string" ? input : input instanceof URL ? input.href : input.url;
}

/** The error a promise rejects with (fails the test when it resolves or rejects with something else). */
export async function rejection(p: Promise<unknown>): Promise<PlatformError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(PlatformError);
  return err as PlatformError;
}

/** A fresh app of `t` with the `click` type (a `button` string) registered, and its daily event cap if given. */
export async function appWithClicks(t: TestServer, eventsPerDay?: number): Promise<TestApp> {
  const a = await t.createApp();
  if (eventsPerDay !== undefined) await t.admin.updateApp({ appId: a.id, limits: { eventsPerDay } });
  const setup = createClient({ baseUrl: t.url, token: a.token });
  await setup.analytics.registerType({ name: "click", properties: { button: "string" } });
  await setup.close();
  return a;
}

/** Click events the service stored for the app of `token` in the last hour. */
export async function storedClicks(t: TestServer, token: string): Promise<number> {
  const c = createClient({ baseUrl: t.url, token });
  const { total } = await c.analytics.query({
    type: "click",
    since: Date.now() - 3_600_000,
    until: Date.now() + 60_000,
    interval: "day",
  });
  await c.close();
  return total;
}
