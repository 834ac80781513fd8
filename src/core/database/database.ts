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
import path from "node:path";
import { Kysely, PostgresDialect, type ColumnType, type LogEvent } from "kysely";
import pg from "pg";
import { PGlite } from "@electric-sql/pglite";
import { PGliteDialect } from "kysely-pglite-dialect";
import { createPgNotifications, type Unlisten } from "./notifications.ts";
import { boundedPool, statementTimeoutOption } from "./pg-pool.ts";
import { allowDirect } from "./prepared.ts";
import { lockDataDir } from "./data-dir-lock.ts";
import { createDatabaseHealth, type DatabaseHealth, type HealthLog } from "./health.ts";
import { seedFromTemplate } from "./pglite-template.ts";
import { makeOwnerOnly, ownerOnlyDir } from "../owner-only.ts";

/** A timestamp column: read as a Date, written as a Date or an ISO string. */
export type Timestamp = ColumnType<Date, Date | string | undefined, Date | string>;

/** The database with no table known; stores add theirs with `withTables`. */
export type Db = Kysely<Record<never, never>>;

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
  /**
   * The same database with no statement bound (see `pg-pool.ts`), over one
   * connection, for statements that may rightly run long: migrations, and
   * waiting for another instance's migration lock. Never for a request. On
   * PGlite it is `db`.
   */
  readonly unboundedDb: Db;
  readonly kind: "postgres" | "pglite";
  /** Whether the database can be reached right now (see `health.ts`); PGlite, in-process, always can. */
  readonly health: DatabaseHealth;
  /**
   * Subscribes to a Postgres NOTIFY channel. `onNotify` gets each payload.
   * `onReconnect` runs after the listening connection was lost and made anew,
   * when notifications may have been missed, so the caller re-checks.
   */
  listen(channel: string, onNotify: (payload: string) => void, onReconnect?: () => void): Promise<Unlisten>;
  /** How full each connection pool is now (for /metrics); none on PGlite, which has one in-process connection. */
  pools(): PoolStats[];
  close(): Promise<void>;
}

/** One pool's connections at this moment, as `pg` counts them. */
interface PoolStats {
  /** `main` (requests), `relaxed` (asynchronous commits), `unbounded` (migrations, locks). */
  pool: "main" | "relaxed" | "unbounded";
  max: number;
  /** Connections open, idle or in use. */
  open: number;
  idle: number;
  /** Requests waiting for a connection (all are in use, or one is being made). */
  waiting: number;
}

export interface DatabaseOptions {
  databaseUrl?: string | undefined;
  dataDir: string;
  /** Largest pool for `pg`; PGlite has exactly one connection. */
  poolSize?: number;
  /** A connection error that is not the database being unreachable (that one goes to `health`). */
  onError?: (err: Error) => void;
  /** Where the outage warnings of `health` go. */
  log?: HealthLog;
  /**
   * How long a request may wait for a pool connection (a free one, or a new one
   * being made) before it fails as unreachable; default 5000.
   */
  poolWaitMs?: number;
  /** The most of a pool one app holds (0 to 1, see `pg-pool.ts`); default 0.5. */
  poolAppShare?: number;
  /**
   * The longest a statement may run before it fails as unreachable (see
   * `pg-pool.ts`); undefined: unbounded (the CLI's commands, which an operator
   * watches).
   */
  statementTimeoutMs?: number | undefined;
  /**
   * Kysely's `log`, told of every statement when it ends (the traces' statement spans); undefined, the
   * default, adds nothing to a statement.
   */
  queryLog?: (event: LogEvent) => void;
  /** Where a new PGlite directory is copied from (see `pglite-template.ts`); default the installation's cache. */
  templateCache?: string;
}

/**
 * Postgres settings of the embedded database, after PGlite's own. PGlite
 * allocates `shared_buffers` inside its WebAssembly memory and zeroes it at
 * start, so every MB of it is a MB resident for the life of the process:
 * Postgres's default of 128 MB is most of an idle server's memory, while an
 * embedded database's hot pages (the queue line, the apps, today's counters)
 * fit in a few MB. Pages beyond it are read back from the OS's file cache.
 */
const PGLITE_SETTINGS = ["-c", "shared_buffers=16MB"];

/** The time zone of every PostgreSQL session (a connection option, so no statement is spent on it). */
const SESSION_ZONE = "-c TimeZone=UTC";

const INT8_OID = 20;
const DATE_OID = 1082;
const TIMESTAMP_OID = 1114;
const TIMESTAMPTZ_OID = 1184;

export async function openDatabase(options: DatabaseOptions): Promise<Database> {
  return options.databaseUrl ? openPostgres(options.databaseUrl, options) : openPglite(options);
}

