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
import crypto from "node:crypto";
import { isUuid } from "../core/apps/apps.ts";
import { sql, type Generated, type Kysely, type RawBuilder } from "kysely";
import {
  PREPARED,
  exactTimeText,
  intArray,
  isExactTimeText,
  jsonTextArray,
  transact,
  transactionAsDb,
  uuidArray,
  type Db,
  type InTransactionWith,
  type Timestamp,
} from "../core/database/index.ts";

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

export type QueueTables = {
  queue_messages: QueueMessagesTable;
  queue_dead_letters: QueueDeadLettersTable;
};

/** The NOTIFY channel on which puts announce `instance|app|queue|visibleAtMs`. */
export const QUEUE_CHANNEL = "pb_queue_put";

/**
 * A message is leased while `lease_until` is ahead (and it is not visible: a
 * lease is always followed by its retry hold, `visible_at` >= `lease_until`).
 * A waiting message is one not leased: never delivered, nacked, or its lease
 * has lapsed (perhaps still held back by a retry delay, as a delayed put is).
 */
const LEASED = sql`(lease_until > now() AND visible_at > now())`;
const WAITING = sql`NOT coalesce(${LEASED}, false) AND expires_at > now()`;

/**
 * Why a visible message's last delivery failed, as a claim (or a burial) finds it: a row that still
 * has a `lease_until` had its lease lapse (a nack or a given-back lease clears it); otherwise what the
 * nack said, if anything.
 */
const LAST_FAILURE = sql`CASE WHEN m.lease_until IS NOT NULL THEN 'lease expired' ELSE m.failure_reason END`;

/**
 * The expired waiting messages not yet deleted by the expiry sweep (which runs
 * every 15 s), of every app: read through the expiry index (the ORDER BY makes
 * it the plan), at most `EXPIRED_SCAN` of them, so the counts below can leave
 * them out at the cost of the few that expired since the last sweep.
 */
const EXPIRED = sql`(
  SELECT app_id, queue FROM queue_messages
  WHERE expires_at <= now() AND NOT coalesce(lease_until > now() AND visible_at > now(), false)
  ORDER BY expires_at LIMIT ${sql.lit(10_000)}
)`;

/**
 * How many messages wait on one queue, in time independent of how many, as a
 * put sees it before it inserts: `queue_depth` (migrations 0020 and 0024)
 * takes the queue's lock, so a put waits for every put before it on the queue
 * to commit, on any instance, then counts the queue's rows (`queue_counts`,
 * 0012) less its leased and expired ones with a snapshot of its own.
 */
const depthOf = (appId: string, queue: string) => sql<number>`queue_depth(${appId}::uuid, ${queue}::text)`;

/** Whether a `position` from outside (a page token) is one `peek` wrote (`visible_at|enqueued_at|id`): checked before it reaches a cast. */
export function isPeekPosition(position: string): boolean {
  const parts = position.split("|");
  return parts.length === 3 && isExactTimeText(parts[0]) && isExactTimeText(parts[1]) && isUuid(parts[2]);
}

/** Waiting messages at the head of a line among which the listing looks for the oldest. */
const OLDEST_SCAN = 16;

/** Most messages one claim moves to the dead letters (more wait for the next claim). */
const BURY_BATCH = 256;

export interface StoredMessage {
  id: string;
  queue: string;
  payload: string;
  enqueuedAt: Date;
  expiresAt: Date;
  leaseExpiresAt: Date;
  deliveries: number;
  /** The message's leases in all its lives, this one included: the receipt's nonce. */
  claims: number;
  /** Set by a claim: `visible_at` before it, so a lease never handed out can be undone (`release`). */
  visibleBefore?: Date;
  /** Set by a claim: the put's `traceparent`, when the put was traced. */
  traceParent?: string;
}

/** One UTC hour of a queue's activity (migration 0019). */
export interface QueueActivityHour {
  /** The start of the hour. */
  at: Date;
  puts: number;
  acks: number;
}

interface QueueStats {
  name: string;
  depth: number;
  inFlight: number;
  oldestAt: Date | null;
  deadLetters: number;
}

interface PutInput {
  appId: string;
  queue: string;
  payload: string;
  delaySeconds: number;
  ttlSeconds: number;
  /** 0 to 9, higher first among visible messages; 0 when absent. */
  priority?: number;
  /** The ordered group (docs/queues.md "Ordered groups"): delivered one at a time in put order within it. */
  groupKey?: string;
  /** Insert only while fewer than this many messages wait. */
  depthBelow: number;
  /** `instance|app|queue|visibleAtMs`, or undefined to send no notification. */
  notify: string | undefined;
  /** The put's `traceparent`, stored with the message (only when tracing is on). */
  traceParent?: string;
}

/** A message put. */
export interface PutDone {
  id: string;
  expiresAt: Date;
}

export type PutResult = ({ inserted: true } & PutDone) | { inserted: false; depth: number };

/** What a statement reads, as the driver gives it (timestamps as Date or text, counts as number or bigint text). */
type When = Date | string;
type Count = number | string;
/** A put: the new message, or (refused by the depth check) the waiting count. */
type PutRow = { id: string | null; expires_at: When | null; n: Count };
type DroppingPutRow = { id: string; expires_at: When; dropped: Count };
type AckedRow = { app_id: string; id: string; claims: Count };
type DeadLetterRow = {
  seq_text: string;
  id: string;
  payload: string;
  size: Count;
  enqueued_at: When;
  deliveries: Count;
  died_at: When;
  expires_at: When;
  failure_reason: string | null;
  group_key: string | null;
};
type CountRow = { n: Count };
type SeqRow = { seq: string | null };
type NextVisibleRow = { app_id: string; queue: string; at: When };

const toDate = (v: unknown): Date => (v instanceof Date ? v : new Date(v as string));

/** One put of a batch (`putMany`): all of one app's queue. */
export interface PutItem {
  payload: string;
  delaySeconds: number;
  ttlSeconds: number;
  /** 0 to 9, higher first among visible messages; 0 when absent. */
  priority?: number;
  /** The ordered group, as `PutInput.groupKey`. */
  groupKey?: string;
  /** `instance|app|queue|visibleAtMs`, or undefined to send no notification. */
  notify: string | undefined;
  /** `putAll` only: a put of this key within the dedup window adds nothing (the first one's message answers). */
  dedupKey?: string;
  /** `putMany` only: the put's `traceparent`, stored with the message (only when tracing is on). */
  traceParent?: string;
}

/** One answer of `putAll`: the message put, or the first of its dedup key. */
export interface PutAllMessage {
  id: string;
  expiresAt: Date;
  deduplicated: boolean;
}

/** A queue policy as stored: null is "the default". */
export interface StoredPolicy {
  maxDeliveries: number | null;
  deadLetterQueue: string | null;
  retryDelaySeconds: number | null;
  retryBackoff: number | null;
  maxRetryDelaySeconds: number | null;
  retryJitter: number | null;
  leaseSeconds: number | null;
  dedupWindowSeconds: number | null;
  maxDeliveriesPerSecond: number | null;
}

interface PolicyRow {
  max_deliveries: number | null;
  dead_letter_queue: string | null;
  retry_delay_seconds: number | null;
  retry_backoff: number | null;
  max_retry_delay_seconds: number | null;
  retry_jitter: number | null;
  lease_seconds: number | null;
  dedup_window_seconds: number | null;
  max_deliveries_per_second: number | null;
}

const policyOf = (r: PolicyRow): StoredPolicy => ({
  maxDeliveries: r.max_deliveries,
  deadLetterQueue: r.dead_letter_queue,
  retryDelaySeconds: r.retry_delay_seconds,
  retryBackoff: r.retry_backoff == null ? null : Number(r.retry_backoff),
  maxRetryDelaySeconds: r.max_retry_delay_seconds,
  retryJitter: r.retry_jitter == null ? null : Number(r.retry_jitter),
  leaseSeconds: r.lease_seconds,
  dedupWindowSeconds: r.dedup_window_seconds,
  maxDeliveriesPerSecond: r.max_deliveries_per_second == null ? null : Number(r.max_deliveries_per_second),
});

export interface PeekedMessage {
  id: string;
  /** The payload's JSON text, cut after the asked length plus one (so a cut can be told). */
  payload: string;
  sizeBytes: number;
  enqueuedAt: Date;
  expiresAt: Date;
  deliveries: number;
  /** Where the message lies in the line (`visible_at|enqueued_at|id`, UTC to the microsecond): a peek continues after it. */
  position: string;
}

/** `ClaimRule.deadLetterQueue` for "dead messages are deleted". A reserved name: no queue of an app can have it. */
export const DROP_DEAD_LETTERS = "_drop";

/** The queue policy as a claim applies it (see `queue-policy.ts`). */
export interface ClaimRule {
  /** A lapsed message with this many deliveries dies instead of being leased; 0 is unlimited. */
  maxDeliveries: number;
  /** Where the dead go: null, the queue's dead-letter list; `DROP_DEAD_LETTERS`; or a queue of the app. */
  deadLetterQueue: string | null;
  /** The NOTIFY payload for a put on `deadLetterQueue` (a queue), to wake its consumers. */
  deadLetterNotify?: string;
  /** A dead letter (or a message moved to the dead-letter queue) is kept this long. */
  ttlSeconds: number;
  /**
   * After the n-th delivery lapses, the message is held back `min(maxDelay, delay * backoff^(n-1))` seconds,
   * less a random share of up to `jitter` of that (0: exactly that).
   */
  retry: { delaySeconds: number; backoff: number; maxDelaySeconds: number; jitter: number };
}

/** No dead letters, no retry hold: the plain claim of docs/api.md#queues. */
const PLAIN_CLAIM: ClaimRule = {
  maxDeliveries: 0,
  deadLetterQueue: null,
  ttlSeconds: 0,
  retry: { delaySeconds: 0, backoff: 1, maxDelaySeconds: 0, jitter: 0 },
};

/**
 * One row of the claim statement: a leased message, or (id null) the line's
 * next visibility. A leased message's times come as epoch milliseconds
 * (float8): parsed as numbers, where a timestamp's text would cost the driver
 * more than the rest of the row.
 */
