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
 * Times come from the database's clock (`now()`), never from an instance's, so
 * leases mean the same on every instance.
 */
import { sql, type Db } from "../database.ts";

/** The NOTIFY channel on which puts announce `instance|app|queue|visibleAtMs`. */
export const QUEUE_CHANNEL = "pb_queue_put";

/** A waiting message is one not leased: never delivered, or its lease has lapsed. */
const WAITING = sql`(deliveries = 0 OR visible_at <= now()) AND expires_at > now()`;

export interface StoredMessage {
  id: string;
  queue: string;
  payload: string;
  enqueuedAt: Date;
  expiresAt: Date;
  leaseExpiresAt: Date;
  deliveries: number;
}

export interface QueueStats {
  name: string;
  depth: number;
  inFlight: number;
  oldestAt: Date | null;
}

export interface PutInput {
  appId: string;
  queue: string;
  payload: string;
  delaySeconds: number;
  ttlSeconds: number;
  /** Insert only while fewer than this many messages wait. */
  depthBelow: number;
  /** `instance|app|queue|visibleAtMs`, or undefined to send no notification. */
  notify: string | undefined;
}

export type PutResult = { inserted: true; id: string; expiresAt: Date } | { inserted: false; depth: number };

type Row = Record<string, unknown>;

const toDate = (v: unknown): Date => (v instanceof Date ? v : new Date(v as string));

export interface QueueStore {
  put(input: PutInput, db?: Db): Promise<PutResult>;
  /** Inserts without a depth check and drops the oldest waiting messages beyond `keep`; returns how many were dropped. */
  putDroppingOldest(input: Omit<PutInput, "depthBelow"> & { keep: number }): Promise<{ id: string; expiresAt: Date; dropped: number }>;
  /** Leases the first visible message; when there is none, says when the next one becomes visible (null: none waits). */
  claim(appId: string, queue: string, leaseSeconds: number): Promise<{ message: StoredMessage } | { message?: undefined; nextVisibleAt: Date | null }>;
  ack(appId: string, id: string, deliveries: number): Promise<boolean>;
  list(appId: string): Promise<QueueStats[]>;
  /** For the wake-up safety net: of the given queues, the earliest time each has a message visible (past or future). */
  nextVisible(keys: { appId: string; queue: string }[]): Promise<{ appId: string; queue: string; at: Date }[]>;
  /** Deletes up to `limit` expired waiting messages; returns how many. */
  expire(limit: number): Promise<number>;
  /** Deletes up to `limit` messages of apps that no longer exist; returns how many. */
  deleteOrphans(limit: number): Promise<number>;
}

