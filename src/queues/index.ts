/**
 * The queues facility (docs/queues.md): wires its store, the wake-up hub,
 * the housekeeping sweeps, its one implementation and its REST routes. Other
 * facilities use only what this file exports (`PlatformEvents`).
 */
import { QueueService, type QueueScheduleSchema } from "../../gen/platform/queues/v1/queues_pb.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { Value } from "@bufbuild/protobuf/wkt";
import type { AppRecord } from "../core/apps/apps.ts";
import type { JsonValue } from "@bufbuild/protobuf";
import { createAppStore } from "../core/apps/app-store.ts";
import type { Db, Tx } from "../core/database/index.ts";
import type { Deps, Facility } from "../core/facility.ts";
import { createDeadLetterOperator, type DeadLetterOperator } from "./dead-letters.ts";
import { createEventFeed } from "./event-feed.ts";
import { eventFeedRoutes } from "./event-feed-routes.ts";
import { createEventFeedStore } from "./event-feed-store.ts";
import { queueOverview, type QueueOverview } from "./queue-overview-store.ts";
import { effectivePolicy, type PolicyChange, type QueuePolicy } from "./queue-policy.ts";
import { ACTIVITY_HOURS, DEAD_LETTER_SWEEP_INTERVAL_MS } from "./queue-limits.ts";
import {
  createQueueStore,
  type DeadLetterSelection,
  type PeekedMessage,
  type PeekPage,
  type QueueActivityHour,
  type StoredPolicy,
} from "./queue-store.ts";
import { registerQueueGauges } from "./queue-gauges.ts";
import { queueHousekeeping } from "./queue-housekeeping.ts";
import { queuesRoutes } from "./queues-routes.ts";
import { createQueueSchedules } from "./queue-schedules.ts";
import { scheduleRoutes } from "./queue-schedule-routes.ts";
import { createQueuesService, type PlatformEvents } from "./queues-service.ts";
import { createWakeHub } from "./wake-hub.ts";
import { createRateBucketStore } from "./rate-bucket-store.ts";
import { createRateGate } from "./rate-gate.ts";

export type { PlatformEvents } from "./queues-service.ts";
export { EVENTS_QUEUE } from "./queue-limits.ts";
export { isPeekPosition } from "./queue-store.ts";
export { checkQueueName } from "./queue-name.ts";

export type { DeadLetterSelection } from "./queue-store.ts";
export { policyChangeOf, policyMessage } from "./queue-policy.ts";
export type { QueuePolicy } from "./queue-policy.ts";
export type { StoredPolicy } from "./queue-store.ts";

/**
 * The queues facility's operations for the admin API: what an operator may see of and do to an app's
 * queues that the app itself may not. Each change runs on the operator's unit of work (`tx`) and commits
 * with the operator's other writes (the audit entry) or not at all; consumers are woken after the commit.
 */
export interface QueuesOperations {
  /** Waiting messages in claim order, after `after` (a peeked message's `position`) when given. */
  peek(page: PeekPage): Promise<PeekedMessage[]>;
  /** Deletes the queue's messages, the leased ones too; how many. */
  purge(tx: Tx, appId: string, queue: string): Promise<number>;
  /** The queue's puts and acks per UTC hour over the last `ACTIVITY_HOURS` hours, oldest first, zero-filled. */
  activity(appId: string, queue: string): Promise<QueueActivityHour[]>;
  /** A page of one queue's dead letters (see `DeadLetterOperator.list`). */
  listDeadLetters: DeadLetterOperator["list"];
  /** Back in line, visible now, deliveries 0, a fresh lifetime of `ttlSeconds`. How many. */
  replayDeadLetters(
    tx: Tx,
    appId: string,
    queue: string,
    which: DeadLetterSelection,
    ttlSeconds: number,
  ): Promise<number>;
  /** Deletes the selected dead letters; how many. */
  purgeDeadLetters(tx: Tx, appId: string, queue: string, which: DeadLetterSelection): Promise<number>;
  /** A test message on an app's queue, as the app would put it (in `groupKey`'s ordered group when given). Its id. */
  put(tx: Tx, app: AppRecord, queue: string, payload: Value | undefined, groupKey?: string): Promise<{ id: string }>;
  /** A platform event `{ kind, at, data }` on the app's `_events` queue and in the feed (AdminService `PublishEvent`). */
  publishEvent(tx: Tx, app: AppRecord, kind: string, data: JsonValue): Promise<{ id: string }>;
  /** Across apps, for the overview: messages and dead letters stored and the queues needing attention, bounded. */
  overview(oldAgeSeconds: number): Promise<QueueOverview>;
  /** A queue's policy as it applies, and as the app stored it (undefined: none set). */
  policy(app: AppRecord, queue: string): Promise<{ policy: QueuePolicy; stored: StoredPolicy | undefined }>;
  /** Changes a queue's policy as the app's UpdateQueuePolicy would. */
  setPolicy(tx: Tx, app: AppRecord, queue: string, change: PolicyChange): Promise<QueuePolicy>;
  /** An app's schedules (of one queue, when given), each with its next run (docs/queues.md "Schedules"). */
  schedules(appId: string, queue?: string): Promise<MessageInitShape<typeof QueueScheduleSchema>[]>;
}