interface ClaimRow {
  id: string | null;
  payload: string | null;
  enqueued_at: number | null;
  expires_at: number | null;
  lease_until: number | null;
  deliveries: number | null;
  claims: number | null;
  was_visible_at: number | null;
  priority: number | null;
  next_visible_at: Date | string | null;
  buried: number | null;
  trace_parent: string | null;
}

export interface DeadLetter {
  /** Its place in the order of deaths: the listing's page key. */
  seq: string;
  id: string;
  /** The payload's JSON text, cut after the asked length plus one (so a cut can be told). */
  payload: string;
  sizeBytes: number;
  enqueuedAt: Date;
  deliveries: number;
  diedAt: Date;
  expiresAt: Date;
  /** Why its last delivery failed; null when none was recorded. */
  failureReason: string | null;
  /** The ordered group it was in; null when none. */
  groupKey: string | null;
}

/** Where a message of a queue is (`GET /v1/queues/{queue}/messages/{id}`). */
interface MessageState {
  status: "waiting" | "delayed" | "leased" | "dead";
  id: string;
  queue: string;
  enqueuedAt: Date;
  expiresAt: Date;
  deliveries: number;
  /** Delayed: when it becomes visible. */
  visibleAt: Date | null;
  /** Leased: when the lease lapses. */
  leaseExpiresAt: Date | null;
  failureReason: string | null;
  /** Dead: when it died. */
  diedAt: Date | null;
  /** The ordered group the message is (or was) in; null when none. */
  groupKey: string | null;
}

/** Which dead letters of one app's queue: all of them, or those of these ids. */
export type DeadLetterSelection = { all: true } | { ids: string[] };

export interface QueueStore {
  /**
   * One put in a transaction of its own (or the unit of work the store is built on), holding the queue's
   * advisory lock (the lock every put on the queue takes to count it), so that `answerIn` (an idempotent
   * answer) commits with the message.
   */
  putSerialized(input: PutInput, answerIn?: InTransactionWith<PutDone>): Promise<PutResult>;
  /**
   * One put on the store's own handle, in no transaction of its own: for a store built on a transaction
   * (a schedule's tick, which puts and moves the schedule on in one commit). Under the depth limit as
   * every put; the notification leaves at that transaction's commit.
   */
  putHere(input: PutInput): Promise<PutResult>;
  /**
   * Puts several messages on one queue in one statement (one commit): they are
   * inserted in order while fewer than `depthBelow` messages wait, the rest get
   * `inserted: false` with the depth seen. The count waits for the queue's lock
   * (`queue_depth`), so batches of several instances on one queue go one after
   * the other and never together past `depthBelow`. One notification per
   * distinct `notify`, its count appended (`...|n`), since NOTIFY folds equal
   * payloads.
   */
  putMany(appId: string, queue: string, depthBelow: number, items: PutItem[]): Promise<PutResult[]>;
  /**
   * Puts every item or none (`PutMessages`): serialised with the queue's other
   * puts by the same advisory lock, it inserts all of them in one
   * statement only if the waiting messages plus the batch stay within
   * `maxDepth`; otherwise nothing, and says how many wait. `answerIn` (an
   * idempotent answer) runs in the same transaction when the batch went in.
   */
  putAll(
    appId: string,
    queue: string,
    maxDepth: number,
    items: PutItem[],
    dedupWindowSeconds?: number,
    answerIn?: InTransactionWith<PutAllMessage[]>,
  ): Promise<{ inserted: true; messages: PutAllMessage[] } | { inserted: false; depth: number }>;
  /** A queue's policy as stored, or undefined when its app set none. */
  getPolicy(appId: string, queue: string): Promise<StoredPolicy | undefined>;
  /**
   * Replaces a queue's stored policy by `change(current)` (current: all null when none), serialised per queue.
   */
  updatePolicy(appId: string, queue: string, change: (current: StoredPolicy) => StoredPolicy): Promise<StoredPolicy>;
  /**
   * Folds the count slots (`queue_counts`) of up to `limit` queues into one
   * row each, and removes those summing to 0; how many queues. The slots of
   * a queue are locked while folded, so a concurrent put or ack adds after it.
   */
  compactCounts(limit: number): Promise<number>;
  /** Deletes up to `limit` policies, dedup keys and count rows of apps that no longer exist; how many. */
  deleteControlOrphans(limit: number): Promise<number>;
  /** Deletes up to `limit` dedup keys past their window; how many. */
  expireDedupKeys(limit: number): Promise<number>;
  /**
   * Undoes leases that were taken but never handed to a consumer (a stream
   * ended between its claim and its send): each message goes back to its
   * place in line with its delivery uncounted, if that lease is still the
   * current one. Returns how many were released.
   */
  release(
    appId: string,
    leases: { id: string; claim: number; visibleBefore: Date }[],
    /** Wake-up payload (`WakeHub.payload`) sent with the count released, in the same statement, to other instances. */
    notify?: string,
  ): Promise<number>;
  /** Inserts without a depth check and drops the oldest waiting messages beyond `keep`; returns how many were dropped. */
  putDroppingOldest(
    input: Omit<PutInput, "depthBelow"> & { keep: number },
  ): Promise<{ id: string; expiresAt: Date; dropped: number }>;
  /**
   * Leases up to `n` visible messages in one statement, oldest first. When it
   * got fewer than `n`, also says when the next message not taken becomes
   * visible (null: none waits).
   */
  claimMany(
    appId: string,
    queue: string,
    leaseSeconds: number,
    n: number,
    rule?: ClaimRule,
  ): Promise<{ messages: StoredMessage[]; nextVisibleAt: Date | null; buried?: number }>;
  /** The queues whose policy limits deliveries (`maxDeliveries` > 0): where the dead-letter sweep looks. */
  queuesWithDeliveryLimit(): Promise<{ appId: string; queue: string }[]>;
  /**
   * Sets the lease of a receipt that still holds it to end `leaseSeconds`
   * from now, keeping its retry hold after it; the new end, or null when the
   * lease had lapsed or the message is gone.
   */
  extend(appId: string, id: string, claim: number, leaseSeconds: number): Promise<Date | null>;
  /**
   * Ends the lease of a receipt that still holds it: the message waits again,
   * visible after `delaySeconds`, or (undefined) after the retry hold of its
   * queue's policy for its delivery count (`defaults` where the policy sets
   * none). The message's queue and when it is visible again (epoch ms; 0:
   * now) when the lease was current, else undefined. With `notifyPrefix` the
   * statement also notifies, like a put: the prefix with `queue|visibleAtMs`
   * appended (the receipt names the message, not its queue).
   */
  nack(
    appId: string,
    id: string,
    claim: number,
    delaySeconds: number | undefined,
    defaults: ClaimRule["retry"] & { maxDeliveries?: number },
    notifyPrefix?: string,
    reason?: string,
  ): Promise<{ queue: string; visibleAtMs: number } | undefined>;
  /**
   * Of these messages (of any apps: the full windows of several streams), the leases that still hold, as keys
   * `appId|id|claim`: a message is found only under the app it was named with.
   */
  stillLeased(messages: { appId: string; id: string }[]): Promise<Set<string>>;
  /** Acks several receipts (of any apps) in one statement; true where that receipt's lease was current. */
  ackMany(receipts: { appId: string; id: string; claim: number }[]): Promise<boolean[]>;
  /** The app's queues with something on them: waiting, in flight, or dead letters. */
  list(appId: string): Promise<QueueStats[]>;
  /** For the wake-up safety net: of the given queues, the earliest time each has a message visible (past or future). */
  nextVisible(keys: { appId: string; queue: string }[]): Promise<{ appId: string; queue: string; at: Date }[]>;
  /** Deletes up to `limit` expired waiting messages; returns how many. */
  expire(limit: number): Promise<number>;
  /** Deletes up to `limit` messages of apps that no longer exist; returns how many. */
  deleteOrphans(limit: number): Promise<number>;
  /**
   * Waiting messages in claim order, read only (no lease, no delivery counted);
   * payloads cut after `maxChars` + 1; after `after` (a message's `position`) when given.
   */
  peek(appId: string, queue: string, limit: number, maxChars: number, after?: string): Promise<PeekedMessage[]>;
  /** Deletes every message of one app's queue, waiting or leased (only the waiting ones when `includeLeased` is false); how many. */
  purge(appId: string, queue: string, includeLeased?: boolean): Promise<number>;
  /** Where one message of the queue is, in line or dead; undefined once acked, purged or expired. */
  messageState(appId: string, queue: string, id: string): Promise<MessageState | undefined>;
  /**
   * Up to `limit` dead letters of one queue in the order they died, after `afterSeq` (a previous page's last);
   * payloads cut after `maxChars` + 1 when given, else whole.
   */
  listDeadLetters(
    appId: string,
    queue: string,
    afterSeq: string | undefined,
    limit: number,
    maxChars: number | undefined,
  ): Promise<DeadLetter[]>;
  /**
   * Puts up to `limit` of the selected dead letters back in line (visible now,
   * deliveries 0, lifetime `ttlSeconds`) in one statement; with `all`, only
   * those with `seq` up to `upToSeq`. Returns how many; notifies waiting
   * consumers with one `notify|n`.
   */
  replayDeadLetters(
    appId: string,
    queue: string,
    which: DeadLetterSelection & { upToSeq?: string },
    limit: number,
    ttlSeconds: number,
    notify: string | undefined,
  ): Promise<number>;
  /** The highest `seq` among one queue's dead letters (undefined: none), so that replaying "all" has an end. */
  lastDeadLetterSeq(appId: string, queue: string): Promise<string | undefined>;
  /** Deletes the selected dead letters; how many. */
  purgeDeadLetters(appId: string, queue: string, which: DeadLetterSelection): Promise<number>;
  /** Deletes up to `limit` dead letters past their `expires_at`; how many. */
  expireDeadLetters(limit: number): Promise<number>;
  /** Deletes up to `limit` dead letters of apps that no longer exist; how many. */
  deleteDeadLetterOrphans(limit: number): Promise<number>;
  /** One queue's puts and acks per UTC hour, the last `hours` hours (this one last), hours without any as zeros. */
  activity(appId: string, queue: string, hours: number): Promise<QueueActivityHour[]>;
  /** Deletes up to `limit` count rows of hours older than `keepHours` (deleted apps' rows age out the same way). */
  pruneActivity(keepHours: number, limit: number): Promise<number>;
}

