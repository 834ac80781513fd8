/**
 * The platform-event feed's SQL (see migration 0014): appends, reads after a
 * cursor, the cursor of "now", and the expiry sweep. Always scoped by the app.
 */
import { sql, type Kysely } from "kysely";
import type { Db, Timestamp } from "../core/database/index.ts";
import { boundedDelete } from "./store/sql-fragments.ts";

/** The NOTIFY channel on which an append announces `instance|appId`, sent at its commit. */
export const EVENT_FEED_CHANNEL = "pb_event_feed";

interface EventFeedTable {
  id: string;
  app_id: string;
  kind: string;
  at: Timestamp;
  /** The event's data as JSON text. */
  data: string;
  expires_at: Timestamp;
}

type EventFeedTables = { queue_event_feed: EventFeedTable };

interface FeedRow {
  /** The id, as decimal text: the cursor. */
  id: string;
  kind: string;
  at: Date;
  data: string;
}

export interface EventFeedStore {
  /**
   * Appends one event on `trx`, the transaction that puts the same event on
   * `_events`: both commit or neither does. Its id. `notify` is sent on
   * `EVENT_FEED_CHANNEL` when `trx` commits.
   */
  append(
    trx: Db,
    input: {
      appId: string;
      kind: string;
      at: Date;
      data: string;
      ttlSeconds: number;
      notify: string;
    },
  ): Promise<string>;
  /** Up to `limit` of the app's events with an id above `after`, oldest first. */
  read(appId: string, after: bigint, limit: number): Promise<FeedRow[]>;
  /** The app's newest id ("0" when it has none): the cursor of "now". */
  head(appId: string): Promise<string>;
  /** Deletes up to `batch` expired events (of any app); how many. */
  expire(batch: number): Promise<number>;
  /** Deletes up to `batch` events of apps that no longer exist; how many. */
  deleteOrphans(batch: number): Promise<number>;
}

export function createEventFeedStore(database: Db): EventFeedStore {
  const db: Kysely<EventFeedTables> = database.withTables<EventFeedTables>();
  return {
    async append(trx, input) {
      // Held until commit: the app's ids commit in the order they were drawn
      // (see the migration), so no reader skips one that commits late. Taken
      // after the `_events` put in the same transaction, as every publisher
      // does, so two publishers cannot wait on each other.
      await sql`SELECT pg_advisory_xact_lock(hashtextextended(${`event-feed:${input.appId}`}, 0))`.execute(trx);
      const { rows } = await sql<{ id: string }>`
        INSERT INTO queue_event_feed (app_id, kind, at, data, expires_at)
        VALUES (${input.appId}, ${input.kind}, ${input.at}, ${input.data},
                now() + make_interval(secs => ${input.ttlSeconds}))
        RETURNING id::text AS id`.execute(trx);
      await sql`SELECT pg_notify(${EVENT_FEED_CHANNEL}, ${input.notify}::text)`.execute(trx);
      return rows[0].id;
    },

    async read(appId, after, limit) {
      const { rows } = await sql<{ id: string; kind: string; at: Date | string; data: string }>`
        SELECT f.id::text AS id, f.kind, f.at, f.data FROM queue_event_feed f
        WHERE f.app_id = ${appId} AND f.id > ${after.toString()}::bigint AND f.expires_at > now()
        ORDER BY f.id -- the bigint: the output column of that name is text, which sorts "10" before "9"
        LIMIT ${limit}`.execute(db);
      return rows.map((r) => ({ id: r.id, kind: r.kind, at: new Date(r.at), data: r.data }));
    },

    async head(appId) {
      const { rows } = await sql<{ id: string }>`
        SELECT coalesce(max(id), 0)::text AS id FROM queue_event_feed WHERE app_id = ${appId}`.execute(db);
      return rows[0]?.id ?? "0";
    },

    expire: (batch) =>
      boundedDelete(db, {
        table: "queue_event_feed",
        keys: ["id"],
        rows: sql`queue_event_feed WHERE expires_at <= now()`,
        limit: batch,
      }),

    // The feed has no foreign key to its app, so its rows do not go with it: a deleted app's events
    // (operators' data, secret names) would otherwise stay until their own expiry, up to a year.
    deleteOrphans: (batch) =>
      boundedDelete(db, {
        table: "queue_event_feed",
        keys: ["id"],
        rows: sql`queue_event_feed f WHERE NOT EXISTS (SELECT 1 FROM apps a WHERE a.id = f.app_id)`,
        limit: batch,
      }),
  };
}
