/**
 * Queue schedules (docs/queues.md "Schedules"): the three RPCs of `QueueService` that set, list and delete
 * them, and the ticker, a housekeeping task run on every instance every `SCHEDULE_TICK_INTERVAL_MS`, that
 * puts each due tick's message (see `queue-schedule-store.ts` for why each tick is put exactly once).
 */
import type { ServiceImpl } from "@connectrpc/connect";
import { timestampDate, timestampFromDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { QueueService, type QueueScheduleSchema } from "../../gen/platform/queues/v1/queues_pb.js";
import { appOf } from "../core/auth.ts";
import { PlatformError, invalidArgument } from "../core/errors.ts";
import type { Db } from "../core/database/index.ts";
import type { HousekeepingTask } from "../core/housekeeping.ts";
import type { Metrics } from "../core/metrics.ts";
import { EVENTS_QUEUE } from "./queue-limits.ts";
import { checkQueueName } from "./queue-name.ts";
import { valueFromJsonText, valueToJsonText } from "./payload-value.ts";
import { checkCron } from "./schedule-cron.ts";
import { createScheduleStore, type CatchUp, type StoredSchedule } from "./queue-schedule-store.ts";
import type { WakeHub } from "./wake-hub.ts";

/** Schedules one app may have, over all its queues. */
const MAX_SCHEDULES_PER_APP = 100;
/** How often each instance looks for due ticks: well under the shortest interval (1 s). */
const SCHEDULE_TICK_INTERVAL_MS = 200;
/** Due schedules one transaction of the ticker claims. */
const SCHEDULE_TICK_BATCH = 100;

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
  housekeeping: HousekeepingTask;
  /** An app's schedules (of one queue, when given), for the operator, as the RPCs answer them. */
  list(appId: string, queue?: string): Promise<MessageInitShape<typeof QueueScheduleSchema>[]>;
}

export function createQueueSchedules(db: Db, hub: WakeHub, metrics: Metrics): QueueSchedules {
  const store = createScheduleStore(db);
  const ticks = metrics.counter(
    "queue_schedule_ticks_total",
    "Schedule ticks by outcome: put, skipped at the queue's depth cap (full), or missed while nothing ran.",
    ["outcome"],
  );
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
      async run(signal) {
        // Answers 0, not the ticks put: the scheduler logs what a task "removed", and a tick removes nothing
        // (the metric counts them).
        for (let more = true; more && !signal.aborted;) {
          const report = await store.fireDue(SCHEDULE_TICK_BATCH, (appId, queue) => hub.payload(appId, queue, 0));
          if (report.fired) ticks.inc({ outcome: "put" }, report.fired);
          if (report.skippedFull) ticks.inc({ outcome: "full" }, report.skippedFull);
          if (report.missed) ticks.inc({ outcome: "missed" }, report.missed);
          // Committed: this instance's consumers wake now, the others' through the NOTIFY of each put.
          for (const q of report.queues) hub.announce(q.appId, q.queue, Date.now());
          more = report.claimed === SCHEDULE_TICK_BATCH;
        }
        return 0;
      },
    },
  };
}
