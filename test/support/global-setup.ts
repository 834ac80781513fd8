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
import pg from "pg";
import { ensureChromium } from "./chromium.ts";

/**
 * In a run without DATABASE_URL (PGlite), the PostgreSQL-only tests still run when a PostgreSQL
 * answers on 127.0.0.1:5432 (`describeOnPostgres` in harness.ts reads PB_TEST_POSTGRES_URL, which
 * the test processes inherit from this one); when none does, one line says they are skipped.
 * TEST_POSTGRES=off skips them on purpose (CI's PGlite run: its PostgreSQL run has run them).
 */
async function findPostgres(): Promise<void> {
  if (process.env.DATABASE_URL) return;
  const url = "postgres://postgres@127.0.0.1:5432/postgres";
  if (process.env.TEST_POSTGRES === "off") {
    process.stderr.write("PostgreSQL-only tests skipped: TEST_POSTGRES=off\n");
    return;
  }
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 });
  try {
    await client.connect();
    await client.query("SELECT 1");
    process.env.PB_TEST_POSTGRES_URL = url;
  } catch {
    process.stderr.write(
      "PostgreSQL-only tests skipped: DATABASE_URL is not set and no PostgreSQL answers on 127.0.0.1:5432\n",
    );
  } finally {
    await client.end().catch(() => {});
  }
}

export default async function setup(): Promise<void> {
  await findPostgres();
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
