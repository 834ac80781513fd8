/**
 * Dead letters: listed in the order they died, replayed onto the queue (one statement moves them, so a
 * message is in line or dead, never both), and purged. Their expiry and orphans are housekeeping's.
 */
import { sql } from "kysely";
import { transact } from "../../core/database/index.ts";
import type { QueueDbs } from "./queue-tables.ts";
import { QUEUE_CHANNEL, lineGroupSeq } from "./sql-fragments.ts";
import { toDate, type Count, type When } from "./row-values.ts";
import type { DeadLetter, DeadLetterSelection } from "./queue-types.ts";

/** A dead letter as listed, its payload perhaps cut; `seq` (int8) as text. */
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

/** How many a statement moved. */
type CountRow = { n: Count };

/** The highest `seq` (int8) as text, null when none. */
type SeqRow = { seq: string | null };

/** Listing, replaying and purging dead letters. */
export interface DeadLetterStore {
  /**
   * Up to `limit` dead letters of one queue in the order they died, after `afterSeq` (a previous page's last);
   * payloads cut after `maxChars` + 1 when given, else whole.
   */
  listDeadLetters(page: {
    appId: string;
    queue: string;
    afterSeq: string | undefined;
    limit: number;
    maxChars: number | undefined;
  }): Promise<DeadLetter[]>;
  /**
   * Puts up to `limit` of the selected dead letters back in line (visible now,
   * deliveries 0, lifetime `ttlSeconds`) in one statement; with `all`, only
   * those with `seq` up to `upToSeq`. Returns how many; notifies waiting
   * consumers with one `notify|n`.
   */
  replayDeadLetters(replay: {
    appId: string;
    queue: string;
    which: DeadLetterSelection & { upToSeq?: string };
    limit: number;
    ttlSeconds: number;
    notify: string | undefined;
  }): Promise<number>;
  /** The highest `seq` among one queue's dead letters (undefined: none), so that replaying "all" has an end. */
  lastDeadLetterSeq(appId: string, queue: string): Promise<string | undefined>;
  /** Deletes the selected dead letters; how many. */
  purgeDeadLetters(appId: string, queue: string, which: DeadLetterSelection): Promise<number>;
}

export function createDeadLetterStore({ db }: QueueDbs): DeadLetterStore {
  return {
    async listDeadLetters({ appId, queue, afterSeq, limit, maxChars }) {
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
    async replayDeadLetters({ appId, queue, which, limit, ttlSeconds, notify }) {
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
