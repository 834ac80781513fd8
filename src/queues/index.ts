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
import { inTransaction, type Db, type InTransaction } from "../core/database/index.ts";
import type { Deps, Facility } from "../core/facility.ts";
import { createDeadLetterOperator, type DeadLetterOperator } from "./dead-letters.ts";
import { createEventFeed } from "./event-feed.ts";
import { eventFeedRoutes } from "./event-feed-routes.ts";
import { createEventFeedStore } from "./event-feed-store.ts";
import { queuesNeedingAttention, type QueueAttentionRow } from "./queue-attention-store.ts";
import { queueOverview, type QueueOverview } from "./queue-overview-store.ts";
import { effectivePolicy, type PolicyChange, type QueuePolicy } from "./queue-policy.ts";
import { ACTIVITY_HOURS, DEAD_LETTER_SWEEP_INTERVAL_MS } from "./queue-limits.ts";
import { createQueueStore, type PeekedMessage, type QueueActivityHour, type StoredPolicy } from "./queue-store.ts";
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

export type { PeekedMessage, QueueActivityHour, DeadLetter, DeadLetterSelection } from "./queue-store.ts";
export type { DeadLetterOperator, DeadLetterPage } from "./dead-letters.ts";
export type { QueueAttentionRow } from "./queue-attention-store.ts";
export type { QueueOverview } from "./queue-overview-store.ts";
export type { PolicyChange, QueuePolicy } from "./queue-policy.ts";
export type { StoredPolicy } from "./queue-store.ts";

/** What the operator may do to an app's queues that the app itself may not (AdminService). */
export interface QueueOperator {
  /** Waiting messages in claim order, after `after` (a peeked message's `position`) when given. */
  peek(appId: string, queue: string, limit: number, maxChars: number, after?: string): Promise<PeekedMessage[]>;
  /** `within` runs in the purge's transaction: the operator's audit entry commits with it or not at all. */
  purge(appId: string, queue: string, within?: InTransaction): Promise<number>;
  /** The queue's puts and acks per UTC hour over the last `ACTIVITY_HOURS` hours, oldest first, zero-filled. */
  activity(appId: string, queue: string): Promise<QueueActivityHour[]>;
  deadLetters: DeadLetterOperator;
  /** A test message on an app's queue, as the app would put it; `within` (the audit entry) commits with it. Its id. */
  put(
    app: AppRecord,
    queue: string,
    payload: Value | undefined,
    within?: InTransaction,
    groupKey?: string,
  ): Promise<{ id: string }>;
  /** Across apps, for the overview: queues with dead letters or a waiting message older than `oldAgeSeconds`. */
  attention(oldAgeSeconds: number): Promise<QueueAttentionRow[]>;
  /** Across apps, for the overview: messages and dead letters stored and the queues needing attention, bounded. */
  overview(oldAgeSeconds: number): Promise<QueueOverview>;
  /** A queue's policy as it applies, and as the app stored it (undefined: none set). */
  policy(app: AppRecord, queue: string): Promise<{ policy: QueuePolicy; stored: StoredPolicy | undefined }>;
  /** Changes a queue's policy as the app's UpdateQueuePolicy would; `within` (the audit entry) commits with it. */
  setPolicy(app: AppRecord, queue: string, change: PolicyChange, within?: InTransaction): Promise<QueuePolicy>;
  /** An app's schedules (of one queue, when given), each with its next run (docs/queues.md "Schedules"). */
  schedules(appId: string, queue?: string): Promise<MessageInitShape<typeof QueueScheduleSchema>[]>;
}

export type QueuesFacility = Facility<typeof QueueService> & {
  readonly events: PlatformEvents;
  readonly operator: QueueOperator;
};

export function createQueuesFacility(deps: Deps): QueuesFacility {
  const { logger, metrics } = deps;
  const store = createQueueStore(deps.db, deps.database.relaxedDb);
  const hub = createWakeHub(deps.database, store, logger);
  const housekeeping = queueHousekeeping(store, metrics);
  registerQueueGauges(metrics, deps.db, deps.config.metrics.appsTop);
  const deadLetters = createDeadLetterOperator(store, hub);
  const queues = createQueuesService({
    store,
    hub,
    logger,
    metrics,
    deadLetters,
    shutdownSignal: deps.shutdownSignal,
    rateGate: createRateGate(createRateBucketStore(deps.db), logger, metrics),
    tracing: deps.tracing?.messaging,
  });

  const schedules = createQueueSchedules(deps.db, hub, metrics);

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
    async publish(appId, kind, data, within) {
      // The app is read before the transaction: on PGlite's one connection a read outside it would wait for it.
      const app = await deps.apps.get(appId);
      const { result, committed } = await inTransaction(deps.db, async (trx) => {
        const published = await publishOn(trx, app, kind, data);
        await within?.(trx);
        return published;
      });
      committed();
      return result;
    },
    async publishIn(trx, appId, kind, data) {
      return (await publishOn(trx, await createAppStore(trx).get(appId), kind, data)).committed;
    },
  };

  return {
    service: QueueService,
    impl: { ...queues.impl, ...schedules.impl, readEventFeed: (req, context) => feed.readEventFeed(req, context) },
    routes: [...queuesRoutes, ...eventFeedRoutes, ...scheduleRoutes],
    events,
    operator: {
      peek: (...args) => store.peek(...args),
      purge: (...args) => store.purge(...args),
      activity: (appId, queue) => store.activity(appId, queue, ACTIVITY_HOURS),
      deadLetters,
      put: (app, queue, payload, within, groupKey) => queues.putAsOperator(app, queue, payload, within, groupKey),
      attention: (oldAgeSeconds) => queuesNeedingAttention(deps.db, oldAgeSeconds),
      overview: (oldAgeSeconds) => queueOverview(deps.db, oldAgeSeconds),
      async policy(app, queue) {
        const stored = await queues.policies.stored(app.id, queue);
        return { policy: effectivePolicy(app, stored), stored };
      },
      setPolicy: (app, queue, change, within) => queues.policies.update(app, queue, change, within),
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
    },
    async close() {
      await feed.close();
      await hub.close();
    },
  };
}
