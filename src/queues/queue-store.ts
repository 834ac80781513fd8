/**
 * Every SQL statement of the queue facility, one function per operation, each
 * a single statement so that it is atomic on its own and costs one round trip:
 *
 * - put: count the waiting messages (bounded by the cap), insert if below it,
 *   and `pg_notify` in the same statement, so the notification is sent exactly
 *   when the insert commits;
 * - claim: `FOR UPDATE SKIP LOCKED` picks the first visible message of the
 *   line, and the `UPDATE ... RETURNING` leases it and counts the delivery;
 * - ack: one conditional `DELETE` that only matches the current, unexpired lease.
 *
 * Put, claim and ack also come in batch forms (`putMany`, `claimMany`,
 * `ackMany`): one statement for many concurrent calls (see `batcher.ts`).
 *
 * Times come from the database's clock (`now()`), never from an instance's, so
 * leases mean the same on every instance.
 */
import type { Db } from "../core/database/index.ts";
import type { Kysely } from "kysely";
import type { QueueDbs, QueueTables } from "./store/queue-tables.ts";
import { createPutStore, type PutStore } from "./store/put-store.ts";
import { createClaimStore, type ClaimStore } from "./store/claim-store.ts";
import { createLeaseStore, type LeaseStore } from "./store/lease-store.ts";
import { createControlStore, type ControlStore } from "./store/control-store.ts";
import { createDeadLetterStore, type DeadLetterStore } from "./store/dead-letter-store.ts";
import { createCountStore, type CountStore } from "./store/count-store.ts";
import { createPolicyStore, type PolicyStore } from "./store/policy-store.ts";
import { createHousekeepingStore, type HousekeepingStore } from "./store/housekeeping-store.ts";

export type { QueueTables } from "./store/queue-tables.ts";
export { QUEUE_CHANNEL } from "./store/sql-fragments.ts";
export { isPeekPosition } from "./store/control-store.ts";
export {
  DROP_DEAD_LETTERS,
  type ClaimResult,
  type ClaimRule,
  type DeadLetter,
  type DeadLetterSelection,
  type PeekedMessage,
  type PutAllMessage,
  type PutDone,
  type PutItem,
  type PutResult,
  type QueueActivityHour,
  type StoredMessage,
  type StoredPolicy,
} from "./store/queue-types.ts";

/** Every statement of the queue facility: the parts, each in `store/`, joined. */
export interface QueueStore
  extends PutStore, ClaimStore, LeaseStore, ControlStore, DeadLetterStore, CountStore, PolicyStore, HousekeepingStore {}

export function createQueueStore(database: Db, relaxedDatabase: Db = database): QueueStore {
  const db: Kysely<QueueTables> = database.withTables<QueueTables>();
  const relaxedDb: Kysely<QueueTables> = relaxedDatabase.withTables<QueueTables>();
  const dbs: QueueDbs = { db, relaxedDb };
  return {
    ...createPutStore(dbs),
    ...createClaimStore(dbs),
    ...createLeaseStore(dbs),
    ...createControlStore(dbs),
    ...createDeadLetterStore(dbs),
    ...createCountStore(dbs),
    ...createPolicyStore(dbs),
    ...createHousekeepingStore(dbs),
  };
}
