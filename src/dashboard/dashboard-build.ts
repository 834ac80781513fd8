/**
 * Builds the operator dashboard (`dashboard/`) into `dashboard/dist`, which
 * is a build output and never committed. `npm start` and `npm test` run this
 * with `--if-stale` first, so a fresh clone's two commands just work and a
 * source change is never served from an old build; `npm run build:dashboard`
 * builds unconditionally.
 */
import fs from "node:fs";
import path from "node:path";

export const DASHBOARD_ROOT = path.resolve(import.meta.dirname, "../../dashboard");
export const DASHBOARD_DIST = path.join(DASHBOARD_ROOT, "dist");

/** Inputs of the build: the dashboard's sources, the generated code it imports, and the lockfile. */
const INPUTS = [
  path.join(DASHBOARD_ROOT, "src"),
  path.join(DASHBOARD_ROOT, "index.html"),
  path.join(DASHBOARD_ROOT, "vite.config.ts"),
  path.resolve(DASHBOARD_ROOT, "../gen"),
  path.resolve(DASHBOARD_ROOT, "../package-lock.json"),
];

function newestMtime(p: string): number {
  let stat: fs.Stats;
  try {
    stat = fs.statSync(p);
  } catch {
    return 0;
  }
  if (!stat.isDirectory()) return stat.mtimeMs;
  let newest = stat.mtimeMs;
  for (const entry of fs.readdirSync(p)) newest = Math.max(newest, newestMtime(path.join(p, entry)));
  return newest;
}

/** Whether `dashboard/dist` is missing or older than any of its inputs. */
export function isDashboardStale(): boolean {
  const built = newestMtime(path.join(DASHBOARD_DIST, "index.html"));
  if (built === 0) return true;
  return INPUTS.some((input) => newestMtime(input) > built);
}

/** Runs the Vite build (Vite is a build-time dependency, loaded only here). */
export async function buildDashboard(): Promise<void> {
  const { build } = await import("vite");
  await build({ configFile: path.join(DASHBOARD_ROOT, "vite.config.ts"), logLevel: "warn" });
}

export async function ensureDashboardBuilt(): Promise<void> {
  if (isDashboardStale()) await buildDashboard();
}

if (import.meta.main) {
  const ifStale = process.argv.includes("--if-stale");
  if (ifStale && !isDashboardStale()) {
    process.stdout.write("dashboard build is up to date\n");
  } else {
    await buildDashboard();
  }
}
