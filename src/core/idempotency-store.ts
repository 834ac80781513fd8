/**
 * The SQL of idempotency keys (see migration 0018 and `http/idempotency.ts`),
 * always scoped by the app.
 */
import { sql, type Kysely, type UpdateObject } from "kysely";
import type { Db, Timestamp } from "./database/index.ts";

interface IdempotencyKeyTable {
  app_id: string;
  /** The SHA-256 (hex) of the client's key. */
  key: string;
  operation: string;
  fingerprint: string;
  state: "running" | "done";
  attempt: string;
  status: number | null;
  /** The answer, sealed by the caller. */
  response: Uint8Array | null;
  created_at: Timestamp;
  locked_until: Timestamp;
  expires_at: Timestamp;
}

type IdempotencyTables = { idempotency_keys: IdempotencyKeyTable };

/** What an earlier request under the key left. */
interface StoredKey {
  operation: string;
  fingerprint: string;
  state: "running" | "done";
  status: number | null;
  response: Uint8Array | null;
}

interface BeginInput {
  appId: string;
  /** As stored: the SHA-256 of the client's key. */
  key: string;
  operation: string;
  /** Stored with the row; compared with a repeat's to tell it from another request under the key. */
  fingerprint: string;
  /** Names this run: only it may finish or release the row. */
  attempt: string;
  /** How long the key is remembered (from now). */
  ttlSeconds: number;
  /** How long a running row is held for this run before a retry may take it over. */
  lockSeconds: number;
}

type BeginResult = { started: true } | { started: false; existing: StoredKey | undefined };

export interface IdempotencyStore {
  /**
   * Claims the key for this run, in one statement: inserts a `running` row,
   * or takes over one that expired or (for the same request) whose run's
   * lock lapsed. Otherwise answers what is there (undefined when the row
   * went away meanwhile: try again).
   */
  begin(input: BeginInput): Promise<BeginResult>;
  /**
   * Stores the answer of the run; false when the run no longer owns the row.
   * `on` (the transaction doing the run's work) makes the answer commit or
   * roll back with that work.
   */
  finish(appId: string, key: string, attempt: string, status: number, response: Uint8Array, on?: Db): Promise<boolean>;
  /**
   * Keeps a live run's hold on its key for `lockSeconds` more; false when the
   * run no longer owns the row (it finished, or a repeat took the key over).
   */
  hold(appId: string, key: string, attempt: string, lockSeconds: number): Promise<boolean>;
  /** Forgets the key after a failed run, so a retry runs again. */
  release(appId: string, key: string, attempt: string): Promise<void>;
  /** Deletes up to `batch` expired keys (of any app); how many. */
  expire(batch: number): Promise<number>;
}

/** Changes the row of a run that still owns it (same attempt, still running); whether it did. */
async function updateRun(
  on: Kysely<IdempotencyTables>,
  run: { appId: string; key: string; attempt: string },
  changes: UpdateObject<IdempotencyTables, "idempotency_keys">,
): Promise<boolean> {
  const result = await on
    .updateTable("idempotency_keys")
    .set(changes)
    .where("app_id", "=", run.appId)
    .where("key", "=", run.key)
    .where("attempt", "=", run.attempt)
    .where("state", "=", "running")
    .executeTakeFirst();
  return Number(result.numUpdatedRows) > 0;
}

export function createIdempotencyStore(database: Db): IdempotencyStore {
  const db: Kysely<IdempotencyTables> = database.withTables<IdempotencyTables>();
  return {
    async begin(input) {
      const { rows } = await sql<{ started: boolean }>`
        INSERT INTO idempotency_keys AS k
          (app_id, key, operation, fingerprint, state, attempt, locked_until, expires_at)
        VALUES (${input.appId}, ${input.key}, ${input.operation}, ${input.fingerprint}, 'running', ${input.attempt},
                now() + make_interval(secs => ${input.lockSeconds}), now() + make_interval(secs => ${input.ttlSeconds}))
        ON CONFLICT (app_id, key) DO UPDATE SET
          operation = excluded.operation, fingerprint = excluded.fingerprint, state = 'running',
          attempt = excluded.attempt, status = NULL, response = NULL, created_at = now(),
          locked_until = excluded.locked_until, expires_at = excluded.expires_at
        WHERE k.expires_at <= now()
           OR (k.state = 'running' AND k.locked_until <= now()
               AND k.operation = excluded.operation
               AND k.fingerprint = excluded.fingerprint)
        RETURNING true AS started`.execute(db);
      if (rows.length > 0) return { started: true };
      const existing = await db
        .selectFrom("idempotency_keys")
        .select(["operation", "fingerprint", "state", "status", "response"])
        .where("app_id", "=", input.appId)
        .where("key", "=", input.key)
        .where(sql<boolean>`expires_at > now()`)
        .executeTakeFirst();
      return { started: false, existing };
    },

    finish(appId, key, attempt, status, response, on) {
      return updateRun(
        on ? on.withTables<IdempotencyTables>() : db,
        { appId, key, attempt },
        { state: "done", status, response },
      );
    },

    hold(appId, key, attempt, lockSeconds) {
      return updateRun(
        db,
        { appId, key, attempt },
        { locked_until: sql<Date>`now() + make_interval(secs => ${lockSeconds})` },
      );
    },

    async release(appId, key, attempt) {
      await db
        .deleteFrom("idempotency_keys")
        .where("app_id", "=", appId)
        .where("key", "=", key)
        .where("attempt", "=", attempt)
        .where("state", "=", "running")
        .execute();
    },

    async expire(batch) {
      const result = await sql`
        DELETE FROM idempotency_keys WHERE (app_id, key) IN (
          SELECT app_id, key FROM idempotency_keys WHERE expires_at <= now()
          LIMIT ${batch}
          FOR UPDATE SKIP LOCKED
        )`.execute(db);
      return Number(result.numAffectedRows ?? 0n);
    },
  };
}
