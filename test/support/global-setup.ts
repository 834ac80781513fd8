/**
 * Runs once before the test files: what the suite needs from the machine that
 * `npm install` cannot bring (the system Chromium of the browser tests).
 */
import { ensureChromium } from "./chromium.ts";

export default function setup(): void {
  ensureChromium();
}
