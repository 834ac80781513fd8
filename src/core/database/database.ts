/**
 * The platform database: Kysely over `pg` when DATABASE_URL is set, over
 * PGlite (in-process Postgres) in DATA_DIR/pg otherwise. Both speak the same
 * SQL, so every store is written once.
 *
 * `Db` knows no tables: each store declares the tables it uses next to its
 * statements and views the database through them (`db.withTables<T>()`), so
 * a table's type lives with the one module that queries it. The DDL lives in
 * `migrations/`.
 *
 * Terminology:
 * - **app**: a hosted app; every row of every facility table belongs to one.
 * - **service token**: an app's bearer token; stored only as its SHA-256.
 * - **day**: a UTC calendar day, the period of every daily cap.
 */
import fs from "node:fs/promises";
import path from "node:path";
import { Kysely, PostgresDialect, type ColumnType } from "kysely";
import pg from "pg";
import { PGlite } from "@electric-sql/pglite";
import { PGliteDialect } from "kysely-pglite-dialect";
import { createPgNotifications, type Unlisten } from "./notifications.ts";
import { PreparingClient } from "./prepared.ts";

export type { Unlisten } from "./notifications.ts";

/** A timestamp column: read as a Date, written as a Date or an ISO string. */
export type Timestamp = ColumnType<Date, Date | string | undefined, Date | string>;

/** The database with no table known; stores add theirs with `withTables`. */
export type Db = Kysely<Record<never, never>>;

/** A transaction of a store's view of the database. */
export type Transaction<T> = Parameters<Parameters<ReturnType<Kysely<T>["transaction"]>["execute"]>[0]>[0];

export interface Database {
  readonly db: Db;
  /**
   * The same database through connections that commit with
   * `synchronous_commit = off`: the commit returns before its WAL reaches
   * disk, so a database crash (not an app crash) can lose the last fraction of
   * a second of such commits, never corrupt anything. Only for writes whose
   * loss the caller tolerates, e.g. a queue's acks (a lost one means a
   * redelivery, which at-least-once consumers already handle); never
   * for writes whose success was promised durable. On PGlite it is `db`.
   */
  readonly relaxedDb: Db;
  readonly kind: "postgres" | "pglite";
  /**
   * Subscribes to a Postgres NOTIFY channel. `onNotify` gets each payload.
   * `onReconnect` runs after the listening connection was lost and made anew,
   * when notifications may have been missed, so the caller re-checks.
   */
  listen(channel: string, onNotify: (payload: string) => void, onReconnect?: () => void): Promise<Unlisten>;
  close(): Promise<void>;
}

export interface DatabaseOptions {
  databaseUrl?: string | undefined;
  dataDir: string;
  /** Largest pool for `pg`; PGlite has exactly one connection. */
  poolSize?: number;
  onError?: (err: Error) => void;
}

const INT8_OID = 20;
const DATE_OID = 1082;

export async function openDatabase(options: DatabaseOptions): Promise<Database> {
  return options.databaseUrl ? openPostgres(options.databaseUrl, options) : openPglite(options);
}

async function openPostgres(connectionString: string, options: DatabaseOptions): Promise<Database> {
  const types = {
    getTypeParser: ((oid: number, format?: "text" | "binary") =>
      oid === INT8_OID ? (v: string) => Number(v) : oid === DATE_OID ? (v: string) => v : (pg.types.getTypeParser(oid, format) as (v: string) => unknown)) as typeof pg.types.getTypeParser,
  };
  const pool = new pg.Pool({ connectionString, max: options.poolSize ?? 20, types, Client: PreparingClient });
  pool.on("error", (err) => options.onError?.(err));
  // A checked-out client has no pool listener: without its own, a connection
  // ended by the server (a restart) between two queries would crash the process.
  pool.on("connect", (client) => client.on("error", (err) => options.onError?.(err)));
  const db: Db = new Kysely({ dialect: new PostgresDialect({ pool }) });
  const relaxedPool = new pg.Pool({
    connectionString,
    max: Math.ceil((options.poolSize ?? 20) / 2),
    types,
    options: "-c synchronous_commit=off",
    Client: PreparingClient,
  });
  relaxedPool.on("error", (err) => options.onError?.(err));
  relaxedPool.on("connect", (client) => client.on("error", (err) => options.onError?.(err)));
  const relaxedDb: Db = new Kysely({ dialect: new PostgresDialect({ pool: relaxedPool }) });
  const notifications = createPgNotifications(connectionString, options.onError);
  return {
    db,
    relaxedDb,
    kind: "postgres",
    listen: (channel, onNotify, onReconnect) => notifications.subscribe(channel, onNotify, onReconnect),
    async close() {
      await notifications.stop();
      await Promise.all([db.destroy(), relaxedDb.destroy()]);
    },
  };
}

async function openPglite(options: DatabaseOptions): Promise<Database> {
  const dir = path.join(options.dataDir, "pg");
  await fs.mkdir(dir, { recursive: true });
  const pglite = await PGlite.create(dir, { parsers: { [INT8_OID]: (v: string) => Number(v), [DATE_OID]: (v: string) => v } });
  const db: Db = new Kysely({ dialect: new PGliteDialect(pglite) });
  return {
    db,
    relaxedDb: db,
    kind: "pglite",
    async listen(channel, onNotify) {
      return pglite.listen(channel, onNotify);
    },
    async close() {
      await db.destroy();
    },
  };
}
