/**
 * One unit of work: a transaction handle that stores and facility
 * operations take explicitly. Whoever opens it (the admin service, through
 * its auditor) hands the same `Tx` to every operation of one change, and
 * what must go with the change (the app's revision, the audit entry) is
 * written on it too: all of it commits or rolls back together.
 *
 * A store built on `tx.db` runs every statement in that transaction; its
 * multi-statement operations use `transact`, which opens a transaction only
 * when they run on the pool. What must wait for the commit (waking this
 * process's consumers) is handed to `afterCommit`.
 */
import type { Kysely } from "kysely";
import type { Db } from "./database.ts";

declare const opened: unique symbol;

export interface Tx {
  /** The transaction: build stores on it. Only `unitOfWork` makes one, so no statement of a `Tx` runs on the pool. */
  readonly db: Db;
  /** Runs `fn` once the transaction committed; never when it rolled back. */
  afterCommit(fn: () => void): void;
  /** Only `unitOfWork` makes a `Tx` (a `Db` cannot pass for one). */
  readonly [opened]: true;
}

/** Runs `work` in one transaction on `db`, then (after the commit) what it handed to `afterCommit`, in order. */
export async function unitOfWork<T>(db: Db, work: (tx: Tx) => Promise<T>): Promise<T> {
  const committed: (() => void)[] = [];
  const result = await db
    .transaction()
    .execute((trx) =>
      work({ db: trx as unknown as Db, afterCommit: (fn: () => void) => void committed.push(fn) } as unknown as Tx),
    );
  for (const fn of committed) fn();
  return result;
}

/**
 * `fn` in a transaction: on `db` itself when it is one already (a store built
 * on a `Tx`'s `db`), else in a new one. A store's operation of several
 * statements runs through this, so it is atomic on the pool and part of the
 * caller's unit of work on a `Tx`.
 */
export function transact<DB, T>(db: Kysely<DB>, fn: (trx: Kysely<DB>) => Promise<T>): Promise<T> {
  return db.isTransaction ? fn(db) : db.transaction().execute(fn);
}