export type ClaimResult = { message: StoredMessage } | { message?: undefined; nextVisibleAt: Date | null };

/** The rows of a claim statement: the leased messages in line order, and the next visibility when fewer were taken. */
function claimedRows(
  queue: string,
  rows: ClaimRow[],
): { messages: StoredMessage[]; nextVisibleAt: Date | null; buried?: number } {
  const messages: (StoredMessage & { was: number; priority: number })[] = [];
  let nextVisibleAt: Date | null = null;
  let buried: number | undefined;
  for (const row of rows) {
    if (row.buried != null) buried = Number(row.buried);
    if (!row.id) {
      nextVisibleAt = row.next_visible_at == null ? null : toDate(row.next_visible_at);
      continue;
    }
    messages.push({
      id: row.id,
      queue,
      payload: row.payload!,
      enqueuedAt: new Date(Number(row.enqueued_at)),
      expiresAt: new Date(Number(row.expires_at)),
      leaseExpiresAt: new Date(Number(row.lease_until)),
      deliveries: Number(row.deliveries),
      claims: Number(row.claims),
      was: Math.trunc(Number(row.was_visible_at)),
      ...(row.trace_parent !== null && { traceParent: row.trace_parent }),
      priority: Number(row.priority ?? 0),
    });
  }
  // RETURNING has no order: hand out the line's order (higher priority first, then oldest first).
  messages.sort((x, y) => y.priority - x.priority || x.was - y.was);
  return {
    messages: messages.map(({ was, priority: _priority, ...m }) => ({ ...m, visibleBefore: new Date(was) })),
    nextVisibleAt,
    buried,
  };
}

/** The two handles of `createQueueStore` (see there): `db` commits synchronously, `relaxedDb` may not. */
interface QueueDbs {
  db: Kysely<QueueTables>;
  relaxedDb: Kysely<QueueTables>;
}

/**
 * The `trace_parent` column of a traced put's INSERT, and its value; for an untraced one (every put when
 * tracing is off), nothing: the statement is the one it always was, and no fragment is made for it.
 */
const NOTHING = sql``;
const TRACE_COLUMN = sql`, trace_parent`;
const traceColumn = (traceParent: string | undefined) => (traceParent === undefined ? NOTHING : TRACE_COLUMN);
const traceValue = (traceParent: string | undefined) => (traceParent === undefined ? NOTHING : sql`, ${traceParent}`);

/**
 * The group columns of a grouped put's INSERT (migration 0035), and their values: the key, and the group's
 * next place, `nextval` of `queue_group_seq`. Every put statement draws it after `queue_depth` took the
 * queue's lock, so on one queue a lower place is always committed before a higher one is drawn: a claim
 * that sees a message of a group also sees every message stored before it in that group. An ungrouped put
 * (every put of an app that never uses groups) adds nothing: its statement is the one it always was.
 */
const GROUP_COLUMNS = sql`, group_key, group_seq`;
const groupColumns = (groupKey: string | undefined) => (groupKey === undefined ? NOTHING : GROUP_COLUMNS);
const groupValues = (groupKey: string | undefined) =>
  groupKey === undefined ? NOTHING : sql`, ${groupKey}::text, nextval('queue_group_seq')`;
/**
 * The place in its group of a message that comes back in line without a put (a replayed dead letter, one
 * moved to a dead-letter queue), its row's `app_id`, `queue` and `group_key` as named: drawn after the
 * queue's lock, as a put's, so that places stay in the order their messages commit (a replay beside a put of
 * the same group could otherwise commit a lower place after the higher one was taken). No lock without a group.
 */
const lineGroupSeq = (queue: RawBuilder<unknown>) =>
  sql`CASE WHEN group_key IS NULL THEN NULL ELSE (
    SELECT nextval('queue_group_seq')
    FROM (SELECT pg_advisory_xact_lock(hashtextextended('queue:' || app_id || ':' || ${queue}, 0))) l) END`;

/** A batch's group values from its column `grp`: a place drawn only for the grouped, in the batch's order. */
const BATCH_GROUP_VALUES = sql`, grp, CASE WHEN grp IS NULL THEN NULL ELSE nextval('queue_group_seq') END`;

/**
 * Whether the message `m` (an alias of `queue_messages` in the statement) heads its group, or has none: no
 * message of its group with a lower place is stored, unless that one expired and no lease holds it (the
 * expiry sweep deletes it). Asked through the partial index `queue_messages_group_line`, and only for rows
 * with a group: a message without one is claimable as ever, at the cost of one null test. `skip` leaves out
 * rows that the statement itself deletes (a claim's burials), which its snapshot still sees.
 */
function groupHead(m: string, skip: RawBuilder<unknown> = NOTHING) {
  const t = sql.raw(m);
  return sql`(${t}.group_key IS NULL OR NOT EXISTS (
    SELECT 1 FROM queue_messages g
    WHERE g.app_id = ${t}.app_id AND g.queue = ${t}.queue AND g.group_key = ${t}.group_key AND g.group_seq < ${t}.group_seq
      AND (g.expires_at > now() OR g.lease_until > now())${skip}))`;
}
const HEAD_OF_GROUP = groupHead("q");

/**
 * Of the rows a statement deletes (`rows`: an ack's or a burial's, with `app_id`, `queue`, `group_key` and
 * `group_seq`), the groups that hold more messages, whose next is claimable now: one NOTIFY per queue with
 * their count, from no instance (an empty first field), so that every instance, this one too, wakes as
 * many of its waiting consumers. The statement's snapshot still sees the deleted rows, hence the `>`.
 */
function groupsReleased(rows: RawBuilder<unknown>) {
  return sql`SELECT pg_notify(${QUEUE_CHANNEL}, '|' || r.app_id || '|' || r.queue || '|0|' || count(*))
    FROM ${rows} r
    WHERE r.group_key IS NOT NULL AND EXISTS (
      SELECT 1 FROM queue_messages f
      WHERE f.app_id = r.app_id AND f.queue = r.queue AND f.group_key = r.group_key AND f.group_seq > r.group_seq)
    GROUP BY r.app_id, r.queue`;
}

/**
 * A batch's messages become visible one microsecond apart, in the batch's order (`ord`, from 1): the line
 * is ordered by `visible_at` alone, and messages with equal times came out in whatever order the plan gave
 * (an index scan keeps insertion order, a sort of the ties does not), so a batch was not always handed out
 * in the order it was put. A thousand messages are spread over one millisecond.
 */
const BATCH_ORDER = sql`(ord - 1) * interval '1 microsecond'`;

