/**
 * The platform database: Kysely over `pg` when DATABASE_URL is set, over
 * PGlite (in-process Postgres) in DATA_DIR/pg otherwise. Both speak the same
 * SQL, so every store is written once. Table types of every facility live
 * here, next to each other, so the schema can be read in one place; the DDL
 * lives in `src/migrations/`.
 *
 * Terminology:
 * - **app**: a hosted app; every row of every facility table belongs to one.
 * - **service token**: an app's bearer token; stored only as its SHA-256.
 * - **day**: a UTC calendar day, the period of every daily cap.
 */
import fs from "node:fs/promises";
import path from "node:path";
import { Kysely, PostgresDialect, sql, type Generated, type ColumnType } from "kysely";
import { Migrator, type Migration } from "kysely/migration";
import pg from "pg";
import { PGlite } from "@electric-sql/pglite";
import { PGliteDialect } from "kysely-pglite-dialect";
import { migrations } from "./migrations/index.ts";

type Timestamp = ColumnType<Date, Date | string | undefined, Date | string>;

export interface AppsTable {
  id: Generated<string>;
  name: string;
  status: "running" | "stopped";
  mail_from: string;
  analytics_enabled: Generated<boolean>;
  secrets_enabled: Generated<boolean>;
  /** Only the limits the admin changed; the rest come from the defaults in code. */
  limits: ColumnType<Record<string, number>, string | undefined, string>;
  created_at: ColumnType<Date, Date | string | undefined, Date | string>;
}

export interface AppTokensTable {
  id: Generated<string>;
  app_id: string;
  /** Hex SHA-256 of the plaintext token; the plaintext is never stored. */
  token_hash: string;
  label: string;
  created_at: Generated<Timestamp>;
  /** Coarse: written at most about once a minute per token (migration 0007). */
  last_used_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
}

export interface QuotaUsageTable {
  app_id: string;
  /** The UTC day, `YYYY-MM-DD`. */
  day: string;
  counter: string;
  used: number;
}

export interface SecretsTable {
  app_id: string;
  name: string;
  /** AES-256-GCM: iv (12 bytes) | tag (16 bytes) | ciphertext; null while unset. */
  value_encrypted: Buffer | null;
  key_id: string | null;
  version: number | null;
  set_at: Timestamp | null;
}

export interface SecretLinksTable {
  /** Hex SHA-256 of the link token; the token itself is never stored. */
  token_hash: string;
  app_id: string;
  name: string;
  created_at: Generated<Timestamp>;
  expires_at: Timestamp;
  /** Set once, atomically, when the link sets the value; a used link is dead. */
  used_at: Timestamp | null;
}

/** One send attempt of the mail facility, by either provider. */
export interface MailLogTable {
  id: Generated<number>;
  app_id: string;
  to_address: string;
  from_address: string;
  subject: string;
  /** Kept only for the outbox, where the row is the message; null for SES. */
  body_text: string | null;
  status: "sent" | "stored" | "failed";
  provider: string;
  provider_message_id: string;
  created_at: Timestamp;
}

/** One message of a queue (src/queues/queue-store.ts). */
export interface QueueMessagesTable {
  id: Generated<string>;
  app_id: string;
  queue: string;
  /** The JSON-serialised payload, stored as text: kept byte for byte, never read into. */
  payload: string;
  enqueued_at: Generated<Timestamp>;
  /** When the message may next be claimed: the put (plus any delay), or the end of its current lease. */
  visible_at: Timestamp;
  expires_at: Timestamp;
  /** Deliveries so far; also the lease's nonce inside the receipt. */
  deliveries: Generated<number>;
}

export interface AnalyticsEventTypesTable {
  app_id: string;
  name: string;
  /** Property name -> declared kind (`string`, `number`, `boolean`). */
  properties: ColumnType<Record<string, string>, string, string>;
  created_at: Generated<Timestamp>;
  updated_at: Generated<Timestamp>;
}

/** Raw events of the SQL analytics store (property values are strings). */
export interface AnalyticsEventsTable {
  app_id: string;
  type: string;
  at: Timestamp;
  properties: ColumnType<Record<string, string>, string, string>;
}

