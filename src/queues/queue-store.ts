/**
 * The queue facility's store: every SQL statement of its messages, leases, dead letters, policies and
 * counts, one function per operation, each part in its own file of `store/`:
 *
 * - `put-store.ts`: puts (one, a batch, all-or-none with dedup keys, dropping the oldest);
 * - `claim-store.ts`: the claim, which leases the head of a line and buries the dead;
 * - `lease-store.ts`: what follows a lease (extend, nack, release, still leased, ack);
 * - `control-store.ts`: peek, purge, a message's state;
 * - `dead-letter-store.ts`: list, replay and purge dead letters;
 * - `count-store.ts`: the listing from the counts, next visibility, hourly activity;
 * - `policy-store.ts`: queue policies; `housekeeping-store.ts`: the sweeps' deletes;
 * - `queue-tables.ts`, `queue-types.ts`, `sql-fragments.ts` and `row-values.ts`: the tables, the values
 *   taken and given, the SQL the parts share, and the driver's values as rows read them.
 *
 * Each operation is a single statement where it can be, so that it is atomic on its own and costs one
 * round trip:
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
  type PeekPage,
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

/**
 * The store on `database`; acks, expiry and the removal of deleted apps' rows go through `relaxedDatabase`
 * (see `QueueDbs` for why they may commit asynchronously).
 */
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