async function openPostgres(connectionString: string, options: DatabaseOptions): Promise<Database> {
  const types = {
    getTypeParser: ((oid: number, format?: "text" | "binary") =>
      oid === INT8_OID
        ? (v: string) => Number(v)
        : oid === DATE_OID
          ? (v: string) => v
          : (pg.types.getTypeParser(oid, format) as (v: string) => unknown)) as typeof pg.types.getTypeParser,
  };
  const health = createDatabaseHealth(options.log);
  const onError = (err: Error) => {
    if (!health.failed(err)) options.onError?.(err);
  };
  const connectionTimeoutMillis = options.poolWaitMs ?? 5000;
  const bound = options.statementTimeoutMs;
  const onAnswer = (sentAt: number, text: string) => health.succeeded(sentAt, text);
  const openPool = (
    name: PoolStats["pool"],
    max: number,
    settings: string,
    statementTimeoutMs: number | undefined,
    appShare = 1,
  ) => {
    const pool = new pg.Pool({
      connectionString,
      max,
      types,
      connectionTimeoutMillis,
      // Every session in UTC, whatever the server's or the database's own zone:
      // days (quotas, rollups, retention) are UTC days, and SQL that turns a
      // timestamp into a day would otherwise follow the server's summer time.
      options: [SESSION_ZONE, settings, statementTimeoutOption(statementTimeoutMs)].filter(Boolean).join(" "),
    });
    pools.push({ name, pool, max });
    pool.on("error", onError);
    // A checked-out client has no pool listener: without its own, a connection
    // ended by the server (a restart) between two queries would crash the process.
    pool.on("connect", (client) => {
      // As of now, not of when it began: a connection made just as the outage began proves nothing (see
      // `succeeded`), nor, during a failover, one made to a standby (a read-only outage needs a write).
      health.succeeded(Date.now());
      client.on("error", onError);
    });
    pools.push({ name, pool, max });
    const bounded = boundedPool(pool, {
      statementTimeoutMs,
      onAnswer,
      appShare,
      waitMs: connectionTimeoutMillis,
    });
    const kysely = new Kysely<Record<never, never>>({
      ...(options.queryLog && { log: options.queryLog }),
      dialect: new PostgresDialect({ pool: bounded }),
    });
    if (!options.queryLog) allowDirect(kysely, bounded);
    return kysely;
  };
  const pools: { name: PoolStats["pool"]; pool: pg.Pool; max: number }[] = [];
  const poolSize = options.poolSize ?? 20;
  // The pools that serve apps' requests hold each app to its share; the two connections of migrations and
  // the CLI serve no app.
  const appShare = options.poolAppShare ?? 0.5;
  const db: Db = openPool("main", poolSize, "", bound, appShare);
  const relaxedDb: Db = openPool("relaxed", Math.ceil(poolSize / 2), "-c synchronous_commit=off", bound, appShare);
  const unboundedDb: Db = openPool("unbounded", 2, "", undefined);
  const notifications = createPgNotifications(connectionString, onError, () => health.succeeded(Date.now()));
  return {
    db,
    relaxedDb,
    unboundedDb,
    kind: "postgres",
    health,
    listen: (channel, onNotify, onReconnect) => notifications.subscribe(channel, onNotify, onReconnect),
    pools: () =>
      pools.map(({ name, pool, max }) => ({
        pool: name,
        max,
        open: pool.totalCount,
        idle: pool.idleCount,
        waiting: pool.waitingCount,
      })),
    async close() {
      await notifications.stop();
      await Promise.all([db.destroy(), relaxedDb.destroy(), unboundedDb.destroy()]);
    },
  };
}

async function openPglite(options: DatabaseOptions): Promise<Database> {
  const dir = path.join(options.dataDir, "pg");
  const unlock = await lockDataDir(options.dataDir);
  let pglite: PGlite;
  try {
    await ownerOnlyDir(dir);
    await seedFromTemplate(dir, options.templateCache);
    // A copied template, or files PGlite made 0666 (it ignores the umask), become owner-only.
    await makeOwnerOnly(dir);
    pglite = await PGlite.create(dir, {
      // Timestamps as node-pg reads them on PostgreSQL: PGlite's own parser is `new Date(text)`, which
      // reads the years 1 to 99 as 1900s or 2000s ("0050-03-01" is 1950) and a BC time as Invalid Date.
      parsers: {
        [INT8_OID]: (v: string) => Number(v),
        [DATE_OID]: (v: string) => v,
        [TIMESTAMP_OID]: pg.types.getTypeParser(TIMESTAMP_OID, "text") as (v: string) => Date,
        [TIMESTAMPTZ_OID]: pg.types.getTypeParser(TIMESTAMPTZ_OID, "text") as (v: string) => Date,
      },
      startParams: [...PGlite.defaultStartParams, ...PGLITE_SETTINGS],
    });
  } catch (err) {
    await unlock();
    throw err;
  }
  const db: Db = new Kysely({
    dialect: new PGliteDialect(pglite),
    ...(options.queryLog && { log: options.queryLog }),
  });
  return {
    db,
    relaxedDb: db,
    unboundedDb: db,
    kind: "pglite",
    health: createDatabaseHealth(options.log),
    async listen(channel, onNotify) {
      return pglite.listen(channel, onNotify);
    },
    pools: () => [],
    async close() {
      await db.destroy();
      // The files PGlite made while running.
      await makeOwnerOnly(dir).catch(() => undefined);
      await unlock();
    },
  };
}