/** Hourly counts per (type, property, value); `prop = ''` is the hour's total. */
export interface AnalyticsHourlyTable {
  app_id: string;
  type: string;
  prop: string;
  hour: Timestamp;
  value: string;
  n: number;
}

/** The same per UTC day. */
export interface AnalyticsDailyTable {
  app_id: string;
  type: string;
  prop: string;
  day: Timestamp;
  value: string;
  n: number;
}

export interface Tables {
  apps: AppsTable;
  app_tokens: AppTokensTable;
  quota_usage: QuotaUsageTable;
  analytics_event_types: AnalyticsEventTypesTable;
  analytics_events: AnalyticsEventsTable;
  analytics_hourly: AnalyticsHourlyTable;
  analytics_daily: AnalyticsDailyTable;
  secrets: SecretsTable;
  queue_messages: QueueMessagesTable;
  secret_links: SecretLinksTable;
  mail_log: MailLogTable;
}

export type Db = Kysely<Tables>;

/** A notification listener: `unlisten` stops it. */
export type Unlisten = () => Promise<void>;

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

/**
 * Put `${PREPARED}` in a hot statement whose text never changes (only its
 * parameters do; first in a `sql` template, or by a query builder's
 * `modifyFront`): on PostgreSQL it is then sent as a named prepared
 * statement, parsed and planned once per connection instead of on every
 * call (for a statement of a few CTEs, planning costs more than running it).
 * Only marked statements are prepared, so the prepared statements of a
 * connection stay few. On PGlite it is a comment.
 */
export const PREPARED = sql.raw("/* prepared */ ");
const PREPARED_TEXT = "/* prepared */ ";
const preparedNames = new Map<string, string>();

/** A `pg` client that sends statements marked with `PREPARED` as named prepared statements. */
class PreparingClient extends pg.Client {}
const plainQuery = pg.Client.prototype.query;
PreparingClient.prototype.query = function (this: pg.Client, config: unknown, values?: unknown, callback?: unknown) {
  if (typeof config === "string" && config.includes(PREPARED_TEXT)) {
    let name = preparedNames.get(config);
    if (!name) preparedNames.set(config, (name = `pb_${preparedNames.size + 1}`));
    return (plainQuery as (...args: unknown[]) => unknown).call(this, { name, text: config, values }, callback);
  }
  return (plainQuery as (...args: unknown[]) => unknown).call(this, config, values, callback);
} as typeof pg.Client.prototype.query;
const DATE_OID = 1082;

export async function openDatabase(options: DatabaseOptions): Promise<Database> {
  return options.databaseUrl ? openPostgres(options.databaseUrl, options) : openPglite(options);
}

