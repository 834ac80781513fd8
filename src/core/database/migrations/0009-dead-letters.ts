import { sql, type Kysely } from "kysely";

/**
 * Dead letters: messages that reached their app's `maxDeliveries` and would
 * have been leased once more. They leave `queue_messages` (the hot table, whose
 * claim index then never walks past them) and wait here, per app and queue,
 * until the operator replays or purges them, or they expire.
 * - `seq` orders them by death and pages the listing (a keyset, so a page is
 *   stable while more die);
 * - `(app_id, queue, seq)` serves the listing, the counts and replay/purge of
 *   one queue; `expires_at` serves the expiry sweep.
 * Like `queue_messages`, no foreign key to `apps`: a dying message would take
 * a share lock on its app's row; dead letters of deleted apps are swept.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE TABLE queue_dead_letters (
      seq bigint GENERATED ALWAYS AS IDENTITY,
      id uuid NOT NULL PRIMARY KEY,
      app_id uuid NOT NULL,
      queue text NOT NULL,
      payload text NOT NULL,
      enqueued_at timestamptz NOT NULL,
      deliveries integer NOT NULL,
      died_at timestamptz NOT NULL DEFAULT now(),
      expires_at timestamptz NOT NULL
    )`.execute(db);
  await sql`CREATE INDEX queue_dead_letters_list ON queue_dead_letters (app_id, queue, seq)`.execute(db);
  await sql`CREATE INDEX queue_dead_letters_expiry ON queue_dead_letters (expires_at)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE queue_dead_letters`.execute(db);
}
