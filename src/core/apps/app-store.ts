/**
 * Every SQL statement that writes apps and their service tokens, and the two
 * tables' types. The authenticator reads through it (`lookupTokens`), the
 * admin API writes through it. Two stores only read `apps` in their own
 * statements: `secrets/secret-store.ts` joins it (an app's flag, its row
 * lock), and `queues/store/housekeeping-store.ts` finds the rows of apps that are gone.
 */
import { sql, type ColumnType, type Generated, type Kysely } from "kysely";
import { PREPARED, exactTimeText, type Db, type Timestamp } from "../database/index.ts";
import { PlatformError } from "../errors.ts";
import { NAME_PATTERN, appFromRow, isUuid, type AppLimits, type AppRecord, type AppRow } from "./apps.ts";

interface AppsTable {
  id: Generated<string>;
  name: string;
  status: "running" | "stopped";
  mail_from: string;
  analytics_enabled: Generated<boolean>;
  secrets_enabled: Generated<boolean>;
  /** Only the limits the admin changed; the rest come from the defaults in code. */
  limits: ColumnType<Record<string, number>, string | undefined, string>;
  created_at: ColumnType<Date, Date | string | undefined, Date | string>;
  /** Bumped by every change of the record (migration 0015); a bigint, read as a string on PostgreSQL. */
  revision: ColumnType<string | number, never, never>;
}

interface AppTokensTable {
  id: Generated<string>;
  app_id: string;
  /** Hex SHA-256 of the plaintext token; the plaintext is never stored. */
  token_hash: string;
  label: string;
  created_at: Generated<Timestamp>;
  /** Coarse: written at most about once a minute per token (migration 0007). */
  last_used_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
}

/** A token as the operator sees it (never its hash). */
export interface TokenInfo {
  id: string;
  label: string;
  createdAt: Date;
  lastUsedAt: Date | null;
}

/** The tables of this store; other stores that join `apps` view the database through these too. */
export type AppTables = {
  apps: AppsTable;
  app_tokens: AppTokensTable;
};

const APP_COLUMNS = [
  "apps.id",
  "apps.name",
  "apps.status",
  "apps.mail_from",
  "apps.analytics_enabled",
  "apps.secrets_enabled",
  "apps.limits",
  "apps.created_at",
  "apps.revision",
] as const;

/** An app with the token that authenticated a request. */
export type TokenRow = AppRow & { token_id: string; token_hash: string };

export interface AppChanges {
  status?: "running" | "stopped";
  mailFrom?: string;
  analyticsEnabled?: boolean;
  secretsEnabled?: boolean;
  /** Merged into the stored overrides (never replacing the others). */
  limits?: Partial<AppLimits>;
}

export type AppOrder = "name" | "-name" | "created_at" | "-created_at";

/**
 * Where a page of apps ends: the last app's sort key (its name, or its
 * `created_at` as exact text) and id. The next page starts right after it in
 * the order, whatever was created or deleted meanwhile (an offset would skip
 * or repeat apps then).
 */
export interface AppPagePosition {
  key: string;
  id: string;
}

interface AppPageQuery {
  /** A case-insensitive substring of the name. */
  filter?: string | undefined;
  status?: "running" | "stopped" | undefined;
  order: AppOrder;
  /** The end of the previous page; undefined for the first. */
  after?: AppPagePosition | undefined;
  /** Undefined: every app from `after` on. */
  limit?: number | undefined;
}

export interface AppStore {
  /** One app by id or name; a missing app is `not_found`. */
  get(idOrName: string): Promise<AppRecord>;
  list(): Promise<AppRecord[]>;
  /** One page of the apps that match, how many match in all, and where the page ended when more follow. */
  page(query: AppPageQuery): Promise<{ apps: AppRecord[]; total: number; next?: AppPagePosition }>;
  /** Undefined when the name is taken. */
  create(name: string, mailFrom: string): Promise<AppRecord | undefined>;
  nameTaken(name: string): Promise<boolean>;
  /**
   * Applies the changes and bumps the revision (also when `changes` is empty: a change of the
   * blueprint, kept by the secrets facility, is a change of the app too). With `expectedRevision`,
   * only if the app is still at that revision, else `conflict`. The new revision.
   */
  update(appId: string, changes: AppChanges, expectedRevision?: number): Promise<number>;
  delete(appId: string): Promise<void>;
  insertToken(appId: string, tokenHash: string, label: string): Promise<string>;
  /** The token's app id; undefined when no such token exists. */
  deleteToken(tokenId: string): Promise<string | undefined>;
  /** The apps of the given token hashes, one statement for any number of them. */
  lookupTokens(hashes: string[]): Promise<TokenRow[]>;
  /** An app's tokens, newest first. */
  listTokens(appId: string): Promise<TokenInfo[]>;
  /** Marks a token used now, unless it was marked within the last `intervalSeconds` (by any instance). */
  markTokenUsed(tokenId: string, intervalSeconds: number): Promise<void>;
}

