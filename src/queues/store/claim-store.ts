/**
 * The claim: one statement that leases the head of a line (priorities first, each ordered group's head
 * only), buries on the way the messages that had their last delivery, and says when the next message
 * becomes visible when it took fewer than asked.
 */
import { sql } from "kysely";
import { PREPARED } from "../../core/database/index.ts";
import type { QueueDbs } from "./queue-tables.ts";
import {
  HEAD_OF_GROUP,
  INT4_MAX,
  LAST_FAILURE,
  QUEUE_CHANNEL,
  groupHead,
  groupsReleased,
  lineGroupSeq,
  retryHoldSeconds,
} from "./sql-fragments.ts";
import { toDateOrNull, type When } from "./row-values.ts";
import { DROP_DEAD_LETTERS, type ClaimRule, type StoredMessage } from "./queue-types.ts";

/** Most messages one claim moves to the dead letters (more wait for the next claim). */
const BURY_BATCH = 256;

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
  next_visible_at: When | null;
  buried: number | null;
  trace_parent: string | null;
  group_key: string | null;
}

/** A queue of an app. */
type QueueKeyRow = { app_id: string; queue: string };

/** The rows of a claim statement: the leased messages in line order, and the next visibility when fewer were taken. */
function claimedRows(
  queue: string,
  rows: ClaimRow[],
): { messages: StoredMessage[]; nextVisibleAt: Date | null; buried?: number } {
  // Each message with its place in the line: its visibility before the claim and its priority.
  const leased: { message: StoredMessage; was: number; priority: number }[] = [];
  let nextVisibleAt: Date | null = null;
  let buried: number | undefined;
  for (const row of rows) {
    if (row.buried != null) buried = Number(row.buried);
    if (!row.id) {
      nextVisibleAt = toDateOrNull(row.next_visible_at);
      continue;
    }
    const was = Math.trunc(Number(row.was_visible_at));
    const message: StoredMessage = {
      id: row.id,
      queue,
      payload: row.payload!,
      enqueuedAt: new Date(Number(row.enqueued_at)),
      expiresAt: new Date(Number(row.expires_at)),
      leaseExpiresAt: new Date(Number(row.lease_until)),
      deliveries: Number(row.deliveries),
      claims: Number(row.claims),
      visibleBefore: new Date(was),
    };
    if (row.trace_parent !== null) message.traceParent = row.trace_parent;
    if (row.group_key !== null) message.groupKey = row.group_key;
    leased.push({ message, was, priority: Number(row.priority ?? 0) });
  }
  // RETURNING has no order: hand out the line's order (higher priority first, then oldest first).
  leased.sort((x, y) => y.priority - x.priority || x.was - y.was);
  return {
    messages: leased.map((l) => l.message),
    nextVisibleAt,
    buried,
  };
}

/** Claims, and where the dead-letter sweep looks. */
export interface ClaimStore {
  /**
   * Leases up to `n` visible messages in one statement, oldest first. When it
   * got fewer than `n`, also says when the next message not taken becomes
   * visible (null: none waits).
   */
  claimMany(claim: {
    appId: string;
    queue: string;
    leaseSeconds: number;
    /** How many to lease at most (0: only bury). */
    n: number;
    /** The queue's policy; none: the plain claim (no dead letters, no retry hold). */
    rule?: ClaimRule;
  }): Promise<{ messages: StoredMessage[]; nextVisibleAt: Date | null; buried?: number }>;
  /** The queues whose policy limits deliveries (`maxDeliveries` > 0): where the dead-letter sweep looks. */
  queuesWithDeliveryLimit(): Promise<{ appId: string; queue: string }[]>;
}

export function createClaimStore({ db }: QueueDbs): ClaimStore {
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
        RETURNING m.id, m.payload, m.enqueued_at, m.expires_at, m.lease_until, m.deliveries, m.claims, m.trace_parent, m.group_key
      )
      SELECT c.id, c.payload, (extract(epoch FROM c.enqueued_at) * 1000)::float8 AS enqueued_at,
             (extract(epoch FROM c.expires_at) * 1000)::float8 AS expires_at,
             (extract(epoch FROM c.lease_until) * 1000)::float8 AS lease_until, c.deliveries, c.claims,
             (extract(epoch FROM n.visible_at) * 1000)::float8 AS was_visible_at, n.priority::int AS priority,
             NULL::timestamptz AS next_visible_at, (SELECT n FROM buried) AS buried, c.trace_parent, c.group_key
      FROM claimed c JOIN next n ON n.id = c.id
      UNION ALL
      SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, (
        SELECT min(visible_at) FROM queue_messages q
        WHERE app_id = ${appId} AND queue = ${queue} AND expires_at > now()
          AND id NOT IN (SELECT id FROM next) AND id NOT IN (SELECT id FROM dead)
          AND ${groupHead("q", sql` AND g.id NOT IN (SELECT id FROM dead)`)}
      ), (SELECT n FROM buried), NULL, NULL
      WHERE (SELECT count(*) FROM claimed) < ${n} OR (SELECT n FROM buried) > 0`.execute(db);
    return claimedRows(queue, rows);
  }

  return {
    claimMany: ({ appId, queue, leaseSeconds, n, rule = PLAIN_CLAIM }) =>
      claimManyWith(appId, queue, leaseSeconds, n, rule),
    async queuesWithDeliveryLimit() {
      // A queue's policy sets the limit, or the app's `maxDeliveries` (limits the admin changed are in apps.limits).
      const { rows } = await sql<QueueKeyRow>`
        SELECT app_id, queue FROM queue_policies WHERE max_deliveries > 0
        UNION
        SELECT DISTINCT m.app_id, m.queue FROM queue_messages m
        WHERE m.app_id IN (SELECT id FROM apps WHERE (limits->>'maxDeliveries')::int > 0)`.execute(db);
      return rows.map((r) => ({ appId: r.app_id, queue: r.queue }));
    },
  };
}
