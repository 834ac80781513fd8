/**
 * The queues facility (SPEC.md "Queues"): wires its store, the wake-up hub,
 * the housekeeping sweeps, its one implementation and its REST routes. Other
 * facilities use only what this file exports (`PlatformEvents`).
 */
import { QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import { createAppStore } from "../core/apps/app-store.ts";
import type { Deps, Facility } from "../core/facility.ts";
import { createDeadLetterOperator, type DeadLetterOperator } from "./dead-letters.ts";
import { queuesNeedingAttention, type QueueAttentionRow } from "./queue-attention-store.ts";
import { createQueueStore, type PeekedMessage } from "./queue-store.ts";
import { queueHousekeeping } from "./queue-sweeper.ts";
import { queuesRoutes } from "./queues-routes.ts";
import { createQueuesService, type PlatformEvents } from "./queues-service.ts";
import { createWakeHub } from "./wake-hub.ts";

export type { PlatformEvents } from "./queues-service.ts";
export { EVENTS_QUEUE } from "./queue-limits.ts";

export type { PeekedMessage, DeadLetter, DeadLetterSelection } from "./queue-store.ts";
export type { DeadLetterPage } from "./dead-letters.ts";
export type { QueueAttentionRow } from "./queue-attention-store.ts";

/** What the operator may do to an app's queues that the app itself may not (AdminService). */
export interface QueueOperator {
  peek(appId: string, queue: string, limit: number, maxChars: number): Promise<PeekedMessage[]>;
  purge(appId: string, queue: string): Promise<number>;
  deadLetters: DeadLetterOperator;
  /** Across apps, for the overview: queues with dead letters or a waiting message older than `oldAgeSeconds`. */
  attention(oldAgeSeconds: number): Promise<QueueAttentionRow[]>;
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
  const queues = createQueuesService({
    store,
    apps: createAppStore(deps.db),
    hub,
    logger,
    metrics,
    shutdownSignal: deps.shutdownSignal,
  });

  return {
    service: QueueService,
    impl: queues.impl,
    routes: queuesRoutes,
    events: queues.events,
    operator: {
      peek: (...args) => store.peek(...args),
      purge: (...args) => store.purge(...args),
      deadLetters: createDeadLetterOperator(store, hub),
      attention: (oldAgeSeconds) => queuesNeedingAttention(deps.db, oldAgeSeconds),
    },
    housekeeping: () => housekeeping,
    async start() {
      await hub.start();
    },
    async close() {
      await hub.close();
    },
  };
}
