/**
 * Runs once before the test files: what the suite needs from the machine that
 * `npm install` cannot bring (the system Chromium of the browser tests), and
 * the dashboard's build. When Chromium cannot be had, that is said once here
 * and the run goes on: only the browser test files fail (each with the same
 * line, from `launchChromium`).
 *
 * The dashboard is built here, before any worker starts, when it is missing or
 * older than its sources (`vitest run` without `npm test`'s `pretest`, e.g. on
 * a fresh clone): the browser test files, two at a time, each built it in
 * their `beforeAll` otherwise, and Vite empties `dashboard/dist` as it builds,
 * so one file's server lost the page it was serving to another's build.
 */
import { ensureDashboardBuilt } from "../../scripts/build-dashboard.ts";
import { ensureChromium } from "./chromium.ts";

export default async function setup(): Promise<void> {
  try {
    ensureChromium();
  } catch (err) {
    process.stderr.write(`${err instanceof Error ? err.message : String(err)} (the browser test files will fail)\n`);
  }
  try {
    await ensureDashboardBuilt();
  } catch (err) {
    process.stderr.write(
      `the dashboard could not be built: ${err instanceof Error ? err.message : String(err)} (its browser test files will fail)\n`,
    );
  }
}
