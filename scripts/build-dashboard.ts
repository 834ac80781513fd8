/**
 * Builds the operator dashboard (`dashboard/`) into `dashboard/dist`, a build
 * output that is never committed (`npm run build` makes it, and `npm pack`
 * ships it), and precompresses every text file of it beside itself (`.br`
 * and `.gz`), which the server sends to clients that accept them.
 *
 * `npm start` and `npm test` run this with `--if-stale` first, so a fresh
 * clone's two commands just work and a source change is never served from an
 * old build. Vite is a dev dependency: an installation without it (`npm ci
 * --omit=dev`) serves the build it was given and never builds.
 */
import fs from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import zlib from "node:zlib";

const DASHBOARD_ROOT = path.resolve(import.meta.dirname, "../dashboard");
export const DASHBOARD_DIST = path.join(DASHBOARD_ROOT, "dist");

/** Inputs of the build: the dashboard's sources, the generated code it imports, and the lockfile. */
const INPUTS = [
  path.join(DASHBOARD_ROOT, "src"),
  path.join(DASHBOARD_ROOT, "index.html"),
  path.join(DASHBOARD_ROOT, "vite.config.ts"),
  path.resolve(DASHBOARD_ROOT, "../gen"),
  path.resolve(DASHBOARD_ROOT, "../package-lock.json"),
];

/** Files worth compressing (images and fonts are compressed already). */
const COMPRESSIBLE = /\.(html|js|mjs|css|json|svg|txt|map|webmanifest)$/;

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

/**
 * Writes `file.br` (brotli, best) and `file.gz` (gzip, best) beside every
 * compressible file under `dir`, so serving them costs no CPU per request.
 */
export async function precompress(dir: string): Promise<number> {
  const brotli = promisify(zlib.brotliCompress);
  const gzip = promisify(zlib.gzip);
  let count = 0;
  for (const entry of fs.readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (!entry.isFile() || !COMPRESSIBLE.test(entry.name)) continue;
    const file = path.join(entry.parentPath, entry.name);
    const content = fs.readFileSync(file);
    const [br, gz] = await Promise.all([
      brotli(content, {
        params: {
          [zlib.constants.BROTLI_PARAM_QUALITY]: zlib.constants.BROTLI_MAX_QUALITY,
          [zlib.constants.BROTLI_PARAM_SIZE_HINT]: content.length,
        },
      }),
      gzip(content, { level: zlib.constants.Z_BEST_COMPRESSION }),
    ]);
    fs.writeFileSync(`${file}.br`, br);
    fs.writeFileSync(`${file}.gz`, gz);
    count++;
  }
  return count;
}

/** Runs the Vite build (Vite is a build-time dependency, loaded only here), then precompresses. */
export async function buildDashboard(): Promise<void> {
  const { build } = await import("vite");
  // Inside the test runner NODE_ENV is "test", which would make Vite bundle React's development
  // build (larger, effects run twice): the dashboard is always built as it ships.
  const nodeEnv = process.env.NODE_ENV;
  process.env.NODE_ENV = "production";
  try {
    await build({ configFile: path.join(DASHBOARD_ROOT, "vite.config.ts"), mode: "production", logLevel: "warn" });
  } finally {
    if (nodeEnv === undefined) delete process.env.NODE_ENV;
    else process.env.NODE_ENV = nodeEnv;
  }
  await precompress(DASHBOARD_DIST);
}

/** Builds when stale (the test suite's global set-up, before any browser test loads the page). */
export async function ensureDashboardBuilt(): Promise<void> {
  if (isDashboardStale()) await buildDashboard();
}

async function viteInstalled(): Promise<boolean> {
  try {
    await import("vite");
    return true;
  } catch {
    return false;
  }
}

/**
 * `node scripts/build-dashboard.ts [--if-stale]`: builds (`npm run build`);
 * with `--if-stale` (`npm start`, `npm test`) only when the build is missing
 * or older than its sources, and without Vite (a production install) never:
 * the start goes on, serving the build there is (or answering 503 at
 * `/dashboard/` when there is none, saying how to build it).
 */
if (import.meta.main) {
  const ifStale = process.argv.includes("--if-stale");
  if (ifStale && !isDashboardStale()) {
    process.stderr.write("dashboard build is up to date\n");
  } else if (ifStale && !(await viteInstalled())) {
    process.stderr.write(
      fs.existsSync(path.join(DASHBOARD_DIST, "index.html"))
        ? "dashboard: serving the build in dashboard/dist (Vite is not installed to rebuild it)\n"
        : "dashboard: not built, and Vite (a dev dependency) is not installed: run `npm run build` where it is\n",
    );
  } else {
    await buildDashboard();
  }
}