/** Puts: plain, serialised per queue, batched, deduplicated, and dropping the oldest, each under the depth limit. */
function createPutStore({
  db,
}: QueueDbs): Pick<QueueStore, "putSerialized" | "putHere" | "putMany" | "putAll" | "putDroppingOldest"> {
  /**
   * One put after the queue's lock: its times start at `statement_timestamp()`,
   * this statement's start, not at `now()`, the transaction's start, which is
   * before the wait for the lock (as in `putAll`).
   */
  async function put(input: PutInput, on: Kysely<QueueTables>): Promise<PutResult> {
    const { rows } = await sql<PutRow>`${PREPARED}
      WITH depth AS (
        SELECT ${depthOf(input.appId, input.queue)} AS n
      ), ins AS (
        INSERT INTO queue_messages (app_id, queue, payload, visible_at, expires_at, priority${traceColumn(input.traceParent)}${groupColumns(input.groupKey)})
        SELECT ${input.appId}, ${input.queue}, ${input.payload},
               statement_timestamp() + make_interval(secs => ${input.delaySeconds}),
               statement_timestamp() + make_interval(secs => ${input.ttlSeconds}), ${input.priority ?? 0}::smallint${traceValue(input.traceParent)}${groupValues(input.groupKey)}
        FROM depth WHERE depth.n < ${input.depthBelow}
        RETURNING id, expires_at
      )
      SELECT depth.n, ins.id, ins.expires_at,
             CASE WHEN ins.id IS NOT NULL AND ${input.notify ?? null}::text IS NOT NULL
                  THEN pg_notify(${QUEUE_CHANNEL}, ${input.notify ?? null}::text) END AS notified
      FROM depth LEFT JOIN ins ON true`.execute(on);
    const row = rows[0];
    if (row.id) return { inserted: true, id: row.id, expiresAt: toDate(row.expires_at) };
    return { inserted: false, depth: Number(row.n) };
  }

  return {
    putHere: (input) => put(input, db),

    putSerialized(input, answerIn) {
      return transact(db, async (trx) => {
        await sql`SELECT pg_advisory_xact_lock(hashtextextended(${`queue:${input.appId}:${input.queue}`}, 0))`.execute(
          trx,
        );
        const result = await put(input, trx);
        if (result.inserted) await answerIn?.(transactionAsDb(trx), { id: result.id, expiresAt: result.expiresAt });
        return result;
      });
    },

    async putMany(appId, queue, depthBelow, items) {
      // Ids are made here so each caller finds its own row in RETURNING
      // (an INSERT cannot return the source row's position).
      const ids = items.map(() => crypto.randomUUID());
      // Traced puts only (tracing on): the statement of an untraced batch is the same as ever.
      const traced = items.some((i) => i.traceParent !== undefined);
      // Grouped puts only: the statement of a batch without groups is the same as ever.
      const grouped = items.some((i) => i.groupKey !== undefined);
      // The times count from after the queue's lock (the clock's, read once the count is made), not from the
      // statement's start: a batch that waited for another instance's is not shortened by the wait.
      const { rows } = await sql<PutRow>`${PREPARED}
        WITH depth AS (
          SELECT d.n, clock_timestamp() AS t FROM (SELECT ${depthOf(appId, queue)} AS n OFFSET 0) d
        ), src AS (
          SELECT k.*, depth.t FROM unnest(${uuidArray(ids)}, ${jsonTextArray(items.map((i) => i.payload))},
                                 ${intArray(items.map((i) => i.delaySeconds))}, ${intArray(items.map((i) => i.ttlSeconds))},
                                 ${items.map((i) => i.notify ?? null)}::text[], ${intArray(items.map((i) => i.priority ?? 0))}${
                                   traced ? sql`, ${items.map((i) => i.traceParent ?? null)}::text[]` : NOTHING
                                 }${grouped ? sql`, ${items.map((i) => i.groupKey ?? null)}::text[]` : NOTHING})
                          WITH ORDINALITY AS k (id, payload, delay, ttl, notify, priority, ${traced ? sql`trace, ` : NOTHING}${grouped ? sql`grp, ` : NOTHING}ord), depth
          WHERE k.ord <= ${depthBelow} - depth.n
        ), ins AS (
          INSERT INTO queue_messages (id, app_id, queue, payload, visible_at, expires_at, priority${traced ? TRACE_COLUMN : NOTHING}${grouped ? GROUP_COLUMNS : NOTHING})
          SELECT id, ${appId}, ${queue}, payload, t + make_interval(secs => delay) + ${BATCH_ORDER}, t + make_interval(secs => ttl), priority${
            traced ? sql`, trace` : NOTHING
          }${grouped ? BATCH_GROUP_VALUES : NOTHING}
          FROM src
          RETURNING id, expires_at
        ), notified AS (
          SELECT pg_notify(${QUEUE_CHANNEL}, src.notify || '|' || count(*)) FROM src
          WHERE src.notify IS NOT NULL
          GROUP BY src.notify
        )
        SELECT (SELECT n FROM depth) AS n, ins.id, ins.expires_at, (SELECT count(*) FROM notified) AS notified
        FROM (SELECT 1) one LEFT JOIN ins ON true`.execute(db);
      const inserted = new Map<string, Date>();
      let depth = 0;
      for (const row of rows) {
        depth = Number(row.n);
        if (row.id) inserted.set(row.id, toDate(row.expires_at));
      }
      return ids.map((id): PutResult => {
        const expiresAt = inserted.get(id);
        return expiresAt ? { inserted: true, id, expiresAt } : { inserted: false, depth: depth + inserted.size };
      });
    },

    putAll(appId, queue, maxDepth, items, dedupWindowSeconds = 0, answerIn) {
      return transact(db, async (trx) => {
        await sql`SELECT pg_advisory_xact_lock(hashtextextended(${`queue:${appId}:${queue}`}, 0))`.execute(trx);
        // Dedup keys are read and written only by puts holding the lock, so
        // what is read here stays true until the commit.
        const keys = [...new Set(items.flatMap((i) => (i.dedupKey === undefined ? [] : [i.dedupKey])))];
        const firsts = new Map<string, { id: string; expiresAt: Date; deduplicated: boolean }>();
        if (keys.length > 0) {
          const { rows } = await sql<{ dedup_key: string; message_id: string; message_expires_at: Date | string }>`
            SELECT dedup_key, message_id, message_expires_at FROM queue_dedup
            WHERE app_id = ${appId} AND queue = ${queue} AND dedup_key = ANY (${keys}::text[]) AND until > statement_timestamp()`.execute(
            trx,
          );
          for (const r of rows)
            firsts.set(r.dedup_key, { id: r.message_id, expiresAt: toDate(r.message_expires_at), deduplicated: true });
        }
        // Which items add a message: those without a key, and the first of each key not seen in the window.
        const fresh: { item: PutItem; id: string }[] = [];
        const answers = items.map((item): string | { id: string } => {
          if (item.dedupKey !== undefined && firsts.has(item.dedupKey)) return item.dedupKey;
          const id = crypto.randomUUID();
          fresh.push({ item, id });
          if (item.dedupKey !== undefined)
            firsts.set(item.dedupKey, { id, expiresAt: new Date(0), deduplicated: true });
          return { id };
        });
        const inserted = new Map<string, Date>();
        if (fresh.length > 0) {
          // One notification per distinct payload with its count, counted here:
          // a batch mostly repeats one payload, not worth sending per message.
          const notes = new Map<string, number>();
          for (const { item } of fresh)
            if (item.notify !== undefined) notes.set(item.notify, (notes.get(item.notify) ?? 0) + 1);
          // One statement after the lock (its snapshot sees every put that held
          // the lock before): count, and insert all only if they fit.
          const { rows } = await sql<{ n: number; id: string | null; expires_at: Date | string | null }>`${PREPARED}
            WITH depth AS (
              SELECT ${depthOf(appId, queue)} AS n
            ), src AS (
              SELECT k.id, k.payload, k.delay, k.ttl, k.priority, k.grp, k.ord
              FROM unnest(${uuidArray(fresh.map((f) => f.id))}, ${jsonTextArray(fresh.map((f) => f.item.payload))},
                          ${intArray(fresh.map((f) => f.item.delaySeconds))}, ${intArray(fresh.map((f) => f.item.ttlSeconds))},
                          ${intArray(fresh.map((f) => f.item.priority ?? 0))}, ${fresh.map((f) => f.item.groupKey ?? null)}::text[])
                   WITH ORDINALITY AS k (id, payload, delay, ttl, priority, grp, ord), depth
              WHERE depth.n + ${fresh.length}::int <= ${maxDepth}::int
            ), ins AS (
              INSERT INTO queue_messages (id, app_id, queue, payload, visible_at, expires_at, priority${GROUP_COLUMNS})
              SELECT id, ${appId}, ${queue}, payload, statement_timestamp() + make_interval(secs => delay) + ${BATCH_ORDER}, statement_timestamp() + make_interval(secs => ttl), priority${BATCH_GROUP_VALUES}
              FROM src ORDER BY ord
              RETURNING id, expires_at
            ), notified AS (
              SELECT pg_notify(${QUEUE_CHANNEL}, n.notify || '|' || n.count)
              FROM unnest(${[...notes.keys()]}::text[], ${[...notes.values()]}::int[]) AS n (notify, count)
              WHERE EXISTS (SELECT 1 FROM ins)
            )
            SELECT (SELECT n FROM depth) AS n, ins.id, ins.expires_at, (SELECT count(*) FROM notified) AS notified
            FROM (SELECT 1) one LEFT JOIN ins ON true`.execute(trx);
          if (!rows[0]?.id) return { inserted: false as const, depth: Number(rows[0]?.n ?? 0) };
          for (const r of rows) inserted.set(r.id!, toDate(r.expires_at));
          const keyed = fresh.filter((f) => f.item.dedupKey !== undefined);
          if (keyed.length > 0) {
            // A key past its window is taken over; one within it was read above, so none conflicts here otherwise.
            await sql`
              INSERT INTO queue_dedup (app_id, queue, dedup_key, message_id, message_expires_at, until)
              SELECT ${appId}, ${queue}, k.key, k.id, k.expires_at, statement_timestamp() + make_interval(secs => ${dedupWindowSeconds})
              FROM unnest(${keyed.map((f) => f.item.dedupKey!)}::text[], ${keyed.map((f) => f.id)}::uuid[],
                          ${keyed.map((f) => inserted.get(f.id)!.toISOString())}::timestamptz[]) AS k (key, id, expires_at)
              ON CONFLICT (app_id, queue, dedup_key) DO UPDATE
              SET message_id = excluded.message_id, message_expires_at = excluded.message_expires_at, until = excluded.until`.execute(
              trx,
            );
          }
        }
        const messages = answers.map((a): PutAllMessage => {
          if (typeof a === "string") {
            const first = firsts.get(a)!;
            const expiresAt = inserted.get(first.id) ?? first.expiresAt;
            return { id: first.id, expiresAt, deduplicated: true };
          }
          return { id: a.id, expiresAt: inserted.get(a.id)!, deduplicated: false };
        });
        await answerIn?.(transactionAsDb(trx), messages);
        return { inserted: true as const, messages };
      });
    },

    async putDroppingOldest(input) {
      // The new row is not visible to the DELETE's snapshot, so keeping
      // `keep - 1` of the others leaves `keep` waiting with the new one. The
      // oldest one kept is found without locking; only the rows older than it
      // are locked and deleted. (`OFFSET` under `FOR UPDATE` locks every row
      // it skips too: the newest `keep - 1` events stayed locked until the
      // publisher's transaction ended, and consumers found `_events` empty.)
      const others = Math.max(input.keep - 1, 0);
      const statement = sql<DroppingPutRow>`
        WITH ins AS (
          INSERT INTO queue_messages (app_id, queue, payload, visible_at, expires_at)
          VALUES (${input.appId}, ${input.queue}, ${input.payload},
                  now() + make_interval(secs => ${input.delaySeconds}),
                  now() + make_interval(secs => ${input.ttlSeconds}))
          RETURNING id, expires_at
        ), dropped AS (
          DELETE FROM queue_messages WHERE id IN (
            SELECT id FROM queue_messages
            WHERE app_id = ${input.appId} AND queue = ${input.queue} AND ${WAITING}
              AND (${others}::int = 0 OR (enqueued_at, id) < (
                SELECT enqueued_at, id FROM queue_messages
                WHERE app_id = ${input.appId} AND queue = ${input.queue} AND ${WAITING}
                ORDER BY enqueued_at DESC, id DESC
                OFFSET greatest(${others}::int - 1, 0) LIMIT 1))
            FOR UPDATE SKIP LOCKED
          )
          RETURNING 1
        )
        SELECT ins.id, ins.expires_at, (SELECT count(*)::int FROM dropped) AS dropped,
               CASE WHEN ${input.notify ?? null}::text IS NOT NULL
                    THEN pg_notify(${QUEUE_CHANNEL}, ${input.notify ?? null}::text) END AS notified
        FROM ins`;
      // On a store built on a transaction (the event's publisher) the NOTIFY is sent at its commit.
      const { rows } = await statement.execute(db);
      const row = rows[0];
      return { id: row.id, expiresAt: toDate(row.expires_at), dropped: Number(row.dropped) };
    },
  };
}

