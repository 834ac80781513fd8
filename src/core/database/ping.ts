import { sql } from "kysely";
import type { Db } from "./database.ts";

/** One round trip to the database (for `/ready`); rejects when it cannot be reached. */
export async function pingDatabase(db: Db, signal: AbortSignal): Promise<void> {
  signal.throwIfAborted();
  await sql`SELECT 1`.execute(db);
}
