import { sql, type Kysely } from "kysely";

/**
 * Idempotency keys (the `Idempotency-Key` header): one row per app and key,
 * inserted as `running` before the work (so concurrent repeats race on the
 * primary key and exactly one runs it) and made `done` with the answer (the
 * RPC's response message, protobuf binary) after it.
 * - `operation` (the RPC) and `fingerprint` (SHA-256 of the request message)
 *   tell a repeat from another request under the same key;
 * - `attempt` names the run that owns a `running` row, so only it finishes
 *   or releases it; `locked_until` lets a retry take over the row of a run
 *   whose process died;
 * - `expires_at` (24 h after the first request) serves the expiry sweep.
 * No foreign key to `apps`: rows of a deleted app expire with the others.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE TABLE idempotency_keys (
      app_id uuid NOT NULL,
      key text NOT NULL,
      operation text NOT NULL,
      fingerprint text NOT NULL,
      state text NOT NULL CHECK (state IN ('running', 'done')),
      attempt uuid NOT NULL,
      status integer,
      response bytea,
      created_at timestamptz NOT NULL DEFAULT now(),
      locked_until timestamptz NOT NULL,
      expires_at timestamptz NOT NULL,
      PRIMARY KEY (app_id, key)
    )`.execute(db);
  await sql`CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE idempotency_keys`.execute(db);
}
