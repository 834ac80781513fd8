/**
 * One transaction shared by the stores of several modules: each store is
 * built on the transaction (`createXStore(trx)`), so a change and what must
 * go with it (the app's revision, the audit entry) commit or roll back
 * together. A store whose operation opens its own transaction takes an
 * `InTransaction` callback instead, which it runs inside that transaction.
 */
import type { Db, Transaction } from "./database.ts";

/**
 * Work to run inside another module's transaction, on that transaction. A
 * store runs it as the last statement of its transaction: an operator's audit
 * entry takes a lock that orders the log (see the admin facility's
 * `audit-store.ts`), and its holder must wait on nothing but the commit.
 */
export type InTransaction = (trx: Db) => Promise<void>;

/**
 * The same, told what the transaction made (a message's id, say), e.g. to
 * store an idempotent answer with the change it answers. TypeScript lets an
 * `InTransaction` stand for one; never pass a callback that has optional
 * parameters of its own (the auditor's) that way, as it would take `made`
 * for its own argument: join the two with `auditThen`.
 */
export type InTransactionWith<Made> = (trx: Db, made: Made) => Promise<void>;

/**
 * `then` (told what was made, mapped by `map`) then `audit` (an operator's
 * audit entry, told nothing, last as `InTransaction` says), as one
 * `InTransactionWith`; undefined when neither is given, so a caller with
 * neither keeps its fast path. Keeps the auditor's callback from ever being
 * handed `made`.
 */
export function auditThen<Made, Answer>(
  audit: InTransaction | undefined,
  then: InTransactionWith<Answer> | undefined,
  map: (made: Made) => Answer,
): InTransactionWith<Made> | undefined {
  if (!audit && !then) return undefined;
  return async (trx, made) => {
    await then?.(trx, map(made));
    await audit?.(trx);
  };
}

export function inTransaction<T>(db: Db, fn: (trx: Db) => Promise<T>): Promise<T> {
  return db.transaction().execute((trx) => fn(trx));
}

/** A store's typed transaction as the table-less `Db` other stores build on. */
export function transactionAsDb<T>(trx: Transaction<T>): Db {
  return trx as unknown as Db;
}
