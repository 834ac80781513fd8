/**
 * Runs once before the test files: what the suite needs from the machine that
 * `npm install` cannot bring (the system Chromium of the browser tests). When
 * Chromium cannot be had, that is said once here and the run goes on: only
 * the browser test files fail (each with the same line, from `launchChromium`).
 */
import { ensureChromium } from "./chromium.ts";

export default function setup(): void {
  try {
    ensureChromium();
  } catch (err) {
    process.stderr.write(`${err instanceof Error ? err.message : String(err)} (the browser test files will fail)\n`);
  }
}
