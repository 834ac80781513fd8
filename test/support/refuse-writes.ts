/**
 * Makes one table refuse writes until the returned function runs: a trigger
 * raising an exception, so a write that must commit together with another
 * one (an event with the change it announces, an idempotent answer with its
 * work) fails inside their shared transaction, and a test can check that
 * neither is left behind.
 */
import { sql } from "kysely";
import type { Db } from "../../src/core/database/index.ts";

/**
 * Refuses `event` on `table`, or only the rows for which `when` (a trigger
 * condition on `NEW`, e.g. `NEW.state = 'done'`) holds.
 */
export async function refuseWrites(
  db: Db,
  table: string,
  event: "INSERT" | "UPDATE",
  when?: string,
): Promise<() => Promise<void>> {
  await sql`
    CREATE FUNCTION test_refuse_write() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN RAISE EXCEPTION 'write refused by the test'; END $$`.execute(db);
  await sql`
    CREATE TRIGGER test_refuse_write BEFORE ${sql.raw(event)} ON ${sql.table(table)}
    FOR EACH ROW ${sql.raw(when === undefined ? "" : `WHEN (${when})`)} EXECUTE FUNCTION test_refuse_write()`.execute(
    db,
  );
  return async () => {
    await sql`DROP TRIGGER test_refuse_write ON ${sql.table(table)}`.execute(db);
    await sql`DROP FUNCTION test_refuse_write()`.execute(db);
  };
}

/** Refuses every insert into `table`. */
export const refuseInserts = (db: Db, table: string) => refuseWrites(db, table, "INSERT");
