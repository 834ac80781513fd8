/** Small helpers shared by the client's tests. */
import { expect } from "vitest";
import { PlatformError } from "../src/index.ts";

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
