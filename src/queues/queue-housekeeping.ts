/**
 * The queue's housekeeping, run by the one scheduler of
 * `core/housekeeping.ts` on every instance, beside the other facilities'
 * jobs: expired waiting messages are deleted every `EXPIRE_INTERVAL_MS`,
 * expired dead letters and put dedup keys past their window every
 * `DEAD_LETTER_EXPIRE_INTERVAL_MS` (as are hourly put and ack counts older
 * than `ACTIVITY_KEEP_HOURS`, dead-letter count rows that sum to 0 and the
 * rate buckets of queues without a limit or idle `RATE_BUCKET_IDLE_SECONDS`), messages and
 * dead letters of deleted apps every `ORPHAN_INTERVAL_MS`, in batches of
 * `EXPIRE_BATCH` (`SKIP LOCKED`, so instances share the work instead of
 * waiting on each other).
 */
import type { Metrics } from "../core/metrics.ts";
import { batchedTask, inBatches, type HousekeepingTask } from "../core/housekeeping.ts";
import {
  ACTIVITY_KEEP_HOURS,
  DEAD_LETTER_EXPIRE_INTERVAL_MS,
  EXPIRE_BATCH,
  EXPIRE_INTERVAL_MS,
  ORPHAN_INTERVAL_MS,
  RATE_BUCKET_IDLE_SECONDS,
} from "./queue-limits.ts";
import type { QueueStore } from "./queue-store.ts";
import type { RateBucketStore } from "./rate-bucket-store.ts";

export function queueHousekeeping(
  store: QueueStore,
  rateBuckets: RateBucketStore,
  metrics: Metrics,
): HousekeepingTask[] {
  /** A sweep run every `DEAD_LETTER_EXPIRE_INTERVAL_MS`, in batches of `EXPIRE_BATCH`. */
  const sweep = (name: string, step: (batch: number) => Promise<number>) =>
    batchedTask(name, DEAD_LETTER_EXPIRE_INTERVAL_MS, step, EXPIRE_BATCH);
  const expired = metrics.counter("queue_messages_expired_total", "Waiting messages dropped at their expiresAt.", []);
  return [
    {
      name: "queue expiry",
      intervalMs: EXPIRE_INTERVAL_MS,
      async run(signal) {
        const n = await inBatches(signal, (batch) => store.expire(batch), EXPIRE_BATCH);
        if (n > 0) expired.inc(n);
        return n;
      },
    },
    sweep("queue dead-letter expiry", (batch) => store.expireDeadLetters(batch)),
    sweep("queue dedup keys", (batch) => store.expireDedupKeys(batch)),
    sweep("queue count slots", (batch) => store.compactCounts(batch)),
    sweep("queue dead-letter counts", (batch) => store.compactDeadLetterCounts(batch)),
    sweep("queue rate buckets", (batch) => rateBuckets.sweep({ idleSeconds: RATE_BUCKET_IDLE_SECONDS, limit: batch })),
    sweep("queue activity hours", (batch) => store.pruneActivity({ keepHours: ACTIVITY_KEEP_HOURS, limit: batch })),
    {
      name: "queue messages of deleted apps",
      intervalMs: ORPHAN_INTERVAL_MS,
      run: async (signal) =>
        (await inBatches(signal, (batch) => store.deleteOrphans(batch), EXPIRE_BATCH)) +
        (await inBatches(signal, (batch) => store.deleteDeadLetterOrphans(batch), EXPIRE_BATCH)) +
        (await store.deleteControlOrphans(EXPIRE_BATCH)),
    },
  ];
}
