import { sql, type Kysely } from "kysely";

/**
 * The audit log of operator changes: who (the operator's id and name as they
 * were), when, what (a dotted action), on which app (its id and name as they
 * were: the row outlives the app), the request id, the outcome and a detail
 * object that never holds a secret value. No foreign keys, on purpose: a
 * record stays when its app or operator goes. Kept `AUDIT_RETENTION_DAYS`.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE TABLE audit_log (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      at timestamptz NOT NULL DEFAULT now(),
      operator_id text NOT NULL,
      operator_name text NOT NULL,
      action text NOT NULL,
      app_id uuid,
      app_name text NOT NULL DEFAULT '',
      request_id text NOT NULL DEFAULT '',
      outcome text NOT NULL CHECK (outcome IN ('ok', 'denied', 'failed')),
      detail jsonb NOT NULL DEFAULT '{}'
    )`.execute(db);
  await sql`CREATE INDEX audit_log_app ON audit_log (app_id, id)`.execute(db);
  await sql`CREATE INDEX audit_log_operator ON audit_log (operator_id, id)`.execute(db);
  await sql`CREATE INDEX audit_log_at ON audit_log (at)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE audit_log`.execute(db);
}
