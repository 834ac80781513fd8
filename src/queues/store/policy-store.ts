/** Queue policies (`queue_policies`): a queue's stored policy, read and replaced. */
import { sql } from "kysely";
import { PREPARED, transact } from "../../core/database/index.ts";
import type { QueueDbs } from "./queue-tables.ts";
import type { StoredPolicy } from "./queue-types.ts";

/** A policy's row: every column null where the app kept the default (the doubles come as numbers). */
interface PolicyRow {
  max_deliveries: number | null;
  dead_letter_queue: string | null;
  retry_delay_seconds: number | null;
  retry_backoff: number | null;
  max_retry_delay_seconds: number | null;
  retry_jitter: number | null;
  lease_seconds: number | null;
  dedup_window_seconds: number | null;
  max_deliveries_per_second: number | null;
}

/** A row as the store returns it. */
const policyOf = (r: PolicyRow): StoredPolicy => ({
  maxDeliveries: r.max_deliveries,
  deadLetterQueue: r.dead_letter_queue,
  retryDelaySeconds: r.retry_delay_seconds,
  retryBackoff: r.retry_backoff,
  maxRetryDelaySeconds: r.max_retry_delay_seconds,
  retryJitter: r.retry_jitter,
  leaseSeconds: r.lease_seconds,
  dedupWindowSeconds: r.dedup_window_seconds,
  maxDeliveriesPerSecond: r.max_deliveries_per_second,
});

/** A queue's stored policy. */
export interface PolicyStore {
  /** A queue's policy as stored, or undefined when its app set none. */
  getPolicy(appId: string, queue: string): Promise<StoredPolicy | undefined>;
  /**
   * Replaces a queue's stored policy by `change(current)` (current: all null when none), serialised per queue.
   * A policy left without `maxDeliveriesPerSecond` deletes the queue's rate bucket in the same transaction.
   */
  updatePolicy(appId: string, queue: string, change: (current: StoredPolicy) => StoredPolicy): Promise<StoredPolicy>;
}

export function createPolicyStore({ db }: QueueDbs): PolicyStore {
  return {
    async getPolicy(appId, queue) {
      const { rows } = await sql<PolicyRow>`${PREPARED}
        SELECT max_deliveries, dead_letter_queue, retry_delay_seconds, retry_backoff, max_retry_delay_seconds,
               retry_jitter, lease_seconds, dedup_window_seconds, max_deliveries_per_second
        FROM queue_policies WHERE app_id = ${appId} AND queue = ${queue}`.execute(db);
      return rows[0] ? policyOf(rows[0]) : undefined;
    },
    updatePolicy(appId, queue, change) {
      return transact(db, async (trx) => {
        await sql`INSERT INTO queue_policies (app_id, queue) VALUES (${appId}, ${queue}) ON CONFLICT DO NOTHING`.execute(
          trx,
        );
        const { rows } = await sql<PolicyRow>`
          SELECT max_deliveries, dead_letter_queue, retry_delay_seconds, retry_backoff, max_retry_delay_seconds,
                 retry_jitter, lease_seconds, dedup_window_seconds, max_deliveries_per_second
          FROM queue_policies WHERE app_id = ${appId} AND queue = ${queue} FOR UPDATE`.execute(trx);
        const next = change(policyOf(rows[0]));
        await sql`
          UPDATE queue_policies
          SET max_deliveries = ${next.maxDeliveries}, dead_letter_queue = ${next.deadLetterQueue},
              retry_delay_seconds = ${next.retryDelaySeconds}, retry_backoff = ${next.retryBackoff},
              max_retry_delay_seconds = ${next.maxRetryDelaySeconds}, retry_jitter = ${next.retryJitter},
              lease_seconds = ${next.leaseSeconds},
              dedup_window_seconds = ${next.dedupWindowSeconds},
              max_deliveries_per_second = ${next.maxDeliveriesPerSecond}, updated_at = now()
          WHERE app_id = ${appId} AND queue = ${queue}`.execute(trx);
        // A queue without a limit takes no token: its bucket goes with the limit, in this transaction, so
        // no row outlives the policy that made it (a take on a stale policy is swept by housekeeping).
        if (next.maxDeliveriesPerSecond === null)
          await sql`DELETE FROM queue_rate_buckets WHERE app_id = ${appId} AND queue = ${queue}`.execute(trx);
        return next;
      });
    },
  };
}
