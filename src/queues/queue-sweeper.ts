/**
 * The queue's housekeeping, on every instance: expired waiting messages are
 * deleted every `EXPIRE_INTERVAL_MS`, messages of deleted apps every
 * `ORPHAN_INTERVAL_MS`, in batches of `EXPIRE_BATCH` (`SKIP LOCKED`, so
 * instances share the work instead of waiting on each other).
 */
import type { Logger } from "pino";
import type { Metrics } from "../core/metrics.ts";
import { EXPIRE_BATCH, EXPIRE_INTERVAL_MS, ORPHAN_INTERVAL_MS } from "./queue-limits.ts";
import type { QueueStore } from "./queue-store.ts";

export interface QueueSweeper {
  start(): void;
  stop(): void;
}

export function createQueueSweeper(store: QueueStore, logger: Logger, metrics: Metrics): QueueSweeper {
  const expired = metrics.counter("queue_messages_expired_total", "Waiting messages dropped at their expiresAt.", []);
  const timers: NodeJS.Timeout[] = [];
  let stopped = false;

  async function sweep(): Promise<void> {
    try {
      for (let n = EXPIRE_BATCH; n === EXPIRE_BATCH && !stopped; ) {
        n = await store.expire(EXPIRE_BATCH);
        if (n > 0) expired.inc(n);
      }
    } catch (err) {
      logger.warn({ err: (err as Error).message }, "queue expiry sweep failed");
    }
  }

  async function sweepOrphans(): Promise<void> {
    try {
      for (let n = EXPIRE_BATCH; n === EXPIRE_BATCH && !stopped; ) n = await store.deleteOrphans(EXPIRE_BATCH);
    } catch (err) {
      logger.warn({ err: (err as Error).message }, "queue sweep of deleted apps failed");
    }
  }

  return {
    start() {
      const expiry = setInterval(() => void sweep(), EXPIRE_INTERVAL_MS);
      const orphans = setInterval(() => void sweepOrphans(), ORPHAN_INTERVAL_MS);
      expiry.unref();
      orphans.unref();
      timers.push(expiry, orphans);
    },
    stop() {
      stopped = true;
      for (const t of timers) clearInterval(t);
    },
  };
}
