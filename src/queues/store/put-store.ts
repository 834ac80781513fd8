/**
 * Puts: one message (serialised per queue, or on a transaction the caller holds), a batch of concurrent
 * puts in one statement, all-or-none with dedup keys, and the event feed's put that drops the oldest. Each
 * counts the queue under its lock (`queue_depth`) and inserts only below the depth limit, and notifies
 * waiting consumers in the same statement.
 */
import crypto from "node:crypto";
import { sql, type Kysely } from "kysely";
import {
  PREPARED,
  intArray,
  jsonTextArray,
  transact,
  transactionAsDb,
  uuidArray,
  type InTransactionWith,
} from "../../core/database/index.ts";
import type { QueueDbs, QueueTables } from "./queue-tables.ts";
import {
  BATCH_GROUP_VALUES,
  BATCH_ORDER,
  GROUP_COLUMNS,
  NOTHING,
  QUEUE_CHANNEL,
  TRACE_COLUMN,
  WAITING,
  depthWithin,
  groupColumns,
  groupValues,
  traceColumn,
  traceValue,
} from "./sql-fragments.ts";
import { toDate, type Count, type When } from "./row-values.ts";
import type { PutAllMessage, PutDone, PutInput, PutItem, PutResult } from "./queue-types.ts";

/** A put: the new message, or (refused by the depth check) the waiting count. */
type PutRow = { n: Count } & ({ id: string; expires_at: When } | { id: null; expires_at: null });

/** `putAll`'s statement: the depth seen, how many rows it added (all or none), and its time in µs since 1970. */
type PutAllRow = { n: Count; added: Count; at_us: Count };

/** `putDroppingOldest`: the new message and how many old ones it pushed out. */
type DroppingPutRow = { id: string; expires_at: When; dropped: Count };

/** A dedup key still within its window: the message its first put made. */
type DedupRow = { dedup_key: string; message_id: string; message_expires_at: When };

/** Puts, each under the queue's depth limit. */
export interface PutStore {
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
  putMany(batch: { appId: string; queue: string; depthBelow: number; items: PutItem[] }): Promise<PutResult[]>;
  /**
   * Puts every item or none (`PutMessages`): serialised with the queue's other
   * puts by the same advisory lock, it inserts all of them in one
   * statement only if the waiting messages plus the batch stay within
   * `maxDepth`; otherwise nothing, and says how many wait. `answerIn` (an
   * idempotent answer) runs in the same transaction when the batch went in.
   */
  putAll(batch: {
    appId: string;
    queue: string;
    maxDepth: number;
    items: PutItem[];
    /** How long a dedup key keeps answering with its first message; 0 when absent. */
    dedupWindowSeconds?: number;
    answerIn?: InTransactionWith<PutAllMessage[]>;
  }): Promise<{ inserted: true; messages: PutAllMessage[] } | { inserted: false; depth: number }>;
  /** Inserts without a depth check and drops the oldest waiting messages beyond `keep`; returns how many were dropped. */
  putDroppingOldest(
    input: Omit<PutInput, "depthBelow"> & { keep: number },
  ): Promise<{ id: string; expiresAt: Date; dropped: number }>;
}

/**
 * A new message id in the layout of UUID version 7 (RFC 9562): the first 48 bits are the time in
 * milliseconds, the rest as random as `randomUUID`'s (74 bits). A batch's ids, and those put about the same
 * time, are then neighbours in the primary key rather than spread over the whole index: each put, claim
 * and ack of a batch finds them in a few leaf pages, and a put adds them at the index's end (PostgreSQL
 * then skips the descent from the root). About 5% of PostgreSQL's CPU per message of a put, claim and ack
 * cycle of 1,000-message batches. `prefix` is `idPrefix()` of the batch's time.
 */
function timeOrderedId(prefix: string): string {
  // randomUUID's text: 8 hex, '-', 4 hex, '-', the version digit at 14, then the rest from 15.
  return `${prefix}7${crypto.randomUUID().slice(15)}`;
}

