import { sql, type Kysely } from "kysely";

/**
 * The platform-event feed: every platform event put on an app's `_events`
 * queue is also appended here, where every replica of the app reads it from
 * its own cursor (nothing is consumed).
 * - `id` is the cursor. Appends of one app are serialized by an advisory lock
 *   held until commit, so within an app ids become visible in increasing
 *   order and a reader that moved past an id never misses a smaller one;
 * - `(app_id, id)` serves the reads; `expires_at` serves the expiry sweep.
 * Like `queue_messages`, no foreign key to `apps`; rows of a deleted app
 * expire with the others.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE TABLE queue_event_feed (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      app_id uuid NOT NULL,
      kind text NOT NULL,
      at timestamptz NOT NULL,
      data text NOT NULL,
      expires_at timestamptz NOT NULL
    )`.execute(db);
  await sql`CREATE INDEX queue_event_feed_read ON queue_event_feed (app_id, id)`.execute(db);
  await sql`CREATE INDEX queue_event_feed_expiry ON queue_event_feed (expires_at)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE queue_event_feed`.execute(db);
}
