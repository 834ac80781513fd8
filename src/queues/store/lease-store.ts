/**
 * A lease once a claim took it (`claim-store.ts`): extended, nacked, given back unsent (release), asked
 * about (still leased), or acked. Each matches the receipt's lease count (`claims`), so a receipt of an
 * earlier lease never touches a later one.
 */
import { sql } from "kysely";
import { PREPARED, intArray, uuidArray } from "../../core/database/index.ts";
import type { QueueDbs } from "./queue-tables.ts";
import { LEASED, QUEUE_CHANNEL, groupsReleased, retryHoldSeconds } from "./sql-fragments.ts";
import { toDate, type Count, type When } from "./row-values.ts";
import type { ClaimRule } from "./queue-types.ts";

/** How many leases were given back. */
type ReleasedRow = { n: number };

/** An extended lease's new end. */
type ExtendedRow = { lease_until: When };

/** A nacked message: its queue, and when it is visible again (epoch ms, 0: now). */
type NackedRow = { queue: string; visible_at_ms: number };

/** A lease that still holds (`claims` is int4). */
type LeaseRow = { app_id: string; id: string; claims: number };

/** An acked message's receipt. */
type AckedRow = { app_id: string; id: string; claims: Count };

/** What a lease's holder (or a stream) does with it. */
export interface LeaseStore {
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
  /**
   * Sets the lease of a receipt that still holds it to end `leaseSeconds`
   * from now, keeping its retry hold after it; the new end, or null when the
   * lease had lapsed or the message is gone.
   */
  extend(lease: { appId: string; id: string; claim: number; leaseSeconds: number }): Promise<Date | null>;
  /**
   * Ends the lease of a receipt that still holds it: the message waits again,
   * visible after `delaySeconds`, or (undefined) after the retry hold of its
   * queue's policy for its delivery count (`defaults` where the policy sets
   * none). The message's queue and when it is visible again (epoch ms; 0:
   * now) when the lease was current, else undefined. With `notifyPrefix` the
   * statement also notifies, like a put: the prefix with `queue|visibleAtMs`
   * appended (the receipt names the message, not its queue).
   */
  nack(lease: {
    appId: string;
    id: string;
    claim: number;
    delaySeconds: number | undefined;
    defaults: ClaimRule["retry"] & { maxDeliveries?: number };
    notifyPrefix?: string;
    /** Why the delivery failed: kept as the message's failure reason. */
    reason?: string;
  }): Promise<{ queue: string; visibleAtMs: number } | undefined>;
  /**
   * Of these messages (of any apps: the full windows of several streams), the leases that still hold, as keys
   * `appId|id|claim`: a message is found only under the app it was named with.
   */
  stillLeased(messages: { appId: string; id: string }[]): Promise<Set<string>>;
  /** Acks several receipts (of any apps) in one statement; true where that receipt's lease was current. */
  ackMany(receipts: { appId: string; id: string; claim: number }[]): Promise<boolean[]>;
}

export function createLeaseStore({ db, relaxedDb }: QueueDbs): LeaseStore {
  return {
    async release(appId, leases, notify) {
      if (leases.length === 0) return 0;
      const { rows } = await sql<ReleasedRow>`
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
    async extend({ appId, id, claim, leaseSeconds }) {
      const { rows } = await sql<ExtendedRow>`${PREPARED}
        UPDATE queue_messages
        SET visible_at = now() + make_interval(secs => ${leaseSeconds}) + (visible_at - lease_until),
            lease_until = now() + make_interval(secs => ${leaseSeconds})
        WHERE id = ${id} AND app_id = ${appId} AND claims = ${claim} AND ${LEASED}
        RETURNING lease_until`.execute(db);
      return rows[0] ? toDate(rows[0].lease_until) : null;
    },
    async nack({ appId, id, claim, delaySeconds, defaults, notifyPrefix, reason }) {
      // The delivery that ends here is the row's `deliveries`-th: its hold is
      // the one a lapse of it would have had (the claim's formula, one delivery on).
      const { rows } = await sql<NackedRow>`${PREPARED}
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
      const { rows } = await sql<LeaseRow>`${PREPARED}
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
