/**
 * The real Chromium that the browser tests drive through playwright-core.
 * Playwright's own browser download cannot work here (no network but the
 * package registries), so the tests use the system's Chromium: `CHROMIUM_PATH`,
 * else `/usr/bin/chromium`. When it is missing, the test run's global set-up
 * installs Debian's `chromium` package where that is possible (root with
 * apt-get), so `npm install && npm test` works on a fresh machine. When it
 * cannot be had, the set-up says so once and the run goes on: each browser
 * test file then fails with that one line (`launchChromium`), and every other
 * file runs as usual.
 */
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import { chromium, type Browser } from "playwright-core";

export const CHROMIUM_PATH = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";

/** Flags for a headless Chromium as root on a machine with no network: no sandbox, no background traffic. */
const ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--no-first-run",
  "--disable-quic",
];

/** What is missing, in one line: what to install, or which variable to set. */
export function chromiumMissing(): string {
  return `The browser tests need Chromium at ${CHROMIUM_PATH}: install it (Debian/Ubuntu: apt-get install chromium) or set CHROMIUM_PATH.`;
}

export async function launchChromium(): Promise<Browser> {
  if (!fs.existsSync(CHROMIUM_PATH)) throw new Error(chromiumMissing());
  return chromium.launch({ executablePath: CHROMIUM_PATH, args: ARGS });
}

/** Makes sure `CHROMIUM_PATH` exists, installing Debian's package when it is missing and that is possible. */
export function ensureChromium(log: (line: string) => void = (line) => process.stderr.write(line + "\n")): void {
  if (fs.existsSync(CHROMIUM_PATH)) return;
  const canInstall =
    process.env.CHROMIUM_PATH === undefined && process.getuid?.() === 0 && fs.existsSync("/usr/bin/apt-get");
  if (!canInstall) throw new Error(chromiumMissing());
  log("Chromium is missing: installing Debian's chromium package for the browser tests (apt-get install chromium)...");
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  execFileSync("apt-get", ["update", "-qq"], { stdio: ["ignore", "ignore", "inherit"], env });
  execFileSync("apt-get", ["install", "-y", "-qq", "chromium"], { stdio: ["ignore", "ignore", "inherit"], env });
  if (!fs.existsSync(CHROMIUM_PATH))
    throw new Error(`apt-get install chromium finished but ${CHROMIUM_PATH} does not exist`);
}