/** Claims and their leases: claim (burying the dead), extend, nack, release, still leased, and acks. */
function createLeaseStore({
  db,
  relaxedDb,
}: QueueDbs): Pick<
  QueueStore,
  "release" | "claimMany" | "queuesWithDeliveryLimit" | "extend" | "nack" | "stillLeased" | "ackMany"
> {
  /**
   * The claim, one statement built here once: `next` takes up to `n` visible
   * messages of the line (`SKIP LOCKED`, so racing claims never take one
   * message twice), those with a priority first (`next_high`, highest first,
   * through the partial index of migration 0031, which a queue without
   * priorities leaves empty), then the rest (`next_plain`, for what is left of
   * `n`), each part oldest first, and of a group only its head (`groupHead`: a message of a group is not
   * claimable while one put before it in the group is stored, leased, held back or delayed; a concurrent
   * claim that skips a locked head still sees it stored, so it never takes the next one); and `claimed` leases them: `lease_until` is the lease's
   * end, `visible_at` that plus the retry hold of the rule (the message comes
   * back that long after a lapse), and the delivery is counted.
   * MATERIALIZED: the locking subquery runs exactly once, so the LIMIT holds
   * (an inlined or semi-joined subquery may be re-run by the planner).
   * `m.id = ANY (...)`, and no join, lets the UPDATE find its rows through
   * the primary key in one index scan (its rows are locked by `next`, so
   * nothing else can change them in between): with a join on `next`, the
   * planner hashes `next` against a scan of the whole table, whose cost grows
   * with the messages in flight, or re-runs the index scan for every row of
   * `next`, sorting the array each time. Each row's visibility before the
   * claim is then read from `next`. When fewer than `n`
   * are claimed, the same round trip tells when the line's next message
   * (other than those just taken) becomes visible, so a waiting consume can
   * set a timer instead of polling.
   *
   * Under a dead-letter rule (`maxDeliveries` > 0), `dead` also takes, among
   * the head of the line (the next `n + BURY_BATCH` visible messages, so that
   * a long line costs no longer scan), the messages that had their last
   * delivery and deletes them (`gone`); `moved` puts them in the queue's
   * dead-letter list, on the policy's dead-letter queue, or nowhere (drop),
   * all in the same statement, so a message is in exactly one place. `next`
   * then leases only messages below the limit (one beyond the head is buried
   * once it reaches the head). A lease is checked against the row's latest
   * version when locked: a message leased for its last time is never leased
   * again, by anyone. `buried` counts the moved.
   */
  async function claimManyWith(appId: string, queue: string, leaseSeconds: number, n: number, rule: ClaimRule) {
    const max = rule.maxDeliveries;
    const lease = sql`make_interval(secs => ${leaseSeconds})`;
    const hold = sql`make_interval(secs => ${retryHoldSeconds(
      sql`${rule.retry.delaySeconds}::float8`,
      sql`${rule.retry.backoff}::float8`,
      sql`${rule.retry.maxDelaySeconds}::float8`,
      sql`m.deliveries`,
      sql`${rule.retry.jitter}::float8`,
    )})`;
    const lineHead = sql`app_id = ${appId} AND queue = ${queue} AND visible_at <= now() AND expires_at > now()`;
    const target = rule.deadLetterQueue;
    const moved =
      target === null
        ? sql`INSERT INTO queue_dead_letters (id, app_id, queue, payload, enqueued_at, deliveries, claims, expires_at, failure_reason, group_key)
              SELECT id, app_id, queue, payload, enqueued_at, deliveries, claims, now() + make_interval(secs => ${rule.ttlSeconds}), failure_reason, group_key
              FROM gone RETURNING 1`
        : target === DROP_DEAD_LETTERS
          ? sql`SELECT 1 FROM gone`
          : // It keeps its id (the row under it was deleted by this statement) and its lease count, as a
            // replay does: no receipt of its earlier life acks a lease of its new one. A grouped one joins its
            // group's line there, behind what that queue already holds of the group.
            sql`INSERT INTO queue_messages (id, app_id, queue, payload, visible_at, expires_at, claims, failure_reason, group_key, group_seq)
                SELECT id, app_id, ${target}, payload, now(), now() + make_interval(secs => ${rule.ttlSeconds}), claims, failure_reason,
                       group_key, ${lineGroupSeq(sql`${target}::text`)}
                FROM gone ORDER BY group_seq RETURNING 1`;
    const notifyMoved =
      typeof target === "string" && target !== DROP_DEAD_LETTERS && rule.deadLetterNotify !== undefined
        ? sql`CASE WHEN count(*) > 0 THEN pg_notify(${QUEUE_CHANNEL}, ${rule.deadLetterNotify}::text || '|' || count(*)) END`
        : sql`NULL`;
    const bury =
      max > 0
        ? sql`head AS MATERIALIZED (
              SELECT id, deliveries FROM queue_messages WHERE ${lineHead}
              ORDER BY visible_at
              LIMIT ${n + BURY_BATCH}
            ), dead AS MATERIALIZED (
              SELECT m.id FROM queue_messages m
              WHERE m.id IN (SELECT id FROM head WHERE deliveries >= ${max})
                AND m.deliveries >= ${max} AND m.visible_at <= now()
              FOR UPDATE SKIP LOCKED
            ), gone AS (
              DELETE FROM queue_messages m WHERE m.id = ANY (ARRAY(SELECT id FROM dead))
              RETURNING m.id, m.app_id, m.queue, m.payload, m.enqueued_at, m.deliveries, m.claims, ${LAST_FAILURE} AS failure_reason,
                        m.group_key, m.group_seq
            ), moved AS (${moved}),
            buried AS (SELECT count(*)::int AS n, ${notifyMoved} AS notified, (${groupsReleased(sql`gone`)}) AS released FROM moved),`
        : sql`dead AS (SELECT NULL::uuid AS id WHERE false), buried AS (SELECT 0 AS n),`;
    // `claim` names the statement where the database shows it (pg_stat_activity keeps only its first 1 KiB).
    const { rows } = await sql<ClaimRow>`${PREPARED} /* claim */
      WITH ${bury} next_high AS MATERIALIZED (
        SELECT id, visible_at, priority FROM queue_messages q
        WHERE ${lineHead} AND priority > 0 ${max > 0 ? sql`AND deliveries < ${max}` : sql``} AND ${HEAD_OF_GROUP}
        ORDER BY priority DESC, visible_at
        LIMIT ${n}
        FOR UPDATE SKIP LOCKED
      ), next_plain AS MATERIALIZED (
        SELECT id, visible_at, priority FROM queue_messages q
        WHERE ${lineHead} AND priority = 0 ${max > 0 ? sql`AND deliveries < ${max}` : sql``} AND ${HEAD_OF_GROUP}
        ORDER BY visible_at
        LIMIT (${n}::int - (SELECT count(*) FROM next_high)::int)
        FOR UPDATE SKIP LOCKED
      ), next AS MATERIALIZED (
        SELECT id, visible_at, priority FROM next_high UNION ALL SELECT id, visible_at, priority FROM next_plain
      ), claimed AS (
        UPDATE queue_messages m
        SET lease_until = now() + ${lease},
            visible_at = now() + ${lease} + ${
              // The last delivery allowed has no retry hold: it dies as soon as its lease lapses.
              max > 0 ? sql`CASE WHEN m.deliveries + 1 >= ${max} THEN interval '0' ELSE ${hold} END` : hold
            },
            deliveries = least(m.deliveries, ${INT4_MAX - 1}) + 1,
            claims = CASE WHEN m.claims >= ${INT4_MAX} THEN 1 ELSE m.claims + 1 END,
            failure_reason = ${LAST_FAILURE}
        WHERE m.id = ANY (ARRAY(SELECT id FROM next))
        RETURNING m.id, m.payload, m.enqueued_at, m.expires_at, m.lease_until, m.deliveries, m.claims, m.trace_parent
      )
      SELECT c.id, c.payload, (extract(epoch FROM c.enqueued_at) * 1000)::float8 AS enqueued_at,
             (extract(epoch FROM c.expires_at) * 1000)::float8 AS expires_at,
             (extract(epoch FROM c.lease_until) * 1000)::float8 AS lease_until, c.deliveries, c.claims,
             (extract(epoch FROM n.visible_at) * 1000)::float8 AS was_visible_at, n.priority::int AS priority,
             NULL::timestamptz AS next_visible_at, (SELECT n FROM buried) AS buried, c.trace_parent
      FROM claimed c JOIN next n ON n.id = c.id
      UNION ALL
      SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, (
        SELECT min(visible_at) FROM queue_messages q
        WHERE app_id = ${appId} AND queue = ${queue} AND expires_at > now()
          AND id NOT IN (SELECT id FROM next) AND id NOT IN (SELECT id FROM dead)
          AND ${groupHead("q", sql` AND g.id NOT IN (SELECT id FROM dead)`)}
      ), (SELECT n FROM buried), NULL
      WHERE (SELECT count(*) FROM claimed) < ${n} OR (SELECT n FROM buried) > 0`.execute(db);
    return claimedRows(queue, rows);
  }

  return {
    async queuesWithDeliveryLimit() {
      // A queue's policy sets the limit, or the app's `maxDeliveries` (limits the admin changed are in apps.limits).
      const { rows } = await sql<{ app_id: string; queue: string }>`
        SELECT app_id, queue FROM queue_policies WHERE max_deliveries > 0
        UNION
        SELECT DISTINCT m.app_id, m.queue FROM queue_messages m
        WHERE m.app_id IN (SELECT id FROM apps WHERE (limits->>'maxDeliveries')::int > 0)`.execute(db);
      return rows.map((r) => ({ appId: r.app_id, queue: r.queue }));
    },

    async release(appId, leases, notify) {
      if (leases.length === 0) return 0;
      const { rows } = await sql<{ n: number }>`
        WITH released AS (
          UPDATE queue_messages m
          SET visible_at = k.visible_before, lease_until = NULL, deliveries = m.deliveries - 1, claims = m.claims - 1
          FROM unnest(${uuidArray(leases.map((l) => l.id))}, ${intArray(leases.map((l) => l.claim))},
                      ${leases.map((l) => l.visibleBefore.toISOString())}::timestamptz[]) AS k (id, claim, visible_before)
          WHERE m.id = k.id AND m.app_id = ${appId} AND m.claims = k.claim
          RETURNING 1
        )
        SELECT count(*)::int AS n,
               CASE WHEN count(*) > 0 AND ${notify ?? null}::text IS NOT NULL
                    THEN pg_notify(${QUEUE_CHANNEL}, ${notify ?? null}::text || '|' || count(*)) END AS notified
        FROM released`.execute(db);
      return Number(rows[0]?.n ?? 0);
    },

    claimMany: (appId, queue, leaseSeconds, n, rule = PLAIN_CLAIM) =>
      claimManyWith(appId, queue, leaseSeconds, n, rule),

    async extend(appId, id, claim, leaseSeconds) {
      const { rows } = await sql<{ lease_until: Date | string }>`${PREPARED}
        UPDATE queue_messages
        SET visible_at = now() + make_interval(secs => ${leaseSeconds}) + (visible_at - lease_until),
            lease_until = now() + make_interval(secs => ${leaseSeconds})
        WHERE id = ${id} AND app_id = ${appId} AND claims = ${claim} AND ${LEASED}
        RETURNING lease_until`.execute(db);
      return rows[0] ? toDate(rows[0].lease_until) : null;
    },

    async nack(appId, id, claim, delaySeconds, defaults, notifyPrefix, reason) {
      // The delivery that ends here is the row's `deliveries`-th: its hold is
      // the one a lapse of it would have had (the claim's formula, one delivery on).
      const { rows } = await sql<{ queue: string; visible_at_ms: number }>`${PREPARED}
        WITH p AS (
          SELECT coalesce(p.retry_delay_seconds, ${defaults.delaySeconds})::float8 AS delay,
                 coalesce(p.retry_backoff, ${defaults.backoff})::float8 AS backoff,
                 coalesce(p.max_retry_delay_seconds, ${defaults.maxDelaySeconds})::float8 AS max_delay,
                 -- The default jitter is the default policy's: a queue that set its own delay keeps it exact.
                 coalesce(p.retry_jitter, CASE WHEN p.retry_delay_seconds IS NULL THEN ${defaults.jitter}::float8 ELSE 0 END)::float8 AS jitter,
                 coalesce(p.max_deliveries, ${defaults.maxDeliveries ?? 0})::int AS max_deliveries
          FROM queue_messages m LEFT JOIN queue_policies p ON p.app_id = m.app_id AND p.queue = m.queue
          WHERE m.id = ${id} AND m.app_id = ${appId}
        ), nacked AS (
          UPDATE queue_messages m
          SET lease_until = NULL,
              failure_reason = ${reason ?? null}::text,
              -- The last delivery allowed, nacked: no hold, it dies now (at the next claim or sweep).
              visible_at = CASE WHEN p.max_deliveries > 0 AND m.deliveries >= p.max_deliveries THEN now()
                ELSE now() + make_interval(secs => coalesce(${delaySeconds ?? null}::float8,
                                                            ${retryHoldSeconds(sql`p.delay`, sql`p.backoff`, sql`p.max_delay`, sql`m.deliveries - 1`, sql`p.jitter`)})) END
          FROM p
          WHERE m.id = ${id} AND m.app_id = ${appId} AND m.claims = ${claim}
            AND m.lease_until > now() AND m.visible_at > now()
          RETURNING m.queue, CASE WHEN m.visible_at <= now() THEN 0
                                  ELSE (extract(epoch FROM m.visible_at) * 1000)::float8 END AS visible_at_ms
        )
        SELECT queue, visible_at_ms,
               CASE WHEN ${notifyPrefix ?? null}::text IS NOT NULL
                    THEN pg_notify(${QUEUE_CHANNEL}, ${notifyPrefix ?? null}::text || queue || '|' || round(visible_at_ms)) END AS notified
        FROM nacked`.execute(db);
      const row = rows[0];
      return row ? { queue: row.queue, visibleAtMs: Number(row.visible_at_ms) } : undefined;
    },

    async stillLeased(messages) {
      if (messages.length === 0) return new Set();
      const named = new Set(messages.map((m) => `${m.appId}|${m.id}`));
      const apps = [...new Set(messages.map((m) => m.appId))];
      const { rows } = await sql<{ app_id: string; id: string; claims: number }>`${PREPARED}
        SELECT app_id, id, claims FROM queue_messages
        WHERE id = ANY (${uuidArray(messages.map((m) => m.id))}) AND app_id = ANY (${uuidArray(apps)})
          AND lease_until > now() AND visible_at > now()`.execute(db);
      // The statement narrows by app; each message is matched with the app it was named with here.
      return new Set(
        rows.filter((r) => named.has(`${r.app_id}|${r.id}`)).map((r) => `${r.app_id}|${r.id}|${Number(r.claims)}`),
      );
    },

    async ackMany(receipts) {
      // `m.id = ANY` finds the rows through the primary key, in one index
      // scan; the receipts are matched by a hashed subplan (the `IS TRUE`
      // keeps the planner from turning the IN into a join), so a batch costs
      // linear time under any plan. Joined with `unnest` instead, the planner
      // may scan every leased message of the table, or (a prepared
      // statement's generic plan, which takes the arrays for 10 rows) compare
      // every receipt with every row: 180 ms for 1,000 receipts.
      const ids = uuidArray(receipts.map((r) => r.id));
      const { rows } = await sql<AckedRow>`${PREPARED}
        WITH acked AS (
          DELETE FROM queue_messages m
          WHERE m.id = ANY (${ids}) AND m.lease_until > now() AND m.visible_at > now()
            AND ((m.app_id, m.id, m.claims) IN (
                  SELECT * FROM unnest(${uuidArray(receipts.map((r) => r.appId))}, ${ids},
                                       ${intArray(receipts.map((r) => r.claim))}))) IS TRUE
          RETURNING m.id, m.app_id, m.queue, m.claims, m.group_key, m.group_seq
        ), woke AS (
          -- An acked head whose group holds more: the next is claimable now; waiting consumers are told.
          ${groupsReleased(sql`acked`)}
        ), counted AS (
          -- The hourly ack count (migration 0019), in this statement: exactly the rows it deleted.
          INSERT INTO queue_activity (app_id, queue, hour, slot, acks)
          SELECT app_id, queue, date_trunc('hour', now(), 'UTC'), (pg_backend_pid() % 16)::smallint, count(*)
          FROM acked GROUP BY app_id, queue ORDER BY app_id, queue
          ON CONFLICT (app_id, queue, hour, slot) DO UPDATE SET acks = queue_activity.acks + excluded.acks
        )
        SELECT id, app_id, claims, (SELECT count(*) FROM woke) AS woke FROM acked`.execute(relaxedDb);
      // A receipt acked twice in one batch: only the first is told true.
      const deleted = new Set(rows.map((r) => `${r.app_id}|${r.id}|${Number(r.claims)}`));
      return receipts.map((r) => deleted.delete(`${r.appId}|${r.id}|${r.claim}`));
    },
  };
}

