/** The SQL fragments and helpers several parts of the queue store share. */
import { sql, type Kysely, type RawBuilder } from "kysely";

/** The NOTIFY channel on which puts announce `instance|app|queue|visibleAtMs`. */
export const QUEUE_CHANNEL = "pb_queue_put";

/**
 * A message is leased while `lease_until` is ahead (and it is not visible: a
 * lease is always followed by its retry hold, `visible_at` >= `lease_until`).
 * A waiting message is one not leased: never delivered, nacked, or its lease
 * has lapsed (perhaps still held back by a retry delay, as a delayed put is).
 */
export const LEASED = sql`(lease_until > now() AND visible_at > now())`;

/** A message not leased and not expired (see `LEASED`). */
export const WAITING = sql`NOT coalesce(${LEASED}, false) AND expires_at > now()`;

/**
 * Why a visible message's last delivery failed, as a claim (or a burial) finds it: a row that still
 * has a `lease_until` had its lease lapse (a nack or a given-back lease clears it); otherwise what the
 * nack said, if anything.
 */
export const LAST_FAILURE = sql`CASE WHEN m.lease_until IS NOT NULL THEN 'lease expired' ELSE m.failure_reason END`;

/**
 * How many messages wait on one queue, in time independent of how many, as a
 * put sees it before it inserts, when all it asks is whether at most `room`
 * wait: `queue_depth_within` (migration 0038) takes the queue's lock, so a put
 * waits for every put before it on the queue to commit, on any instance, then
 * reads the queue's rows (`queue_counts`, 0012) with a snapshot of its own. A
 * count within `room` is an upper bound of the depth and answers as it is;
 * past it, the leased and expired messages are counted and left out
 * (`queue_depth`, 0020 and 0024), so a refusal says the exact depth.
 */
export const depthWithin = (appId: string, queue: string, room: number) =>
  sql<number>`queue_depth_within(${appId}::uuid, ${queue}::text, ${room}::int)`;

/** An empty fragment: what an optional part of a statement is when it is left out. */
export const NOTHING = sql``;

/**
 * The `trace_parent` column of a traced put's INSERT, and its value; for an untraced one (every put when
 * tracing is off), nothing: the statement is the one it always was, and no fragment is made for it.
 */
export const TRACE_COLUMN = sql`, trace_parent`;

/** `TRACE_COLUMN` for a put with a `traceparent`, else nothing. */
export const traceColumn = (traceParent: string | undefined) => (traceParent === undefined ? NOTHING : TRACE_COLUMN);

/** The value for `TRACE_COLUMN`, or nothing. */
export const traceValue = (traceParent: string | undefined) =>
  traceParent === undefined ? NOTHING : sql`, ${traceParent}`;

/**
 * The group columns of a grouped put's INSERT (migration 0035), and their values: the key, and the group's
 * next place, `nextval` of `queue_group_seq`. Every put statement draws it after `queue_depth` took the
 * queue's lock, so on one queue a lower place is always committed before a higher one is drawn: a claim
 * that sees a message of a group also sees every message stored before it in that group. An ungrouped put
 * (every put of an app that never uses groups) adds nothing: its statement is the one it always was.
 */
export const GROUP_COLUMNS = sql`, group_key, group_seq`;

/** `GROUP_COLUMNS` for a grouped put, else nothing. */
export const groupColumns = (groupKey: string | undefined) => (groupKey === undefined ? NOTHING : GROUP_COLUMNS);

/** The values for `GROUP_COLUMNS`: the key and the group's next place, or nothing. */
export const groupValues = (groupKey: string | undefined) =>
  groupKey === undefined ? NOTHING : sql`, ${groupKey}::text, nextval('queue_group_seq')`;

/**
 * The place in its group of a message that comes back in line without a put (a replayed dead letter, one
 * moved to a dead-letter queue), its row's `app_id`, `queue` and `group_key` as named: drawn after the
 * queue's lock, as a put's, so that places stay in the order their messages commit (a replay beside a put of
 * the same group could otherwise commit a lower place after the higher one was taken). No lock without a group.
 */
