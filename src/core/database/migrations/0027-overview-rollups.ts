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
  // Today's mail so far, so the overview is right from the first day.
  await sql`
    INSERT INTO mail_days (day, status, slot, n)
    SELECT (created_at AT TIME ZONE 'UTC')::date, status, 0, count(*) FROM mail_log
    WHERE created_at >= date_trunc('day', now(), 'UTC') GROUP BY 1, 2`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TRIGGER mail_days_insert ON mail_log`.execute(db);
  await sql`DROP FUNCTION mail_days_added()`.execute(db);
  await sql`DROP TABLE mail_days`.execute(db);
  await sql`DROP TABLE app_request_days`.execute(db);
  await sql`DROP TABLE request_counts`.execute(db);
}