/** An operator's view and control of one queue's line: peek and purge. */
function createControlStore({ db }: QueueDbs): Pick<QueueStore, "peek" | "purge" | "messageState"> {
  return {
    async peek(appId, queue, limit, maxChars, after) {
      // Keyset paging on the claim order, with the id as the tie-break: a page
      // starts right after the previous page's last message, whatever was
      // claimed or put meanwhile (no offset that shifts). The plain
      // `visible_at >=` lets the line index start the scan there.
      const [visibleAt = null, enqueuedAt = null, afterId = null] = after === undefined ? [] : after.split("|");
      const { rows } = await sql<{
        id: string;
        payload: string;
        size: number;
        enqueued_at: unknown;
        expires_at: unknown;
        deliveries: number;
        position: string;
      }>`
        SELECT id, left(payload, ${maxChars + 1}) AS payload, octet_length(payload) AS size, enqueued_at, expires_at, deliveries,
               ${exactTimeText(sql`visible_at`)} || '|' || ${exactTimeText(sql`enqueued_at`)} || '|' || id AS position
        FROM queue_messages
        WHERE app_id = ${appId} AND queue = ${queue} AND ${WAITING}
          AND (${afterId}::uuid IS NULL
               OR (visible_at >= ${visibleAt}::timestamptz
                   AND (visible_at, enqueued_at, id) > (${visibleAt}::timestamptz, ${enqueuedAt}::timestamptz, ${afterId}::uuid)))
        ORDER BY visible_at, enqueued_at, id
        LIMIT ${limit}`.execute(db);
      return rows.map((r) => ({
        id: r.id,
        payload: r.payload,
        sizeBytes: Number(r.size),
        enqueuedAt: toDate(r.enqueued_at),
        expiresAt: toDate(r.expires_at),
        deliveries: Number(r.deliveries),
        position: r.position,
      }));
    },

    async purge(appId, queue, includeLeased = true) {
      return transact(db, async (trx) => {
        // Without the leased ones: the rows not leased when the statement reads them. A lease taken
        // meanwhile is not purged (the claim holds the row lock), one lapsing meanwhile may be.
        const { rows } = await sql<{ n: Count }>`
          WITH gone AS (
            DELETE FROM queue_messages
            WHERE app_id = ${appId} AND queue = ${queue} ${includeLeased ? sql`` : sql`AND NOT coalesce(${LEASED}, false)`}
            RETURNING 1
          )
          SELECT count(*)::int AS n FROM gone`.execute(trx);
        return Number(rows[0]?.n ?? 0);
      });
    },

    async messageState(appId, queue, id) {
      // One round trip: the message in line (not expired, unless a lease still holds it), else its dead letter.
      const { rows } = await sql<{
        dead: boolean;
        leased: boolean;
        delayed: boolean;
        enqueued_at: When;
        expires_at: When;
        deliveries: Count;
        visible_at: When | null;
        lease_until: When | null;
        failure_reason: string | null;
        died_at: When | null;
        group_key: string | null;
      }>`
        SELECT false AS dead, coalesce(${LEASED}, false) AS leased, visible_at > now() AS delayed,
               enqueued_at, expires_at, deliveries, visible_at, lease_until, failure_reason, NULL::timestamptz AS died_at, group_key
        FROM queue_messages
        WHERE id = ${id} AND app_id = ${appId} AND queue = ${queue}
          AND (expires_at > now() OR coalesce(${LEASED}, false))
        UNION ALL
        SELECT true, false, false, enqueued_at, expires_at, deliveries, NULL, NULL, failure_reason, died_at, group_key
        FROM queue_dead_letters
        WHERE id = ${id} AND app_id = ${appId} AND queue = ${queue} AND expires_at > now()
        LIMIT 1`.execute(db);
      const r = rows[0];
      if (!r) return undefined;
      const status = r.dead ? "dead" : r.leased ? "leased" : r.delayed ? "delayed" : "waiting";
      return {
        status,
        id,
        queue,
        enqueuedAt: toDate(r.enqueued_at),
        expiresAt: toDate(r.expires_at),
        deliveries: Number(r.deliveries),
        visibleAt: status === "delayed" && r.visible_at !== null ? toDate(r.visible_at) : null,
        leaseExpiresAt: status === "leased" && r.lease_until !== null ? toDate(r.lease_until) : null,
        failureReason: r.failure_reason,
        diedAt: r.died_at === null ? null : toDate(r.died_at),
        groupKey: r.group_key,
      };
    },
  };
}

