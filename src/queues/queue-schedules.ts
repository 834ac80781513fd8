/**
 * Queue schedules (docs/queues.md "Schedules"): the three RPCs of `QueueService` that set, list and delete
 * them, and the ticker of every instance, woken by a timer when the next tick is due (`createTicker`) and by a
 * housekeeping look every `SCHEDULE_TICK_INTERVAL_MS`, that puts each due tick's message (see
 * `queue-schedule-store.ts` for why each tick is put exactly once).
 */
import type { ServiceImpl } from "@connectrpc/connect";
import { timestampDate, timestampFromDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { QueueService, type QueueScheduleSchema } from "../../gen/platform/queues/v1/queues_pb.js";
import { appOf } from "../core/auth.ts";
import { PlatformError, invalidArgument } from "../core/errors.ts";
import type { Database, Db } from "../core/database/index.ts";
import type { HousekeepingTask } from "../core/housekeeping.ts";
import type { Metrics } from "../core/metrics.ts";
import { EVENTS_QUEUE } from "./queue-limits.ts";
import { checkQueueName } from "./queue-name.ts";
import { valueFromJsonText, valueToJsonText } from "./payload-value.ts";
import { checkCron } from "./schedule-cron.ts";
import { createScheduleStore, SCHEDULE_CHANNEL, type CatchUp, type StoredSchedule } from "./queue-schedule-store.ts";
import type { WakeHub } from "./wake-hub.ts";

/** Schedules one app may have, over all its queues. */
const MAX_SCHEDULES_PER_APP = 100;
/**
 * How often each instance looks for due ticks without being told. A pass learns when the next tick is due
 * and sets a timer for that moment (see `createTicker`), and setting a schedule on any instance announces its
 * first tick (`SCHEDULE_CHANNEL`); so this look is a safety net (a notification lost while the listening
 * connection was down), and bounds how late a tick can be only then. Each look is one transaction of every
 * instance, idle or not.
 */
const SCHEDULE_TICK_INTERVAL_MS = 1000;
/**
 * Due schedules one transaction of the ticker claims, and so at most the queues whose locks it holds at once
 * (an advisory lock each, in the lock table sized by `max_locks_per_transaction`).
 */
const SCHEDULE_TICK_BATCH = 500;
/** A timer is set for a tick due at most this far ahead; a later one is learnt again by a later look. */
const TIMER_HORIZON_MS = 10_000;

const SCHEDULE_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

type ScheduleRpcs = Pick<
  ServiceImpl<typeof QueueService>,
  "putQueueSchedule" | "listQueueSchedules" | "deleteQueueSchedule"
>;

const ts = (d: Date | null) => (d ? timestampFromDate(d) : undefined);

function scheduleMessage(s: StoredSchedule): MessageInitShape<typeof QueueScheduleSchema> {
  return {
    queue: s.queue,
    name: s.name,
    cron: s.cron,
    timezone: s.timezone,
    payload: valueFromJsonText(s.payload),
    startAt: ts(s.startAt),
    endAt: ts(s.endAt),
    catchUp: s.catchUp,
    nextRunAt: ts(s.nextRunAt),
    lastRunAt: ts(s.lastRunAt),
    fired: BigInt(s.fired),
    skippedFull: BigInt(s.skippedFull),
    missed: BigInt(s.missed),
  };
}

function checkScheduleQueue(name: string): string {
  const queue = checkQueueName(name, true);
  if (queue === EVENTS_QUEUE)
    throw new PlatformError(
      "permission_denied",
      `${EVENTS_QUEUE} is the platform's events queue; apps cannot put on it`,
    );
  return queue;
}

function checkScheduleName(name: string): string {
  if (!SCHEDULE_NAME.test(name)) throw invalidArgument("name", "must match ^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$");
  return name;
}

const dateOf = (t: Timestamp | undefined) => (t ? timestampDate(t) : null);

export interface QueueSchedules {
  impl: ScheduleRpcs;
  /** The ticker's regular look (every `SCHEDULE_TICK_INTERVAL_MS`), which also sets its timer. */
  housekeeping: HousekeepingTask;
  /** Listens for schedules set on any instance (their first tick sets the ticker's timer). */
  start(): Promise<void>;
  /** Ends the ticker's timer and waits for the pass under way. */
  close(): Promise<void>;
  /** An app's schedules (of one queue, when given), for the operator, as the RPCs answer them. */
  list(appId: string, queue?: string): Promise<MessageInitShape<typeof QueueScheduleSchema>[]>;
}

export function createQueueSchedules(db: Db, database: Database, hub: WakeHub, metrics: Metrics): QueueSchedules {
  const store = createScheduleStore(db);
  const ticks = metrics.counter(
    "queue_schedule_ticks_total",
    "Schedule ticks by outcome: put, skipped at the queue's depth cap (full), or missed while nothing ran.",
    ["outcome"],
  );
  let unlisten: (() => Promise<void>) | undefined;
  const ticker = createTicker(async (signal) => {
    let upcoming: number | null = null;
    const batch = async (fromEnd: boolean) => {
      const report = await store.fireDue(SCHEDULE_TICK_BATCH, (appId, queue) => hub.payload(appId, queue, 0), fromEnd);
      if (report.fired) ticks.inc({ outcome: "put" }, report.fired);
      if (report.skippedFull) ticks.inc({ outcome: "full" }, report.skippedFull);
      if (report.missed) ticks.inc({ outcome: "missed" }, report.missed);
      // Committed: this instance's consumers wake now, the others' through the NOTIFY of the put.
      for (const q of report.queues) hub.announce(q.appId, q.queue, Date.now());
      if (report.upcoming !== null && (upcoming === null || report.upcoming < upcoming)) upcoming = report.upcoming;
      return report.claimed === SCHEDULE_TICK_BATCH;
    };
    // Two batches at once, from the two ends of the due schedules (see `fireDue`): the second's statements run
    // while the first's wait on the database, and the ticks due together are put in about half the time.
    for (let more = true; more && !signal.aborted;) {
      const [first, last] = await Promise.all([batch(false), batch(true)]);
      more = first || last;
    }
    return { upcoming };
  });
  return {
    list: async (appId, queue) => (await store.list(appId, queue)).map(scheduleMessage),
    impl: {
      async putQueueSchedule(req, context) {
        const app = appOf(context);
        const queue = checkScheduleQueue(req.queue);
        const name = checkScheduleName(req.name);
        const timezone = req.timezone ?? "UTC";
        checkCron(req.cron, timezone);
        if (req.payload === undefined) throw invalidArgument("payload", "is required");
        const payload = valueToJsonText(req.payload);
        const bytes = Buffer.byteLength(payload, "utf8");
        if (bytes > app.limits.maxPayloadBytes)
          throw invalidArgument(
            "payload",
            `must be at most ${app.limits.maxPayloadBytes} bytes as JSON (was ${bytes})`,
          );
        const catchUp = (req.catchUp ?? "none") as CatchUp;
        if (catchUp !== "none" && catchUp !== "one") throw invalidArgument("catchUp", 'must be "none" or "one"');
        const startAt = dateOf(req.startAt);
        const endAt = dateOf(req.endAt);
        if (startAt && endAt && endAt.getTime() <= startAt.getTime())
          throw invalidArgument("endAt", "must be after startAt");
        const schedule = await store.put(
          app.id,
          queue,
          name,
          { cron: req.cron.trim(), timezone, payload, startAt, endAt, catchUp },
          MAX_SCHEDULES_PER_APP,
        );
        if (schedule.nextRunAt) ticker.wakeAt(schedule.nextRunAt.getTime());
        return { schedule: scheduleMessage(schedule) };
      },
      async listQueueSchedules(req, context) {
        const app = appOf(context);
        const queue = checkQueueName(req.queue, true);
        return { schedules: (await store.list(app.id, queue)).map(scheduleMessage) };
      },
      async deleteQueueSchedule(req, context) {
        const app = appOf(context);
        const queue = checkQueueName(req.queue, true);
        const name = checkScheduleName(req.name);
        if (!(await store.delete(app.id, queue, name)))
          throw new PlatformError("not_found", `no schedule ${name} on queue ${queue}`);
        return {};
      },
    },
    housekeeping: {
      name: "queue schedules",
      intervalMs: SCHEDULE_TICK_INTERVAL_MS,
      // Answers 0, not the ticks put: the scheduler logs what a task "removed", and a tick removes nothing
      // (the metric counts them).
      run: async (signal) => {
        await ticker.pass(signal);
        return 0;
      },
    },
    async start() {
      unlisten = await database.listen(
        SCHEDULE_CHANNEL,
        (payload) => {
          const at = Number(payload);
          if (Number.isFinite(at)) ticker.wakeAt(at);
        },
        // Notifications may have been lost while the connection was down: look now.
        () => ticker.wakeAt(Date.now()),
      );
    },
    async close() {
      await unlisten?.();
      await ticker.close();
    },
  };
}

interface Ticker {
  /** Puts every due tick now (batch after batch), or, when a pass is under way, once more after it. */
  pass(signal: AbortSignal): Promise<void>;
  /** Wakes the ticker at `atMs` (a schedule set on this instance). */
  wakeAt(atMs: number): void;
  close(): Promise<void>;
}

/**
 * The ticker of one instance. A pass ends knowing when the next tick is due (of any schedule, claimed by it
 * or not) and sets one timer for that moment, so a tick is put when it is due rather than at the next look
 * of the housekeeping (up to its interval late). Every instance wakes at the same moment; their claims
 * (`FOR UPDATE SKIP LOCKED`) share the due schedules. Passes never overlap: a wake during a pass makes one
 * more pass after it. Once the housekeeping stops (its signal aborts), no timer is set again.
 */
function createTicker(fire: (signal: AbortSignal) => Promise<{ upcoming: number | null }>): Ticker {
  let running: Promise<void> | undefined;
  let again = false;
  let closed = false;
  let timer: { at: number; handle: NodeJS.Timeout } | undefined;
  let lastSignal: AbortSignal | undefined;

  const arm = (atMs: number) => {
    if (closed || lastSignal?.aborted || atMs > Date.now() + TIMER_HORIZON_MS) return;
    if (timer && timer.at <= atMs) return;
    if (timer) clearTimeout(timer.handle);
    const handle = setTimeout(
      () => {
        timer = undefined;
        if (lastSignal) void ticker.pass(lastSignal).catch(() => undefined);
      },
      Math.max(0, atMs - Date.now()),
    );
    handle.unref();
    timer = { at: atMs, handle };
  };

  const ticker: Ticker = {
    pass(signal) {
      lastSignal = signal;
      if (running) {
        again = true;
        return running;
      }
      running = (async () => {
        try {
          do {
            again = false;
            const { upcoming } = await fire(signal);
            if (upcoming !== null) arm(upcoming);
          } while (again && !signal.aborted && !closed);
        } finally {
          running = undefined;
        }
      })();
      return running;
    },
    wakeAt: arm,
    async close() {
      closed = true;
      if (timer) clearTimeout(timer.handle);
      timer = undefined;
      await running?.catch(() => undefined);
    },
  };
  return ticker;
}
