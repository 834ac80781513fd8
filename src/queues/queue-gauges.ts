/**
 * The queues' gauges of /metrics that describe every app's queues at once:
 * messages stored, dead letters stored, and the age of the longest-waiting
 * message (what the alerts of deploy/prometheus/alerts.yaml watch). Read from
 * the database when /metrics is scraped, at most once per
 * `QUEUE_GAUGES_EVERY_MS` on this instance, so puts and consumes pay nothing
 * for them; they carry no app or queue label (their number would grow with
 * the apps).
 */
import { atMostEvery, type Metrics } from "../core/metrics.ts";
import type { Db } from "../core/database/index.ts";
import { DEAD_LETTERS_COUNTED, queueTotals } from "./queue-attention-store.ts";

/** Scrapes closer together than this share one read. */
export const QUEUE_GAUGES_EVERY_MS = 10_000;

export function registerQueueGauges(metrics: Metrics, db: Db): void {
  const totals = atMostEvery(QUEUE_GAUGES_EVERY_MS, () => queueTotals(db));
  metrics.gauge("queue_messages", "Queue messages stored across apps: waiting, leased or held back.", [], async (g) =>
    g.set((await totals()).messages),
  );
  metrics.gauge(
    "queue_dead_letters",
    `Dead letters stored across apps (counted up to ${DEAD_LETTERS_COUNTED}).`,
    [],
    async (g) => g.set((await totals()).deadLetters),
  );
  metrics.gauge(
    "queue_oldest_waiting_seconds",
    "Seconds the longest-waiting message of any app's queue (_events aside) has been ready to consume; 0 when none waits.",
    [],
    async (g) => g.set((await totals()).oldestWaitingSeconds),
  );
}
