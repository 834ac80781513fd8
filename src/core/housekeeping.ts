/**
 * The periodic jobs of every facility (retention, expired links), run by one
 * scheduler on every instance. Each task works in bounded batches with
 * `SKIP LOCKED` or keyed deletes, so instances share the work instead of
 * waiting on each other, and a run never overlaps the previous run of the
 * same task. A failure is logged (once per outage when the database is
 * unreachable) and the next run tries again. `stop()` ends the runs under way
 * between two batches and waits for them, so a server that closes never has a
 * task's statement cut by the database's close (logged as a failed task).
 */
import type { Logger } from "pino";
import type { DatabaseHealth } from "./database/index.ts";
import { retentionCutoff } from "./apps/apps.ts";
import { HOUR_MS } from "./time.ts";

export interface HousekeepingTask {
  /** For the log and the metrics: e.g. `mail retention`. */
  readonly name: string;
  readonly intervalMs: number;
  /** One pass; resolves to how many rows it removed. Ends early, between two batches, once `signal` aborts. */
  run(signal: AbortSignal): Promise<number>;
}

export interface Housekeeping {
  start(): void;
  /** No more runs; the runs under way end after their current batch, and this resolves when they have. */
  stop(): Promise<void>;
  /** Runs every task once now, in order (for tests and for an operator's command). */
  runAll(): Promise<Record<string, number>>;
}

/** How often retention runs: hourly, since retention is counted in whole days. */
export const RETENTION_INTERVAL_MS = HOUR_MS;

/** Rows one statement of a housekeeping task may touch: small enough to hold no lock for long. */
export const HOUSEKEEPING_BATCH = 1000;

/** Calls `step(batch)` until it removes fewer than a batch, or `signal` aborts; the total removed. */
export async function inBatches(
  signal: AbortSignal,
  step: (batch: number) => Promise<number>,
  batch = HOUSEKEEPING_BATCH,
): Promise<number> {
  let total = 0;
  for (let n = batch; n === batch && !signal.aborted;) {
    n = await step(batch);
    total += n;
  }
  return total;
}

/** A task that runs `step` every `intervalMs`, in batches (`inBatches`): a sweep of rows past their time. */
export function batchedTask(
  name: string,
  intervalMs: number,
  step: (batch: number) => Promise<number>,
  batch = HOUSEKEEPING_BATCH,
): HousekeepingTask {
  return { name, intervalMs, run: (signal) => inBatches(signal, step, batch) };
}

/**
 * Runs `step` for each app in turn and sums what they removed. An app whose
 * step fails does not stop the others (else one app that always fails, say a
 * statement past its timeout, would keep every app after it from ever being
 * swept); the first failure is thrown once all were tried.
 */
async function sumOverApps<A>(
  signal: AbortSignal,
  apps: readonly A[],
  step: (app: A) => Promise<number>,
): Promise<number> {
  let removed = 0;
  let failure: Error | undefined;
  for (const app of apps) {
    if (signal.aborted) break;
    try {
      removed += await step(app);
    } catch (err) {
      failure ??= err instanceof Error ? err : new Error(String(err));
    }
  }
  if (failure !== undefined) throw failure;
  return removed;
}

/**
 * A retention task: for every app, deletes what is older than the app's
 * `retentionDays` (from the start of that UTC day), in batches; one app that
 * fails does not stop the others (`sumOverApps`).
 */
export function retentionTask(
  name: string,
  apps: { list(): Promise<readonly { id: string; limits: { retentionDays: number } }[]> },
  deleteBefore: (appId: string, before: Date, batch: number) => Promise<number>,
): HousekeepingTask {
  return {
    name,
    intervalMs: RETENTION_INTERVAL_MS,
    async run(signal) {
      return sumOverApps(signal, await apps.list(), (app) => {
        const before = retentionCutoff(app.limits.retentionDays);
        return inBatches(signal, (batch) => deleteBefore(app.id, before, batch));
      });
    },
  };
}

/**
 * An orphan sweep, for data kept outside the platform database (analytics
 * events on MongoDB), which does not go with its app's row: an insert that
 * was under way while the app was deleted lands after the deletion of its
 * data. Hourly, removes the data of every app the store holds that no longer
 * exists. The store is asked before the apps are listed, so an app created in
 * between cannot look deleted (a new app has no data before it exists, and a
 * deleted app never comes back).
 */
export function orphanSweepTask(
  name: string,
  storeApps: () => Promise<readonly string[]>,
  apps: { list(): Promise<readonly { id: string }[]> },
  deleteApp: (appId: string) => Promise<number>,
): HousekeepingTask {
  return {
    name,
    intervalMs: RETENTION_INTERVAL_MS,
    async run(signal) {
      const held = await storeApps();
      const existing = new Set((await apps.list()).map((app) => app.id));
      return sumOverApps(
        signal,
        held.filter((appId) => !existing.has(appId)),
        (appId) => deleteApp(appId),
      );
    },
  };
}

export function createHousekeeping(
  tasks: readonly HousekeepingTask[],
  options: { logger: Logger; health: DatabaseHealth },
): Housekeeping {
  const timers: NodeJS.Timeout[] = [];
  // The run under way of each task, by name: a task never overlaps itself, and `stop` waits for these.
  const running = new Map<string, Promise<number>>();
  const stopping = new AbortController();
  const runOne = async (task: HousekeepingTask): Promise<number> => {
    if (running.has(task.name) || stopping.signal.aborted) return 0;
    const run = runTask(task).finally(() => running.delete(task.name));
    running.set(task.name, run);
    return run;
  };
  const runTask = async (task: HousekeepingTask): Promise<number> => {
    try {
      const removed = await task.run(stopping.signal);
      if (removed > 0) options.logger.info({ task: task.name, removed }, "housekeeping");
      return removed;
    } catch (err) {
      if (!options.health.failed(err))
        options.logger.warn(
          { task: task.name, err: err instanceof Error ? err.message : String(err) },
          "housekeeping task failed",
        );
      return 0;
    }
  };
  return {
    start() {
      for (const task of tasks) {
        const timer = setInterval(() => void runOne(task), task.intervalMs);
        timer.unref();
        timers.push(timer);
      }
    },
    async stop() {
      for (const timer of timers.splice(0)) clearInterval(timer);
      stopping.abort();
      await Promise.all(running.values());
    },
    async runAll() {
      const out: Record<string, number> = {};
      for (const task of tasks) out[task.name] = await runOne(task);
      return out;
    },
  };
}
