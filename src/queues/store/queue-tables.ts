/** The tables of the queue facility's messages and dead letters, and the two handles every part of the store is built on. */
import type { Generated, Kysely } from "kysely";
import type { Timestamp } from "../../core/database/index.ts";

/** One message of a queue. */
interface QueueMessagesTable {
  id: Generated<string>;
  app_id: string;
  queue: string;
  /** The JSON-serialised payload, stored as text: kept byte for byte, never read into. */
  payload: string;
  enqueued_at: Generated<Timestamp>;
  /** When the message may next be claimed: the put (plus any delay), or the end of its current lease. */
  visible_at: Timestamp;
  expires_at: Timestamp;
  /** Deliveries so far, counted toward `maxDeliveries`; 0 again after a replay. */
  deliveries: Generated<number>;
  /** Leases in all the message's lives (never 0 again): the lease's nonce inside the receipt (migration 0022). */
  claims: Generated<number>;
  /** The W3C `traceparent` of the put's span, when the server that put it traces (migration 0027). */
  trace_parent: string | null;
  /** Why the last delivery failed: a nack's reason, or "lease expired" (migration 0030). */
  failure_reason: string | null;
  /** The ordered group the message is in, or null (migration 0035). */
  group_key: string | null;
  /** Its place in its group (`queue_group_seq`), null without a group: only a group's lowest is claimable. */
  group_seq: string | null;
}

/** A message that reached its app's `maxDeliveries` (migration 0009): out of line until replayed, purged or expired. */
interface QueueDeadLettersTable {
  seq: Generated<string>;
  id: string;
  app_id: string;
  queue: string;
  payload: string;
  enqueued_at: Timestamp;
  deliveries: number;
  /** The message's `claims`, carried back into line by a replay. */
  claims: number;
  died_at: Generated<Timestamp>;
  expires_at: Timestamp;
  /** The message's `failure_reason` when it died (migration 0030). */
  failure_reason: string | null;
  /** The ordered group it was in (migration 0035). */
  group_key: string | null;
}

/** The tables the store declares (`db.withTables<QueueTables>()`); the others it reaches (counts, policies, dedup keys, activity) are named in its SQL only. */
export type QueueTables = {
  queue_messages: QueueMessagesTable;
  queue_dead_letters: QueueDeadLettersTable;
};

/**
 * The two handles every part of the store is built on.
 *
 * `db` commits synchronously: puts, whose 200 promises the message is kept,
 * and claims. `relaxedDb` may commit asynchronously (`synchronous_commit =
 * off`, see `Database.relaxedDb`): acks, expiry and the removal of deleted
 * apps' messages, whose loss in a database crash only means a message comes
 * back (a redelivery, which consumers must already tolerate) or is removed a
 * little later. Claims stay synchronous although a lost claim would also only
 * mean a redelivery: the redelivery would then count the same delivery number
 * again, so the lost lease's receipt would ack the new lease; a synchronous
 * claim keeps "an earlier receipt never acks" true even across a database
 * crash, and cost no measurable throughput once claims are batched.
 */
export interface QueueDbs {
  db: Kysely<QueueTables>;
  relaxedDb: Kysely<QueueTables>;
}