export const lineGroupSeq = (queue: RawBuilder<unknown>) =>
  sql`CASE WHEN group_key IS NULL THEN NULL ELSE (
    SELECT nextval('queue_group_seq')
    FROM (SELECT pg_advisory_xact_lock(hashtextextended('queue:' || app_id || ':' || ${queue}, 0))) l) END`;

/** A batch's group values from its column `grp`: a place drawn only for the grouped, in the batch's order. */
export const BATCH_GROUP_VALUES = sql`, grp, CASE WHEN grp IS NULL THEN NULL ELSE nextval('queue_group_seq') END`;

/**
 * Whether the message `m` (an alias of `queue_messages` in the statement) heads its group, or has none: no
 * message of its group with a lower place is stored, unless that one expired and no lease holds it (the
 * expiry sweep deletes it). Asked through the partial index `queue_messages_group_line`, and only for rows
 * with a group: a message without one is claimable as ever, at the cost of one null test. `skip` leaves out
 * rows that the statement itself deletes (a claim's burials), which its snapshot still sees.
 */
export function groupHead(m: string, skip: RawBuilder<unknown> = NOTHING) {
  const t = sql.raw(m);
  return sql`(${t}.group_key IS NULL OR NOT EXISTS (
    SELECT 1 FROM queue_messages g
    WHERE g.app_id = ${t}.app_id AND g.queue = ${t}.queue AND g.group_key = ${t}.group_key AND g.group_seq < ${t}.group_seq
      AND (g.expires_at > now() OR g.lease_until > now())${skip}))`;
}

/** `groupHead` of the alias `q`: the condition the claim, the wake-up safety net and the listing use. */
export const HEAD_OF_GROUP = groupHead("q");

/**
 * Of the rows a statement deletes (`rows`: an ack's or a burial's, with `app_id`, `queue`, `group_key` and
 * `group_seq`), the groups that hold more messages, whose next is claimable now: one NOTIFY per queue with
 * their count, from no instance (an empty first field), so that every instance, this one too, wakes as
 * many of its waiting consumers. The statement's snapshot still sees the deleted rows, hence the `>`.
 */
export function groupsReleased(rows: RawBuilder<unknown>) {
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
export const BATCH_ORDER = sql`(ord - 1) * interval '1 microsecond'`;

/**
 * The largest `deliveries` and `claims` (int4 columns). Both grow by one per
 * lease with no end when `maxDeliveries` is 0, a message can live a year and
 * a replay keeps `claims`: past it, `+ 1` would raise an error in the claim
 * statement and, with the message at the head of the line, stop its whole
 * queue. `deliveries` stays at it; `claims` starts again from 1 (a receipt's
 * count need only differ from the last ones').
 */
export const INT4_MAX = 2_147_483_647;

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
export function retryHoldSeconds(
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

/**
 * A sweep's delete: at most `limit` of the rows `rows` chooses (`FROM …`: a table, its condition, its
 * order), found by their `keys` (the key columns: the id, or a tuple), skipping the rows another
 * transaction holds, so a sweep never waits on a consumer. Answers how many rows it deleted.
 */
export async function boundedDelete<DB>(
  db: Kysely<DB>,
  { table, keys, rows, limit }: { table: string; keys: readonly string[]; rows: RawBuilder<unknown>; limit: number },
): Promise<number> {
  const columns = sql.raw(keys.join(", "));
  const result = await sql`
    DELETE FROM ${sql.table(table)} WHERE ${keys.length === 1 ? columns : sql`(${columns})`} IN (
      SELECT ${columns} FROM ${rows}
      LIMIT ${limit}
      FOR UPDATE SKIP LOCKED
    )`.execute(db);
  return Number(result.numAffectedRows ?? 0n);
}
