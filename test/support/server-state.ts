/**
 * What a test reads of a server's own bookkeeping (its metrics), and a wait
 * for it: the moments a test cannot await directly, such as a consume having
 * started to wait or a stream having ended on the server.
 */
import { sql } from "kysely";
import type { TestServer } from "./harness.ts";
import { tables } from "./tables.ts";

/** A metric of the server (a counter or a gauge), summed over its labels. */
export function metricValue(server: TestServer, name: string): number {
  const metric = server.server.deps.metrics.registry.getSingleMetric(name) as unknown as
    { hashMap: Record<string, { value: number }> } | undefined;
  if (!metric) throw new Error(`no metric ${name}`);
  return Object.values(metric.hashMap).reduce((sum, v) => sum + v.value, 0);
}

/** Resolves once `check()` holds, checked each turn of the event loop; throws after `ms`, naming `what`. */
export async function until(check: () => boolean, what: string, ms = 10_000): Promise<void> {
  const started = Date.now();
  while (!check()) {
    if (Date.now() - started > ms) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setImmediate(resolve));
  }
}

/** Time passing, without sleeping: every lease and retry hold of the app's queue ends now. */
export async function lapseQueue(server: TestServer, appId: string, queue: string): Promise<void> {
  await sql`UPDATE queue_messages SET visible_at = now() - interval '1 millisecond',
                   lease_until = least(lease_until, now() - interval '1 millisecond')
            WHERE app_id = ${appId} AND queue = ${queue}`.execute(tables(server.server.deps.db));
}
