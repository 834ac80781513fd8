/**
 * Queue schedules (docs/queues.md "Schedules"): per app and queue, a named cron expression whose ticks
 * each put one message. `next_run_at` is the next tick not yet put; the ticker of every instance claims
 * due rows through `queue_schedules_due` with `FOR UPDATE SKIP LOCKED` and, in the same transaction,
 * puts the message and moves `next_run_at` on (NULL once past `end_at`). The counters say what became
 * of the ticks: put, skipped at the queue's depth cap, or missed while nothing ran.
 */
import { sql, type Kysely } from "kysely";

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE TABLE queue_schedules (
      app_id uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
      queue text NOT NULL,
      name text NOT NULL,
      cron text NOT NULL,
      timezone text NOT NULL DEFAULT 'UTC',
      payload text NOT NULL,
      start_at timestamptz,
      end_at timestamptz,
      catch_up text NOT NULL DEFAULT 'none' CHECK (catch_up IN ('none', 'one')),
      next_run_at timestamptz,
      last_run_at timestamptz,
      fired bigint NOT NULL DEFAULT 0,
      skipped_full bigint NOT NULL DEFAULT 0,
      missed bigint NOT NULL DEFAULT 0,
      created_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (app_id, queue, name)
    )`.execute(db);
  await sql`CREATE INDEX queue_schedules_due ON queue_schedules (next_run_at) WHERE next_run_at IS NOT NULL`.execute(
    db,
  );
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE queue_schedules`.execute(db);
}
