import { sql } from "kysely";
import type { Db } from "./database.ts";
import { NotReadyError } from "../readiness.ts";

/**
 * One round trip to the database (for `/ready`) that also asks whether it
 * takes writes: rejects when it cannot be reached, and when the connection
 * reached a read-only server. A `SELECT 1` alone answers on a standby, so
 * during a failover (the proxy in front already sending connections to the
 * standby, not promoted yet) `/ready` said ready while every write failed.
 */
export async function pingDatabase(db: Db, signal: AbortSignal): Promise<void> {
  signal.throwIfAborted();
  const { rows } = await sql<{ writable: boolean }>`
    SELECT NOT pg_is_in_recovery() AND current_setting('transaction_read_only') = 'off' AS writable`.execute(db);
  if (rows[0]?.writable !== true) throw new NotReadyError("read-only");
}
