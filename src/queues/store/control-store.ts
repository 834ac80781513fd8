/**
 * The view and control of one queue's line, for the app and the operator: peek (read without leasing),
 * purge, and where one message is.
 */
import { sql } from "kysely";
import { isUuid } from "../../core/apps/apps.ts";
import { exactTimeText, isExactTimeText, transact } from "../../core/database/index.ts";
import type { QueueDbs } from "./queue-tables.ts";
import { LEASED, WAITING } from "./sql-fragments.ts";
import { toDate, toDateOrNull, type Count, type When } from "./row-values.ts";
import type { MessageState, PeekedMessage, PeekPage } from "./queue-types.ts";

/** Whether a `position` from outside (a page token) is one `peek` wrote (`visible_at|enqueued_at|id`): checked before it reaches a cast. */
export function isPeekPosition(position: string): boolean {
  const parts = position.split("|");
  return parts.length === 3 && isExactTimeText(parts[0]) && isExactTimeText(parts[1]) && isUuid(parts[2]);
}

/** A peeked message as read: its payload cut, its place in line as exact text. */
type PeekRow = {
  id: string;
  payload: string;
  size: Count;
  enqueued_at: When;
  expires_at: When;
  deliveries: Count;
  position: string;
};

/** One message in line or dead: the columns both tables share, the others null. */
type MessageStateRow = {
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
};

/** Peek, purge and a message's state. */
export interface ControlStore {
  /**
   * Waiting messages in claim order, read only (no lease, no delivery counted);
   * payloads cut after `maxChars` + 1; after `after` (a message's `position`) when given.
   */
  peek(page: PeekPage): Promise<PeekedMessage[]>;
  /** Deletes every message of one app's queue, waiting or leased (only the waiting ones when `includeLeased` is false); how many. */
  purge(appId: string, queue: string, includeLeased?: boolean): Promise<number>;
  /** Where one message of the queue is, in line or dead; undefined once acked, purged or expired. */
  messageState(appId: string, queue: string, id: string): Promise<MessageState | undefined>;
}

/** One queue's line as the app and the operator see and control it. */
export function createControlStore({ db }: QueueDbs): ControlStore {
  return {
    async peek({ appId, queue, limit, maxChars, after }) {
      // Keyset paging on the claim order, with the id as the tie-break: a page
      // starts right after the previous page's last message, whatever was
      // claimed or put meanwhile (no offset that shifts). The plain
      // `visible_at >=` lets the line index start the scan there.
      const [visibleAt = null, enqueuedAt = null, afterId = null] = after === undefined ? [] : after.split("|");
      const { rows } = await sql<PeekRow>`
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
      const { rows } = await sql<MessageStateRow>`
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
        visibleAt: status === "delayed" ? toDateOrNull(r.visible_at) : null,
        leaseExpiresAt: status === "leased" ? toDateOrNull(r.lease_until) : null,
        failureReason: r.failure_reason,
        diedAt: toDateOrNull(r.died_at),
        groupKey: r.group_key,
      };
    },
  };
}