/** The time part of `timeOrderedId` for `ms`, with its dashes, ending where the version digit goes. */
function idPrefix(ms: number): string {
  const hex = ms.toString(16).padStart(12, "0");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-`;
}

/** Puts: plain, serialised per queue, batched, deduplicated, and dropping the oldest, each under the depth limit. */
export function createPutStore({ db }: QueueDbs): PutStore {
  /**
   * One put after the queue's lock: its times start at `statement_timestamp()`,
   * this statement's start, not at `now()`, the transaction's start, which is
   * before the wait for the lock (as in `putAll`).
   */
  async function put(input: PutInput, on: Kysely<QueueTables>): Promise<PutResult> {
    const { rows } = await sql<PutRow>`${PREPARED}
      WITH depth AS (
        SELECT ${depthWithin(input.appId, input.queue, input.depthBelow - 1)} AS n
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
    if (row.id !== null) return { inserted: true, id: row.id, expiresAt: toDate(row.expires_at) };
    return { inserted: false, depth: Number(row.n) };
  }

  return {
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
    putHere: (input) => put(input, db),
    async putMany({ appId, queue, depthBelow, items }) {
      // Ids are made here so each caller finds its own row in RETURNING
      // (an INSERT cannot return the source row's position).
      const prefix = idPrefix(Date.now());
      const ids = items.map(() => timeOrderedId(prefix));
      // Traced puts only (tracing on): the statement of an untraced batch is the same as ever.
      const traced = items.some((i) => i.traceParent !== undefined);
      // Grouped puts only: the statement of a batch without groups is the same as ever.
      const grouped = items.some((i) => i.groupKey !== undefined);
      // The times count from after the queue's lock (the clock's, read once the count is made), not from the
      // statement's start: a batch that waited for another instance's is not shortened by the wait.
      const { rows } = await sql<PutRow>`${PREPARED}
        WITH depth AS (
          SELECT d.n, clock_timestamp() AS t FROM (SELECT ${depthWithin(appId, queue, depthBelow - items.length)} AS n OFFSET 0) d
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
        if (row.id !== null) inserted.set(row.id, toDate(row.expires_at));
      }
      return ids.map((id): PutResult => {
        const expiresAt = inserted.get(id);
        return expiresAt ? { inserted: true, id, expiresAt } : { inserted: false, depth: depth + inserted.size };
      });
    },
    putAll({ appId, queue, maxDepth, items, dedupWindowSeconds = 0, answerIn }) {
      return transact(db, async (trx) => {
        await sql`SELECT pg_advisory_xact_lock(hashtextextended(${`queue:${appId}:${queue}`}, 0))`.execute(trx);
        // Dedup keys are read and written only by puts holding the lock, so
        // what is read here stays true until the commit.
        // A loop, not flatMap: that made an array per item of every batch, most without a key.
        const keySet = new Set<string>();
        for (const i of items) if (i.dedupKey !== undefined) keySet.add(i.dedupKey);
        const keys = [...keySet];
        const firsts = new Map<string, { id: string; expiresAt: Date; deduplicated: boolean }>();
        if (keys.length > 0) {
          const { rows } = await sql<DedupRow>`
            SELECT dedup_key, message_id, message_expires_at FROM queue_dedup
            WHERE app_id = ${appId} AND queue = ${queue} AND dedup_key = ANY (${keys}::text[]) AND until > statement_timestamp()`.execute(
            trx,
          );
          for (const r of rows)
            firsts.set(r.dedup_key, { id: r.message_id, expiresAt: toDate(r.message_expires_at), deduplicated: true });
        }
        // Which items add a message: those without a key, and the first of each key not seen in the window.
        const fresh: { item: PutItem; id: string }[] = [];
        const prefix = idPrefix(Date.now());
        const answers = items.map((item): string | { id: string } => {
          if (item.dedupKey !== undefined && firsts.has(item.dedupKey)) return item.dedupKey;
          const id = timeOrderedId(prefix);
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
          const { rows } = await sql<PutAllRow>`${PREPARED}
            WITH depth AS (
              SELECT ${depthWithin(appId, queue, maxDepth - fresh.length)} AS n
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
              RETURNING 1
            ), notified AS (
              SELECT pg_notify(${QUEUE_CHANNEL}, n.notify || '|' || n.count)
              FROM unnest(${[...notes.keys()]}::text[], ${[...notes.values()]}::int[]) AS n (notify, count)
              WHERE EXISTS (SELECT 1 FROM ins)
            )
            SELECT (SELECT n FROM depth) AS n, (SELECT count(*) FROM ins)::int AS added,
                   (extract(epoch FROM statement_timestamp()) * 1000000)::int8 AS at_us,
                   (SELECT count(*) FROM notified) AS notified`.execute(trx);
          const row = rows[0];
          if (!row || Number(row.added) === 0) return { inserted: false as const, depth: Number(row?.n ?? 0) };
          // Every row's expiry is the statement's time plus its ttl (whole seconds): made here from the one
          // time, not returned and parsed per row. The µs count is exact as a number; the ms of the Date are
          // truncated as the driver truncates a timestamp's text.
          const atUs = Number(row.at_us);
          for (const f of fresh)
            inserted.set(f.id, new Date(Math.floor((atUs + f.item.ttlSeconds * 1_000_000) / 1000)));
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
