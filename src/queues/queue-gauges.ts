/**
 * The queues' gauges of /metrics that describe every app's queues at once:
 * messages stored, dead letters stored, and the age of the longest-waiting
 * message (what the alerts of deploy/prometheus/alerts.yaml watch). Read from
 * the database when /metrics is scraped, at most once per
 * `QUEUE_GAUGES_EVERY_MS` on this instance, so puts and consumes pay nothing
 * for them; they carry no app or queue label (their number would grow with
 * the apps). The `app_queue_*` gauges say the same per app, bounded to the
 * top `METRICS_APPS_TOP` apps per gauge plus one `app="_other"` series
 * (`foldTopApps`), from one more statement per read.
 */
import { atMostEvery, foldTopApps, type Metrics } from "../core/metrics.ts";
import type { Db } from "../core/database/index.ts";
import { appQueueFigures, DEAD_LETTERS_COUNTED, queueTotals, type AppQueueFigures } from "./queue-attention-store.ts";

/** Scrapes closer together than this share one read. */
const QUEUE_GAUGES_EVERY_MS = 10_000;

export function registerQueueGauges(metrics: Metrics, db: Db, appsTop: number): void {
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

  const perApp = atMostEvery(QUEUE_GAUGES_EVERY_MS, () => appQueueFigures(db));
  const appGauge = (name: string, help: string, figure: keyof Omit<AppQueueFigures, "app">, fold: "sum" | "max") =>
    metrics.gauge(name, help, ["app"], async (g) => {
      const figures = await perApp();
      // Apps that left the top since the last scrape lose their series.
      g.reset();
      for (const { app, value } of foldTopApps(
        figures.map((f) => ({ app: f.app, value: f[figure] })),
        appsTop,
        fold,
      )) {
        g.set({ app }, value);
      }
    });
  appGauge(
    "app_queue_messages",
    'Queue messages an app has stored (waiting, leased or held back); the top METRICS_APPS_TOP apps, the rest summed in app="_other".',
    "messages",
    "sum",
  );
  appGauge(
    "app_queue_dead_letters",
    `Dead letters an app has stored (all apps counted up to ${DEAD_LETTERS_COUNTED}); the top METRICS_APPS_TOP apps, the rest summed in app="_other".`,
    "deadLetters",
    "sum",
  );
  appGauge(
    "app_queue_oldest_waiting_seconds",
    'Seconds the longest-waiting message of an app\'s queues (_events aside) has been ready to consume; the top METRICS_APPS_TOP apps, the largest of the rest in app="_other".',
    "oldestWaitingSeconds",
    "max",
  );
}