/** Dead letters: listing, replaying onto the queue and purging; their expiry is housekeeping. */
function createDeadLetterStore({
  db,
}: QueueDbs): Pick<QueueStore, "listDeadLetters" | "replayDeadLetters" | "lastDeadLetterSeq" | "purgeDeadLetters"> {
  return {
    async listDeadLetters(appId, queue, afterSeq, limit, maxChars) {
      const { rows } = await sql<DeadLetterRow>`
        SELECT d.seq::text AS seq_text, d.id,
               ${maxChars === undefined ? sql`d.payload` : sql`left(d.payload, ${maxChars + 1})`} AS payload,
               octet_length(d.payload) AS size,
               d.enqueued_at, d.deliveries, d.died_at, d.expires_at, d.failure_reason, d.group_key
        FROM queue_dead_letters d
        WHERE d.app_id = ${appId} AND d.queue = ${queue} AND d.seq > ${afterSeq ?? "0"}::bigint
        ORDER BY d.seq
        LIMIT ${limit}`.execute(db);
      return rows.map((r) => ({
        seq: r.seq_text,
        id: r.id,
        payload: r.payload,
        sizeBytes: Number(r.size),
        enqueuedAt: toDate(r.enqueued_at),
        deliveries: Number(r.deliveries),
        diedAt: toDate(r.died_at),
        expiresAt: toDate(r.expires_at),
        failureReason: r.failure_reason,
        groupKey: r.group_key,
      }));
    },

    async replayDeadLetters(appId, queue, which, limit, ttlSeconds, notify) {
      const ids = "ids" in which ? which.ids : null;
      const upTo = "all" in which ? (which.upToSeq ?? null) : null;
      // SKIP LOCKED: a dead letter being replayed or purged by another call is
      // that call's; the DELETE and the INSERT are one statement, so a message
      // is in line or dead, never both, never neither.
      const { rows } = await sql<CountRow>`
        WITH picked AS (
          SELECT id FROM queue_dead_letters
          WHERE app_id = ${appId} AND queue = ${queue}
            AND (${ids}::uuid[] IS NULL OR id = ANY(${ids}::uuid[]))
            AND (${upTo}::bigint IS NULL OR seq <= ${upTo}::bigint)
          ORDER BY seq
          LIMIT ${limit}
          FOR UPDATE SKIP LOCKED
        ), back AS (
          DELETE FROM queue_dead_letters d USING picked WHERE d.id = picked.id
          RETURNING d.id, d.app_id, d.queue, d.payload, d.enqueued_at, d.claims, d.seq, d.group_key
        ), ins AS (
          -- deliveries start again; claims go on, so no receipt of the message's earlier life matches again.
          -- A grouped one goes to the end of its group's line (docs/queues.md "Ordered groups").
          INSERT INTO queue_messages (id, app_id, queue, payload, enqueued_at, visible_at, expires_at, deliveries, claims, group_key, group_seq)
          SELECT id, app_id, queue, payload, enqueued_at, now(), now() + make_interval(secs => ${ttlSeconds}), 0, claims,
                 group_key, ${lineGroupSeq(sql`queue`)}
          FROM back ORDER BY seq
          RETURNING 1
        ), n AS (SELECT count(*)::int AS n FROM ins)
        SELECT n.n, CASE WHEN n.n > 0 AND ${notify ?? null}::text IS NOT NULL
                         THEN pg_notify(${QUEUE_CHANNEL}, ${notify ?? null}::text || '|' || n.n) END AS notified
        FROM n`.execute(db);
      return Number(rows[0].n);
    },

    async lastDeadLetterSeq(appId, queue) {
      const { rows } = await sql<SeqRow>`
        SELECT max(seq)::text AS seq FROM queue_dead_letters WHERE app_id = ${appId} AND queue = ${queue}`.execute(db);
      return rows[0]?.seq ?? undefined;
    },

    async purgeDeadLetters(appId, queue, which) {
      const ids = "ids" in which ? which.ids : null;
      return transact(db, async (trx) => {
        const result = await sql`
          DELETE FROM queue_dead_letters
          WHERE app_id = ${appId} AND queue = ${queue} AND (${ids}::uuid[] IS NULL OR id = ANY(${ids}::uuid[]))`.execute(
          trx,
        );
        return Number(result.numAffectedRows ?? 0n);
      });
    },
  };
}

/**
 * Counters and what is read from them: the app's queues with their depth, in flight and dead
 * letters; when each queue's next message becomes visible; the hourly activity; and the compaction
 * of count rows.
 */
function createCountStore({ db }: QueueDbs): Pick<QueueStore, "compactCounts" | "list" | "nextVisible" | "activity"> {
  return {
    compactCounts(limit) {
      return db.transaction().execute(async (trx) => {
        const { rows } = await sql<{ app_id: string; queue: string; n: string | number }>`
          WITH locked AS (
            SELECT app_id, queue, slot FROM queue_counts
            WHERE (app_id, queue) IN (
              SELECT app_id, queue FROM queue_counts GROUP BY app_id, queue HAVING count(*) > 1 OR sum(n) = 0 LIMIT ${limit}
            )
            ORDER BY app_id, queue, slot
            FOR UPDATE
          ), gone AS (
            DELETE FROM queue_counts c USING locked l
            WHERE c.app_id = l.app_id AND c.queue = l.queue AND c.slot = l.slot
            RETURNING c.app_id, c.queue, c.n
          )
          SELECT app_id, queue, sum(n) AS n FROM gone GROUP BY app_id, queue`.execute(trx);
        const kept = rows.filter((r) => Number(r.n) !== 0);
        if (kept.length > 0)
          await sql`
            INSERT INTO queue_counts (app_id, queue, slot, n)
            SELECT * FROM unnest(${kept.map((r) => r.app_id)}::uuid[], ${kept.map((r) => r.queue)}::text[],
                                 ${kept.map(() => 0)}::smallint[], ${kept.map((r) => String(r.n))}::bigint[])
            ON CONFLICT (app_id, queue, slot) DO UPDATE SET n = queue_counts.n + excluded.n`.execute(trx);
        return rows.length;
      });
    },

    async list(appId) {
      // From the counts (one row per queue and slot), not the messages: each
      // queue then costs a few index probes, whatever its backlog. `oldestAt`
      // is the oldest among the first `OLDEST_SCAN` waiting messages of the
      // line (the oldest of all, unless leases lapsed behind younger puts). A
      // queue holding only dead letters is listed too (FULL JOIN), so the
      // operator sees it.
      const { rows } = await sql<{
        queue: string;
        total: number | string | null;
        in_flight: number | null;
        oldest_at: Date | string | null;
        dead_letters: number;
      }>`${PREPARED}
        WITH c AS (
          SELECT queue, sum(n) AS total FROM queue_counts WHERE app_id = ${appId} GROUP BY queue HAVING sum(n) > 0
        ), m AS (
          SELECT c.queue, c.total,
                 (SELECT count(*)::int FROM queue_messages q
                  WHERE q.app_id = ${appId} AND q.queue = c.queue AND q.visible_at > now() AND q.lease_until > now()) AS in_flight,
                 (SELECT min(h.enqueued_at) FROM (
                    SELECT q.enqueued_at FROM queue_messages q
                    WHERE q.app_id = ${appId} AND q.queue = c.queue AND q.expires_at > now()
                      AND NOT coalesce(q.lease_until > now() AND q.visible_at > now(), false)
                    ORDER BY q.visible_at LIMIT ${OLDEST_SCAN}) h) AS oldest_at
          FROM c
        ), e AS (
          SELECT queue, count(*)::int AS n FROM ${EXPIRED} x WHERE x.app_id = ${appId} GROUP BY queue
        ), d AS (
          SELECT queue, count(*)::int AS n FROM queue_dead_letters WHERE app_id = ${appId} GROUP BY queue
        )
        SELECT coalesce(m.queue, d.queue) AS queue, m.total - coalesce(e.n, 0) AS total, m.in_flight, m.oldest_at,
               coalesce(d.n, 0) AS dead_letters
        FROM m LEFT JOIN e ON e.queue = m.queue FULL JOIN d ON d.queue = m.queue
        ORDER BY 1`.execute(db);
      return rows
        .map((r) => {
          const inFlight = Number(r.in_flight ?? 0);
          const depth = Number(r.total ?? 0) - inFlight;
          return {
            name: r.queue,
            depth,
            inFlight,
            oldestAt: depth > 0 && r.oldest_at != null ? toDate(r.oldest_at) : null,
            deadLetters: Number(r.dead_letters),
          };
        })
        .filter((q) => q.depth > 0 || q.inFlight > 0 || q.deadLetters > 0);
    },

    async nextVisible(keys) {
      if (keys.length === 0) return [];
      const { rows } = await sql<NextVisibleRow>`
        SELECT k.app_id, k.queue, v.at
        FROM unnest(${keys.map((k) => k.appId)}::uuid[], ${keys.map((k) => k.queue)}::text[]) AS k (app_id, queue)
        CROSS JOIN LATERAL (
          SELECT visible_at AS at FROM queue_messages q
          WHERE app_id = k.app_id AND queue = k.queue AND expires_at > now() AND ${HEAD_OF_GROUP}
          ORDER BY visible_at LIMIT 1
        ) v`.execute(db);
      return rows.map((r) => ({ appId: r.app_id, queue: r.queue, at: toDate(r.at) }));
    },

    async activity(appId, queue, hours) {
      // The hours come from the database's clock, as the counts' hours do.
      const { rows } = await sql<{ at: Date | string; puts: string | number; acks: string | number }>`${PREPARED}
        WITH h AS (
          SELECT generate_series(date_trunc('hour', now(), 'UTC') - make_interval(hours => ${hours - 1}),
                                 date_trunc('hour', now(), 'UTC'), interval '1 hour') AS at
        )
        SELECT h.at, coalesce(sum(a.puts), 0) AS puts, coalesce(sum(a.acks), 0) AS acks
        FROM h LEFT JOIN queue_activity a ON a.app_id = ${appId} AND a.queue = ${queue} AND a.hour = h.at
        GROUP BY h.at ORDER BY h.at`.execute(db);
      return rows.map((r) => ({ at: toDate(r.at), puts: Number(r.puts), acks: Number(r.acks) }));
    },
  };
}