export function createQueueStore(db: Db): QueueStore {
  const store: QueueStore = {
    async put(input, on = db) {
      const { rows } = await sql<Row>`
        WITH depth AS (
          SELECT count(*)::int AS n FROM (
            SELECT 1 FROM queue_messages
            WHERE app_id = ${input.appId} AND queue = ${input.queue} AND ${WAITING}
            LIMIT ${input.depthBelow}
          ) w
        ), ins AS (
          INSERT INTO queue_messages (app_id, queue, payload, visible_at, expires_at)
          SELECT ${input.appId}, ${input.queue}, ${input.payload},
                 now() + make_interval(secs => ${input.delaySeconds}),
                 now() + make_interval(secs => ${input.ttlSeconds})
          FROM depth WHERE depth.n < ${input.depthBelow}
          RETURNING id, expires_at
        )
        SELECT depth.n, ins.id, ins.expires_at,
               CASE WHEN ins.id IS NOT NULL AND ${input.notify ?? null}::text IS NOT NULL
                    THEN pg_notify(${QUEUE_CHANNEL}, ${input.notify ?? null}::text) END AS notified
        FROM depth LEFT JOIN ins ON true`.execute(on);
      const row = rows[0]!;
      if (row.id) return { inserted: true, id: row.id as string, expiresAt: toDate(row.expires_at) };
      return { inserted: false, depth: Number(row.n) };
    },

    async putDroppingOldest(input) {
      // The new row is not visible to the DELETE's snapshot, so keeping
      // `keep - 1` of the others leaves `keep` waiting with the new one.
      const { rows } = await sql<Row>`
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
            ORDER BY enqueued_at DESC, id DESC
            OFFSET ${Math.max(input.keep - 1, 0)}
            FOR UPDATE SKIP LOCKED
          )
          RETURNING 1
        )
        SELECT ins.id, ins.expires_at, (SELECT count(*)::int FROM dropped) AS dropped,
               CASE WHEN ${input.notify ?? null}::text IS NOT NULL
                    THEN pg_notify(${QUEUE_CHANNEL}, ${input.notify ?? null}::text) END AS notified
        FROM ins`.execute(db);
      const row = rows[0]!;
      return { id: row.id as string, expiresAt: toDate(row.expires_at), dropped: Number(row.dropped) };
    },

    async claim(appId, queue, leaseSeconds) {
      // MATERIALIZED: the locking subquery runs exactly once, so the LIMIT
      // holds (an inlined or semi-joined subquery may be re-run by the planner).
      // When nothing is claimed, the same round trip tells when the line's
      // next message becomes visible (a lease lapses, a delay ends), so a
      // waiting consume can set a timer instead of polling.
      const { rows } = await sql<Row>`
        WITH next AS MATERIALIZED (
          SELECT id FROM queue_messages
          WHERE app_id = ${appId} AND queue = ${queue} AND visible_at <= now() AND expires_at > now()
          ORDER BY visible_at
          LIMIT 1
          FOR UPDATE SKIP LOCKED
        ), claimed AS (
          UPDATE queue_messages m
          SET visible_at = now() + make_interval(secs => ${leaseSeconds}), deliveries = m.deliveries + 1
          FROM next WHERE m.id = next.id
          RETURNING m.id, m.payload, m.enqueued_at, m.expires_at, m.visible_at, m.deliveries
        )
        SELECT claimed.*,
               CASE WHEN claimed.id IS NULL THEN (
                 SELECT min(visible_at) FROM queue_messages
                 WHERE app_id = ${appId} AND queue = ${queue} AND expires_at > now()
               ) END AS next_visible_at
        FROM (SELECT 1) one LEFT JOIN claimed ON true`.execute(db);
      const row = rows[0]!;
      if (!row.id) return { nextVisibleAt: row.next_visible_at == null ? null : toDate(row.next_visible_at) };
      return {
        message: {
          id: row.id as string,
          queue,
          payload: row.payload as string,
          enqueuedAt: toDate(row.enqueued_at),
          expiresAt: toDate(row.expires_at),
          leaseExpiresAt: toDate(row.visible_at),
          deliveries: Number(row.deliveries),
        },
      };
    },

    async ack(appId, id, deliveries) {
      const result = await sql`
        DELETE FROM queue_messages
        WHERE id = ${id} AND app_id = ${appId} AND deliveries = ${deliveries} AND visible_at > now()`.execute(db);
      return Number(result.numAffectedRows ?? 0n) > 0;
    },

    async list(appId) {
      const { rows } = await sql<Row>`
        SELECT queue,
               count(*) FILTER (WHERE ${WAITING})::int AS depth,
               count(*) FILTER (WHERE deliveries > 0 AND visible_at > now())::int AS in_flight,
               min(enqueued_at) FILTER (WHERE ${WAITING}) AS oldest_at
        FROM queue_messages
        WHERE app_id = ${appId}
        GROUP BY queue
        ORDER BY queue`.execute(db);
      return rows
        .map((r) => ({
          name: r.queue as string,
          depth: Number(r.depth),
          inFlight: Number(r.in_flight),
          oldestAt: r.oldest_at == null ? null : toDate(r.oldest_at),
        }))
        .filter((q) => q.depth > 0 || q.inFlight > 0);
    },

    async nextVisible(keys) {
      if (keys.length === 0) return [];
      const { rows } = await sql<Row>`
        SELECT k.app_id, k.queue, v.at
        FROM unnest(${keys.map((k) => k.appId)}::uuid[], ${keys.map((k) => k.queue)}::text[]) AS k (app_id, queue)
        CROSS JOIN LATERAL (
          SELECT visible_at AS at FROM queue_messages
          WHERE app_id = k.app_id AND queue = k.queue AND expires_at > now()
          ORDER BY visible_at LIMIT 1
        ) v`.execute(db);
      return rows.map((r) => ({ appId: r.app_id as string, queue: r.queue as string, at: toDate(r.at) }));
    },

    async expire(limit) {
      const result = await sql`
        DELETE FROM queue_messages WHERE id IN (
          SELECT id FROM queue_messages
          WHERE expires_at <= now() AND (deliveries = 0 OR visible_at <= now())
          ORDER BY expires_at
          LIMIT ${limit}
          FOR UPDATE SKIP LOCKED
        )`.execute(db);
      return Number(result.numAffectedRows ?? 0n);
    },

    async deleteOrphans(limit) {
      const result = await sql`
        DELETE FROM queue_messages WHERE id IN (
          SELECT q.id FROM queue_messages q
          WHERE NOT EXISTS (SELECT 1 FROM apps a WHERE a.id = q.app_id)
          LIMIT ${limit}
          FOR UPDATE SKIP LOCKED
        )`.execute(db);
      return Number(result.numAffectedRows ?? 0n);
    },
  };
  return store;
}