async function openPostgres(connectionString: string, options: DatabaseOptions): Promise<Database> {
  const types = {
    getTypeParser: ((oid: number, format?: "text" | "binary") =>
      oid === INT8_OID ? (v: string) => Number(v) : oid === DATE_OID ? (v: string) => v : pg.types.getTypeParser(oid, format)) as typeof pg.types.getTypeParser,
  };
  const pool = new pg.Pool({ connectionString, max: options.poolSize ?? 20, types, Client: PreparingClient });
  pool.on("error", (err) => options.onError?.(err));
  // A checked-out client has no pool listener: without its own, a connection
  // ended by the server (a restart) between two queries would crash the process.
  pool.on("connect", (client) => client.on("error", (err) => options.onError?.(err)));
  const db = new Kysely<Tables>({ dialect: new PostgresDialect({ pool }) });
  const relaxedPool = new pg.Pool({
    connectionString,
    max: Math.ceil((options.poolSize ?? 20) / 2),
    types,
    options: "-c synchronous_commit=off",
    Client: PreparingClient,
  });
  relaxedPool.on("error", (err) => options.onError?.(err));
  relaxedPool.on("connect", (client) => client.on("error", (err) => options.onError?.(err)));
  const relaxedDb = new Kysely<Tables>({ dialect: new PostgresDialect({ pool: relaxedPool }) });
  const notifications = new PgNotifications(connectionString, options.onError);
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

/**
 * The process's one LISTEN connection, shared by every channel. When it dies
 * (database restarted, network cut) it reconnects with backoff, LISTENs on
 * every channel again and tells each subscriber, which then re-checks what it
 * may have missed, all without restarting the service.
 */
class PgNotifications {
  private client: pg.Client | undefined;
  private connecting: Promise<void> | undefined;
  private listening = new Set<string>();
  private readonly subscribers = new Map<string, Set<{ onNotify: (payload: string) => void; onReconnect?: () => void }>>();
  private stopped = false;
  private retryTimer: NodeJS.Timeout | undefined;
  private readonly connectionString: string;
  private readonly onError: ((err: Error) => void) | undefined;

  constructor(connectionString: string, onError: ((err: Error) => void) | undefined) {
    this.connectionString = connectionString;
    this.onError = onError;
  }

  async subscribe(channel: string, onNotify: (payload: string) => void, onReconnect?: () => void): Promise<Unlisten> {
    const subscriber = { onNotify, onReconnect };
    let set = this.subscribers.get(channel);
    if (!set) this.subscribers.set(channel, (set = new Set()));
    set.add(subscriber);
    if (!this.client) await (this.connecting ??= this.connect(false).finally(() => (this.connecting = undefined)));
    if (this.client && !this.listening.has(channel)) {
      this.listening.add(channel);
      await this.client.query(`LISTEN ${pg.escapeIdentifier(channel)}`);
    }
    return async () => {
      set.delete(subscriber);
      if (set.size === 0 && this.subscribers.get(channel) === set) {
        this.subscribers.delete(channel);
        if (this.listening.delete(channel)) await this.client?.query(`UNLISTEN ${pg.escapeIdentifier(channel)}`).catch(() => {});
      }
    };
  }

  private async connect(isReconnect: boolean): Promise<void> {
    const client = new pg.Client({ connectionString: this.connectionString });
    client.on("notification", (msg) => {
      for (const s of this.subscribers.get(msg.channel) ?? []) s.onNotify(msg.payload ?? "");
    });
    client.on("error", (err) => {
      this.onError?.(err);
      this.scheduleReconnect(client);
    });
    client.on("end", () => this.scheduleReconnect(client));
    await client.connect();
    const channels = [...this.subscribers.keys()];
    for (const channel of channels) await client.query(`LISTEN ${pg.escapeIdentifier(channel)}`);
    if (this.stopped) {
      await client.end().catch(() => {});
      return;
    }
    this.client = client;
    this.listening = new Set(channels);
    if (isReconnect) for (const set of this.subscribers.values()) for (const s of set) s.onReconnect?.();
  }

  private scheduleReconnect(dead: pg.Client, delayMs = 100): void {
    if (this.stopped || this.client !== dead || this.retryTimer) return;
    this.client = undefined;
    this.listening = new Set();
    dead.end().catch(() => {});
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      this.connect(true).catch((err: Error) => {
        this.onError?.(err);
        this.client = dead; // so the next schedule is not ignored
        this.scheduleReconnect(dead, Math.min(delayMs * 2, 5000));
      });
    }, delayMs);
    this.retryTimer.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    const client = this.client;
    this.client = undefined;
    await client?.end().catch(() => {});
  }
}

async function openPglite(options: DatabaseOptions): Promise<Database> {
  const dir = path.join(options.dataDir, "pg");
  await fs.mkdir(dir, { recursive: true });
  const pglite = await PGlite.create(dir, { parsers: { [INT8_OID]: (v: string) => Number(v), [DATE_OID]: (v: string) => v } });
  const db = new Kysely<Tables>({ dialect: new PGliteDialect(pglite) });
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

/** Runs every pending migration; safe to call from several instances at once (Kysely takes a lock). */
export async function migrate(db: Db): Promise<void> {
  const migrator = new Migrator({
    db,
    provider: { getMigrations: async (): Promise<Record<string, Migration>> => migrations },
  });
  const { error, results } = await migrator.migrateToLatest();
  if (error) {
    const failed = results?.find((r) => r.status === "Error")?.migrationName;
    throw new Error(`migration ${failed ?? "(unknown)"} failed: ${error instanceof Error ? error.message : String(error)}`, { cause: error });
  }
}

/** `sql` re-exported so stores import their SQL helpers from one place. */
export { sql };
