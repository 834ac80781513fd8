/**
 * Work a facility's own path runs at the end of its transaction (an
 * idempotent run's answer, a feed entry). An operator's change shares its
 * transaction through `unit-of-work.ts` instead.
 */
import type { Kysely } from "kysely";
import type { Db } from "./database.ts";

/** Work to run inside another module's transaction, on that transaction, as its last statements. */
export type InTransaction = (trx: Db) => Promise<void>;

/**
 * The same, told what the transaction made (a message's id, say), e.g. to
 * store an idempotent answer with the change it answers.
 */
export type InTransactionWith<Made> = (trx: Db, made: Made) => Promise<void>;

export function inTransaction<T>(db: Db, fn: (trx: Db) => Promise<T>): Promise<T> {
  return db.transaction().execute((trx) => fn(trx));
}

/** A store's typed transaction as the table-less `Db` other stores build on. */
export function transactionAsDb<T>(trx: Kysely<T>): Db {
  return trx as unknown as Db;
}
