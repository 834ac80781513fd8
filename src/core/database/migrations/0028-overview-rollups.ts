/**
 * What the operator's overview reads (AdminService `GetOverview`), kept as
 * the work happens so that reading it costs the same with 10 apps or 10,000
 * and whatever the traffic (docs/operators.md "The overview"):
 * - `request_counts`: app requests per facility and 5-minute bucket, with
 *   those answered 4xx and 5xx. Each instance counts in memory and adds its
 *   counts every few seconds (one upsert per flush), so a request costs no
 *   statement; a day is 288 buckets of each facility.
 * - `app_request_days`: the same counts per app and UTC day (the top apps).
 * - `mail_days`: mail logged per UTC day and status, kept by a
 *   statement-level trigger on `mail_log` (one upsert per statement, in its
 *   transaction, in slots like `queue_counts`), so the day's sent and failed
 *   mail is never a count over the log.
 * - `dead_letter_counts`: dead letters per app and queue, kept the same way by
 *   triggers on `queue_dead_letters` (insert and delete), so the queues with
 *   dead letters and their number are a read of one row per queue, never a
 *   count over the letters.
 * Rows older than two days (mail: the retention sweep's) are pruned by
 * housekeeping.
 */
import { sql, type Kysely } from "kysely";

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE TABLE request_counts (
      bucket timestamptz NOT NULL,
      facility text NOT NULL,
      requests bigint NOT NULL DEFAULT 0,
      client_errors bigint NOT NULL DEFAULT 0,
      server_errors bigint NOT NULL DEFAULT 0,
      PRIMARY KEY (bucket, facility)
    )`.execute(db);
  await sql`
    CREATE TABLE app_request_days (
      day date NOT NULL,
      app_id uuid NOT NULL,
      requests bigint NOT NULL DEFAULT 0,
      client_errors bigint NOT NULL DEFAULT 0,
      server_errors bigint NOT NULL DEFAULT 0,
      PRIMARY KEY (day, app_id)
    )`.execute(db);
  await sql`
    CREATE TABLE mail_days (
      day date NOT NULL,
      status text NOT NULL,
      slot smallint NOT NULL,
      n bigint NOT NULL,
      PRIMARY KEY (day, status, slot)
    )`.execute(db);
  await sql`
    CREATE FUNCTION mail_days_added() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO mail_days (day, status, slot, n)
      SELECT (created_at AT TIME ZONE 'UTC')::date, status, (pg_backend_pid() % 8)::smallint, count(*)
      FROM added_rows
      GROUP BY 1, 2 ORDER BY 1, 2
      ON CONFLICT (day, status, slot) DO UPDATE SET n = mail_days.n + excluded.n;
      RETURN NULL;
    END $$`.execute(db);
  await sql`
    CREATE TRIGGER mail_days_insert AFTER INSERT ON mail_log
    REFERENCING NEW TABLE AS added_rows FOR EACH STATEMENT EXECUTE FUNCTION mail_days_added()`.execute(db);
  await sql`CREATE INDEX app_request_days_top ON app_request_days (day, requests DESC)`.execute(db);
  await sql`LOCK TABLE queue_dead_letters IN SHARE ROW EXCLUSIVE MODE`.execute(db);
  await sql`
    CREATE TABLE dead_letter_counts (
      app_id uuid NOT NULL,
      queue text NOT NULL,
      slot smallint NOT NULL,
      n bigint NOT NULL,
      PRIMARY KEY (app_id, queue, slot)
    )`.execute(db);
  for (const [name, table, sign] of [
    ["dead_letter_counts_added", "added_rows", ""],
    ["dead_letter_counts_removed", "removed_rows", "-"],
  ] as const)
    await sql`
      CREATE FUNCTION ${sql.raw(name)}() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        INSERT INTO dead_letter_counts (app_id, queue, slot, n)
        SELECT app_id, queue, (pg_backend_pid() % 8)::smallint, ${sql.raw(sign)}count(*) FROM ${sql.raw(table)}
        GROUP BY app_id, queue ORDER BY app_id, queue
        ON CONFLICT (app_id, queue, slot) DO UPDATE SET n = dead_letter_counts.n + excluded.n;
        RETURN NULL;
      END $$`.execute(db);
  await sql`
    CREATE TRIGGER dead_letter_counts_insert AFTER INSERT ON queue_dead_letters
    REFERENCING NEW TABLE AS added_rows FOR EACH STATEMENT EXECUTE FUNCTION dead_letter_counts_added()`.execute(db);
  await sql`
    CREATE TRIGGER dead_letter_counts_delete AFTER DELETE ON queue_dead_letters
    REFERENCING OLD TABLE AS removed_rows FOR EACH STATEMENT EXECUTE FUNCTION dead_letter_counts_removed()`.execute(db);
  await sql`
    INSERT INTO dead_letter_counts (app_id, queue, slot, n)
    SELECT app_id, queue, 0, count(*) FROM queue_dead_letters GROUP BY app_id, queue`.execute(db);
  // Today's mail so far, so the overview is right from the first day.
  await sql`
    INSERT INTO mail_days (day, status, slot, n)
    SELECT (created_at AT TIME ZONE 'UTC')::date, status, 0, count(*) FROM mail_log
    WHERE created_at >= date_trunc('day', now(), 'UTC') GROUP BY 1, 2`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TRIGGER dead_letter_counts_delete ON queue_dead_letters`.execute(db);
  await sql`DROP TRIGGER dead_letter_counts_insert ON queue_dead_letters`.execute(db);
  await sql`DROP FUNCTION dead_letter_counts_removed()`.execute(db);
  await sql`DROP FUNCTION dead_letter_counts_added()`.execute(db);
  await sql`DROP TABLE dead_letter_counts`.execute(db);
  await sql`DROP TRIGGER mail_days_insert ON mail_log`.execute(db);
  await sql`DROP FUNCTION mail_days_added()`.execute(db);
  await sql`DROP TABLE mail_days`.execute(db);
  await sql`DROP TABLE app_request_days`.execute(db);
  await sql`DROP TABLE request_counts`.execute(db);
}