export type QueuesFacility = Facility<typeof QueueService> & {
  readonly events: PlatformEvents;
  readonly operations: QueuesOperations;
};

export function createQueuesFacility(deps: Deps): QueuesFacility {
  const { logger, metrics } = deps;
  const store = createQueueStore(deps.db, deps.database.relaxedDb);
  const hub = createWakeHub(deps.database, store, logger);
  const rateBuckets = createRateBucketStore(deps.db);
  const housekeeping = queueHousekeeping(store, rateBuckets, metrics);
  registerQueueGauges(metrics, deps.db, deps.config.metrics.appsTop);
  const deadLetters = createDeadLetterOperator(store, hub);
  /** The dead letters on an operator's unit of work: consumers are woken once it committed. */
  const deadLettersOn = (tx: Tx) =>
    createDeadLetterOperator(createQueueStore(tx.db), hub, (wake) => tx.afterCommit(wake));
  const queues = createQueuesService({
    store,
    hub,
    logger,
    metrics,
    deadLetters,
    shutdownSignal: deps.shutdownSignal,
    rateGate: createRateGate(rateBuckets, logger, metrics),
    tracing: deps.tracing?.messaging,
  });

  const schedules = createQueueSchedules(deps.db, deps.database, hub, metrics);

  const feed = createEventFeed({
    store: createEventFeedStore(deps.db),
    database: deps.database,
    logger,
    metrics,
    shutdownSignal: deps.shutdownSignal,
  });
  /**
   * Every platform event goes on `_events` (docs/queues.md#platform-events) and into the feed that
   * every replica reads, in one transaction: in both or in neither.
   */
  async function publishOn(trx: Db, app: AppRecord, kind: string, data: JsonValue) {
    const at = Date.now();
    const result = await queues.events.put(trx, app, kind, at, data);
    await feed.append(app, kind, at, data)(trx);
    const committed = () => {
      queues.events.announce(app.id);
      feed.appended(app.id);
    };
    return { result, committed };
  }
  const events: PlatformEvents = {
    async publishIn(trx, appId, kind, data) {
      return (await publishOn(trx, await createAppStore(trx).get(appId), kind, data)).committed;
    },
  };

  return {
    service: QueueService,
    impl: { ...queues.impl, ...schedules.impl, readEventFeed: (req, context) => feed.readEventFeed(req, context) },
    routes: [...queuesRoutes, ...eventFeedRoutes, ...scheduleRoutes],
    events,
    operations: {
      peek: (page) => store.peek(page),
      purge: (tx, appId, queue) => createQueueStore(tx.db).purge(appId, queue),
      activity: (appId, queue) => store.activity(appId, queue, ACTIVITY_HOURS),
      listDeadLetters: (page) => deadLetters.list(page),
      replayDeadLetters: (tx, appId, queue, which, ttlSeconds) =>
        deadLettersOn(tx).replay(appId, queue, which, ttlSeconds),
      purgeDeadLetters: (tx, appId, queue, which) => deadLettersOn(tx).purge(appId, queue, which),
      put: (tx, app, queue, payload, groupKey) => queues.putAsOperator(tx, app, queue, payload, groupKey),
      async publishEvent(tx, app, kind, data) {
        const { result, committed } = await publishOn(tx.db, app, kind, data);
        tx.afterCommit(committed);
        return result;
      },
      overview: (oldAgeSeconds) => queueOverview(deps.db, oldAgeSeconds),
      async policy(app, queue) {
        const stored = await queues.policies.stored(app.id, queue);
        return { policy: effectivePolicy(app, stored), stored };
      },
      setPolicy: (tx, app, queue, change) => queues.policies.update(app, queue, change, tx),
      schedules: (appId, queue) => schedules.list(appId, queue),
    },
    housekeeping: () => [
      ...housekeeping,
      ...feed.housekeeping(),
      schedules.housekeeping,
      {
        name: "queue dead letters on time",
        intervalMs: DEAD_LETTER_SWEEP_INTERVAL_MS,
        run: (signal) => queues.buryLapsed((appId) => deps.apps.get(appId), signal),
      },
    ],
    async start() {
      await hub.start();
      await feed.start();
      await schedules.start();
    },
    async close() {
      await schedules.close();
      await feed.close();
      await hub.close();
    },
  };
}
