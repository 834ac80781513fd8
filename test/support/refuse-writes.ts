/**
 * Makes one table refuse every insert until the returned function runs: a
 * trigger raising an exception, so a write that must commit together with
 * another one (an event with the change it announces) fails inside their
 * shared transaction, and a test can check that neither is left behind.
 */
import { sql } from "kysely";
import type { Db } from "../../src/core/database/index.ts";

export async function refuseInserts(db: Db, table: string): Promise<() => Promise<void>> {
  await sql`
    CREATE FUNCTION test_refuse_insert() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN RAISE EXCEPTION 'insert refused by the test'; END $$`.execute(db);
  await sql`
    CREATE TRIGGER test_refuse_insert BEFORE INSERT ON ${sql.table(table)}
    FOR EACH ROW EXECUTE FUNCTION test_refuse_insert()`.execute(db);
  return async () => {
    await sql`DROP TRIGGER test_refuse_insert ON ${sql.table(table)}`.execute(db);
    await sql`DROP FUNCTION test_refuse_insert()`.execute(db);
  };
}