export function createAppStore(database: Db): AppStore {
  const db: Kysely<AppTables> = database.withTables<AppTables>();
  return {
    async get(idOrName) {
      // Neither an id nor a name any app can have (e.g. a NUL in it): no such app, without asking SQL.
      if (!isUuid(idOrName) && !NAME_PATTERN.test(idOrName))
        throw new PlatformError("not_found", `no app ${JSON.stringify(idOrName)}`);
      const row = await db
        .selectFrom("apps")
        .select(APP_COLUMNS)
        .where(isUuid(idOrName) ? "apps.id" : "apps.name", "=", idOrName)
        .executeTakeFirst();
      if (!row) throw new PlatformError("not_found", `no app ${JSON.stringify(idOrName)}`);
      return appFromRow(row);
    },

    async list() {
      const rows = await db.selectFrom("apps").select(APP_COLUMNS).orderBy("apps.name").execute();
      return rows.map(appFromRow);
    },

    async page(query) {
      let matching = db.selectFrom("apps");
      if (query.filter) {
        const pattern = `%${query.filter.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
        matching = matching.where("apps.name", "ilike", pattern);
      }
      if (query.status) matching = matching.where("apps.status", "=", query.status);
      const byName = query.order === "name" || query.order === "-name";
      const column = byName ? "apps.name" : "apps.created_at";
      const direction = query.order.startsWith("-") ? "desc" : "asc";
      // The sort key as the page token keeps it, and read back from it: a name, or the time as exact text.
      const key = byName ? sql.ref<string>(column) : exactTimeText(sql.ref(column));
      let rows = matching.select([...APP_COLUMNS, key.as("page_key")]);
      if (query.after) {
        const after = sql`${query.after.key}::${sql.raw(byName ? "text" : "timestamptz")}`;
        rows = rows.where(
          sql<boolean>`(${sql.ref(column)}, apps.id) ${sql.raw(direction === "asc" ? ">" : "<")} (${after}, ${query.after.id}::uuid)`,
        );
      }
      rows = rows.orderBy(column, direction).orderBy("apps.id", direction);
      // One more than asked: whether another page follows.
      if (query.limit !== undefined) rows = rows.limit(query.limit + 1);
      const [found, counted] = await Promise.all([
        rows.execute(),
        matching.select((eb) => eb.fn.countAll<string>().as("n")).executeTakeFirstOrThrow(),
      ]);
      const more = query.limit !== undefined && found.length > query.limit;
      const page = more ? found.slice(0, query.limit) : found;
      const last = page[page.length - 1];
      return {
        apps: page.map(appFromRow),
        total: Number(counted.n),
        ...(more ? { next: { key: last.page_key, id: last.id } } : {}),
      };
    },

    async create(name, mailFrom) {
      const row = await db
        .insertInto("apps")
        .values({ name, status: "running", mail_from: mailFrom, limits: "{}" })
        .onConflict((oc) => oc.column("name").doNothing())
        .returning([
          "id",
          "name",
          "status",
          "mail_from",
          "analytics_enabled",
          "secrets_enabled",
          "limits",
          "created_at",
          "revision",
        ])
        .executeTakeFirst();
      return row ? appFromRow(row) : undefined;
    },

    async nameTaken(name) {
      return (await db.selectFrom("apps").select("id").where("name", "=", name).executeTakeFirst()) !== undefined;
    },

    async update(appId, changes, expectedRevision) {
      const set: Record<string, unknown> = {};
      if (changes.status !== undefined) set.status = changes.status;
      if (changes.mailFrom !== undefined) set.mail_from = changes.mailFrom;
      if (changes.analyticsEnabled !== undefined) set.analytics_enabled = changes.analyticsEnabled;
      if (changes.secretsEnabled !== undefined) set.secrets_enabled = changes.secretsEnabled;
      if (changes.limits && Object.keys(changes.limits).length > 0) {
        // Merged in the database, so two concurrent updates of different limits both stay.
        set.limits = sql`apps.limits || ${JSON.stringify(changes.limits)}::jsonb`;
      }
      set.revision = sql`apps.revision + 1`;
      let update = db
        .updateTable("apps")
        .set(set as never)
        .where("id", "=", appId);
      if (expectedRevision !== undefined) update = update.where("revision", "=", expectedRevision as never);
      const row = await update.returning("revision").executeTakeFirst();
      if (row) return Number(row.revision);
      const current = await db.selectFrom("apps").select("revision").where("id", "=", appId).executeTakeFirst();
      if (!current) throw new PlatformError("not_found", `no app ${JSON.stringify(appId)}`);
      throw new PlatformError(
        "conflict",
        `the app was changed since you loaded it (revision ${Number(current.revision)}); reload`,
        { details: [`expected_revision: was ${expectedRevision}, the app is at revision ${Number(current.revision)}`] },
      );
    },

    async delete(appId) {
      await db.deleteFrom("apps").where("id", "=", appId).execute();
    },

    insertToken(appId, tokenHash, label) {
      return insertTokenIn(db, "app_tokens", appId, tokenHash, label);
    },

    deleteToken(tokenId) {
      return deleteTokenIn(db, "app_tokens", tokenId);
    },

    async lookupTokens(hashes) {
      return db
        .selectFrom("app_tokens")
        .innerJoin("apps", "apps.id", "app_tokens.app_id")
        .select([...APP_COLUMNS, "app_tokens.id as token_id", "app_tokens.token_hash"])
        .where("app_tokens.token_hash", "=", sql<string>`any(${hashes}::text[])`)
        .modifyFront(PREPARED) // one text for any number of tokens: planned once per connection
        .execute();
    },

    listTokens(appId) {
      return listTokensIn(db, "app_tokens", appId);
    },

    async markTokenUsed(tokenId, intervalSeconds) {
      await markTokenUsedIn(db, "app_tokens", tokenId, intervalSeconds);
    },
  };
}

/** The column of a token table that names the token's holder. */
const holderOf = (table: "app_tokens" | "operator_tokens") => (table === "app_tokens" ? "app_id" : "operator_id");

/** Stores a new token of a holder (its hash, never the token) and answers its id: app and operator tokens alike. */
export async function insertTokenIn<T>(
  db: Kysely<T>,
  table: "app_tokens" | "operator_tokens",
  holderId: string,
  tokenHash: string,
  label: string,
): Promise<string> {
  const { rows } = await sql<{ id: string }>`
    INSERT INTO ${sql.table(table)} (${sql.ref(holderOf(table))}, token_hash, label)
    VALUES (${holderId}, ${tokenHash}, ${label}) RETURNING id`.execute(db);
  return rows[0].id;
}

/** Deletes a token; answers its holder's id, or undefined when there was no such token: app and operator tokens alike. */
export async function deleteTokenIn<T>(
  db: Kysely<T>,
  table: "app_tokens" | "operator_tokens",
  tokenId: string,
): Promise<string | undefined> {
  const { rows } = await sql<{ holder: string }>`
    DELETE FROM ${sql.table(table)} WHERE id = ${tokenId} RETURNING ${sql.ref(holderOf(table))} AS holder`.execute(db);
  return rows[0]?.holder;
}

/**
 * Marks a token used now, unless it was marked within the last
 * `intervalSeconds` (by any instance): the one statement behind both app
 * tokens' and operator tokens' "last used" (`admin/token-usage.ts`).
 */
export async function markTokenUsedIn<T>(
  db: Kysely<T>,
  table: "app_tokens" | "operator_tokens",
  tokenId: string,
  intervalSeconds: number,
): Promise<void> {
  await sql`UPDATE ${sql.table(table)} SET last_used_at = now()
    WHERE id = ${tokenId}
      AND (last_used_at IS NULL OR last_used_at < now() - make_interval(secs => ${intervalSeconds}))`.execute(db);
}

/**
 * A holder's tokens, newest first (without their hashes): the one query behind both app tokens'
 * and operator tokens' lists.
 */
export async function listTokensIn<T>(
  db: Kysely<T>,
  table: "app_tokens" | "operator_tokens",
  holderId: string,
): Promise<TokenInfo[]> {
  const { rows } = await sql<{ id: string; label: string; created_at: Date; last_used_at: Date | null }>`
    SELECT id, label, created_at, last_used_at FROM ${sql.table(table)}
    WHERE ${sql.ref(holderOf(table))} = ${holderId}
    ORDER BY created_at DESC, id`.execute(db);
  return rows.map((r) => ({
    id: r.id,
    label: r.label,
    createdAt: new Date(r.created_at),
    lastUsedAt: r.last_used_at === null ? null : new Date(r.last_used_at),
  }));
}