/** Policies: a queue's stored policy, read and replaced. */
function createPolicyStore({ db }: QueueDbs): Pick<QueueStore, "getPolicy" | "updatePolicy"> {
  return {
    async getPolicy(appId, queue) {
      const { rows } = await sql<PolicyRow>`${PREPARED}
        SELECT max_deliveries, dead_letter_queue, retry_delay_seconds, retry_backoff, max_retry_delay_seconds,
               retry_jitter, lease_seconds, dedup_window_seconds, max_deliveries_per_second
        FROM queue_policies WHERE app_id = ${appId} AND queue = ${queue}`.execute(db);
      return rows[0] ? policyOf(rows[0]) : undefined;
    },

    updatePolicy(appId, queue, change) {
      return transact(db, async (trx) => {
        await sql`INSERT INTO queue_policies (app_id, queue) VALUES (${appId}, ${queue}) ON CONFLICT DO NOTHING`.execute(
          trx,
        );
        const { rows } = await sql<PolicyRow>`
          SELECT max_deliveries, dead_letter_queue, retry_delay_seconds, retry_backoff, max_retry_delay_seconds,
                 retry_jitter, lease_seconds, dedup_window_seconds, max_deliveries_per_second
          FROM queue_policies WHERE app_id = ${appId} AND queue = ${queue} FOR UPDATE`.execute(trx);
        const next = change(policyOf(rows[0]));
        await sql`
          UPDATE queue_policies
          SET max_deliveries = ${next.maxDeliveries}, dead_letter_queue = ${next.deadLetterQueue},
              retry_delay_seconds = ${next.retryDelaySeconds}, retry_backoff = ${next.retryBackoff},
              max_retry_delay_seconds = ${next.maxRetryDelaySeconds}, retry_jitter = ${next.retryJitter},
              lease_seconds = ${next.leaseSeconds},
              dedup_window_seconds = ${next.dedupWindowSeconds},
              max_deliveries_per_second = ${next.maxDeliveriesPerSecond}, updated_at = now()
          WHERE app_id = ${appId} AND queue = ${queue}`.execute(trx);
        return next;
      });
    },
  };
}

/** Housekeeping deletes: expired messages, dead letters and dedup keys, old activity, and what deleted apps left. */
function createHousekeepingStore({
  relaxedDb,
}: QueueDbs): Pick<
  QueueStore,
  | "deleteControlOrphans"
  | "expireDedupKeys"
  | "expire"
  | "deleteOrphans"
  | "expireDeadLetters"
  | "deleteDeadLetterOrphans"
  | "pruneActivity"
> {
  /** Deletes up to `limit` rows of `table` whose app is gone (deleted apps' messages and dead letters follow through housekeeping). */
  async function deleteOrphansOf(table: "queue_messages" | "queue_dead_letters", limit: number): Promise<number> {
    const result = await sql`
      DELETE FROM ${sql.table(table)} WHERE id IN (
        SELECT t.id FROM ${sql.table(table)} t
        WHERE NOT EXISTS (SELECT 1 FROM apps a WHERE a.id = t.app_id)
        LIMIT ${limit}
        FOR UPDATE SKIP LOCKED
      )`.execute(relaxedDb);
    return Number(result.numAffectedRows ?? 0n);
  }

  return {
    async deleteControlOrphans(limit) {
      let total = 0;
      for (const table of ["queue_policies", "queue_dedup", "queue_counts"] as const) {
        const result = await sql`
          DELETE FROM ${sql.table(table)} WHERE app_id IN (
            SELECT DISTINCT t.app_id FROM ${sql.table(table)} t
            WHERE NOT EXISTS (SELECT 1 FROM apps a WHERE a.id = t.app_id)
            LIMIT ${limit}
          )`.execute(relaxedDb);
        total += Number(result.numAffectedRows ?? 0n);
      }
      return total;
    },

    async expireDedupKeys(limit) {
      const result = await sql`
        DELETE FROM queue_dedup WHERE (app_id, queue, dedup_key) IN (
          SELECT app_id, queue, dedup_key FROM queue_dedup WHERE until <= now() ORDER BY until LIMIT ${limit}
          FOR UPDATE SKIP LOCKED
        )`.execute(relaxedDb);
      return Number(result.numAffectedRows ?? 0n);
    },

    async expire(limit) {
      const result = await sql`
        DELETE FROM queue_messages WHERE id IN (
          SELECT id FROM queue_messages
          WHERE expires_at <= now() AND NOT coalesce(${LEASED}, false)
          ORDER BY expires_at
          LIMIT ${limit}
          FOR UPDATE SKIP LOCKED
        )`.execute(relaxedDb);
      return Number(result.numAffectedRows ?? 0n);
    },

    deleteOrphans: (limit) => deleteOrphansOf("queue_messages", limit),

    async expireDeadLetters(limit) {
      const result = await sql`
        DELETE FROM queue_dead_letters WHERE id IN (
          SELECT id FROM queue_dead_letters
          WHERE expires_at <= now()
          ORDER BY expires_at
          LIMIT ${limit}
          FOR UPDATE SKIP LOCKED
        )`.execute(relaxedDb);
      return Number(result.numAffectedRows ?? 0n);
    },

    deleteDeadLetterOrphans: (limit) => deleteOrphansOf("queue_dead_letters", limit),

    async pruneActivity(keepHours, limit) {
      const result = await sql`
        DELETE FROM queue_activity WHERE (app_id, queue, hour, slot) IN (
          SELECT app_id, queue, hour, slot FROM queue_activity
          WHERE hour < date_trunc('hour', now(), 'UTC') - make_interval(hours => ${keepHours})
          ORDER BY hour LIMIT ${limit}
          FOR UPDATE SKIP LOCKED
        )`.execute(relaxedDb);
      return Number(result.numAffectedRows ?? 0n);
    },
  };
}

/**
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
/**
 * The retry hold, in seconds, after a message's `n`-th delivery lapsed or was
 * nacked: `min(maxDelay, delay * backoff^n)`.
 *
 * Why not `power(backoff, n)`: PostgreSQL raises an error where a float8
 * overflows instead of answering infinity, so from 2^1024 (the default
 * backoff's 1,024th delivery; 10^309 for the largest) every claim that reached
 * such a message failed, and the message, never leased, stopped its whole
 * queue. The power is taken as `exp(n * ln(backoff))` with the exponent capped
 * where the hold is the cap anyway (any delay above 0 times e^600 is past any
 * `maxDelay`; a delay of 0 stays 0). `backoff` is at least 1.
 */
/**
 * The largest `deliveries` and `claims` (int4 columns). Both grow by one per
 * lease with no end when `maxDeliveries` is 0, a message can live a year and
 * a replay keeps `claims`: past it, `+ 1` would raise an error in the claim
 * statement and, with the message at the head of the line, stop its whole
 * queue. `deliveries` stays at it; `claims` starts again from 1 (a receipt's
 * count need only differ from the last ones').
 */
const INT4_MAX = 2_147_483_647;

function retryHoldSeconds(
  delay: RawBuilder<unknown>,
  backoff: RawBuilder<unknown>,
  maxDelay: RawBuilder<unknown>,
  n: RawBuilder<unknown>,
  jitter: RawBuilder<unknown>,
) {
  // Jitter draws each hold from [hold × (1 − jitter), hold], so messages that failed together
  // (a dependency down) do not all come back in the same instant.
  return sql`least(${maxDelay}, ${delay} * exp(least((${n}) * ln(${backoff}), 600))) * (1 - ${jitter} * random())`;
}

export function createQueueStore(database: Db, relaxedDatabase: Db = database): QueueStore {
  const db: Kysely<QueueTables> = database.withTables<QueueTables>();
  const relaxedDb: Kysely<QueueTables> = relaxedDatabase.withTables<QueueTables>();
  const dbs: QueueDbs = { db, relaxedDb };
  return {
    ...createPutStore(dbs),
    ...createLeaseStore(dbs),
    ...createControlStore(dbs),
    ...createDeadLetterStore(dbs),
    ...createCountStore(dbs),
    ...createPolicyStore(dbs),
    ...createHousekeepingStore(dbs),
  };
}
