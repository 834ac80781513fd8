/** The database concern of the core: open, migrate, listen, prepare. */
export { openDatabase, type Database, type Db, type Timestamp } from "./database.ts";
export { appliedMigrations, migrate, NewerDatabaseError } from "./migrate.ts";
export { pingDatabase } from "./ping.ts";
export { databaseTarget, waitForDatabase } from "./wait-for-database.ts";
export { type DatabaseHealth } from "./health.ts";
export { PREPARED, queryPrepared } from "./prepared.ts";
export { intArray, jsonTextArray, uuidArray } from "./sql-arrays.ts";
export { exactTimeText, isExactTimeText } from "./exact-time.ts";
export { transact, unitOfWork, type Tx } from "./unit-of-work.ts";
export { inTransaction, transactionAsDb, type InTransaction, type InTransactionWith } from "./in-transaction.ts";
