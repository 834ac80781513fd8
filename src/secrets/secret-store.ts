/**
 * Every SQL statement of the secrets facility, one function per operation.
 * Every query is scoped by app id, except the link lookups, which are scoped
 * by the link token's hash (the link is the credential there). Values enter
 * and leave this module only sealed; the caller seals and opens them, so
 * nothing here ever holds a plaintext value.
 */
import { sql, type Generated, type Kysely } from "kysely";
import { hashToken } from "../core/auth.ts";
import type { AppTables } from "../core/apps/app-store.ts";
import { transact, transactionAsDb, type Db, type InTransactionWith, type Timestamp } from "../core/database/index.ts";
import type { SealedValue } from "./keyring.ts";

interface SecretsTable {
  app_id: string;
  name: string;
  /** AES-256-GCM: iv (12 bytes) | tag (16 bytes) | ciphertext; null while unset. */
  value_encrypted: Buffer | null;
  key_id: string | null;
  version: number | null;
  set_at: Timestamp | null;
}

interface SecretLinksTable {
  /** Hex SHA-256 of the link token; the token itself is never stored. */
  token_hash: string;
  /** What the operator lists and revokes a link by (migration 0015): never the token or its hash. */
  id: Generated<string>;
  app_id: string;
  name: string;
  created_at: Generated<Timestamp>;
  expires_at: Timestamp;
  /** Set once, atomically, when the link sets the value; a used link is dead. */
  used_at: Timestamp | null;
}

/** The last version of a dropped name (migration 0021): a name declared again counts on from it. */
interface SecretVersionFloorsTable {
  app_id: string;
  name: string;
  version: number;
}

/** The secrets tables, and `apps` for the joins that check an app's flag or lock its row. */
export type SecretTables = AppTables & {
  secrets: SecretsTable;
  secret_links: SecretLinksTable;
  secret_version_floors: SecretVersionFloorsTable;
};

/** A transaction (a store built on a unit of work's `Tx`, or one `transact` opened). */
type Tx = Kysely<SecretTables>;

/** A stored value not under the current key (key rotation). */
export interface StaleValue {
  appId: string;
  name: string;
  version: number | null;
  value: SealedValue;
}

export interface SecretRow {
  name: string;
  version: number | null;
  setAt: Date | null;
}

export interface StoredSecret extends SecretRow {
  value: SealedValue | null;
}

export interface SetResult {
  appId: string;
  name: string;
  version: number;
  setAt: Date;
}

/** Seals a value for the version it is about to become (the version is part of the seal). */
export type Sealer = (version: number) => SealedValue;

/** Publishes a set's `secret.set` event on the set's own transaction: the event exists exactly when the new version does. */
export type Announce = (trx: Db, result: SetResult) => Promise<void>;

export interface LinkInfo {
  appName: string;
  name: string;
  expiresAt: Date;
}

/** Link tokens are stored only as this hash: SHA-256, like service tokens. */
export const hashLinkToken: (token: string) => string = hashToken;

/**
 * Locks the app's row (`FOR NO KEY UPDATE`, as its revision bump does) at the
 * start of a blueprint change: every transaction that touches an app's secret
 * names, links and values takes the app row before any secret row (creating a
 * link does), so two of them never hold one each and wait on the other.
 */
async function lockApp(trx: Tx, appId: string): Promise<void> {
  await trx.selectFrom("apps").select("id").where("id", "=", appId).forNoKeyUpdate().executeTakeFirst();
}

/** Declares `names` of the app, unset; a name already declared keeps its value. */
async function declareUnset(trx: Tx, appId: string, names: string[]): Promise<void> {
  if (names.length === 0) return;
  await trx
    .insertInto("secrets")
    .values(
      names.map((name) => ({ app_id: appId, name, value_encrypted: null, key_id: null, version: null, set_at: null })),
    )
    .onConflict((oc) => oc.columns(["app_id", "name"]).doNothing())
    .execute();
}

/** What a removal of names must find before it destroys anything (admin `RemoveSecretNames`). */
export interface RemovalGuard {
  /** Values may be destroyed; without it, a name with a value refuses the removal. */
  confirmDestroyValues: boolean;
  /** The version each of these names must still have (0: no value), as the caller last saw it. */
  expectedVersions?: ReadonlyMap<string, number>;
}

/** Some of an app's secret names: all but `keep`, or those in `drop`. */
type NamesPicked = { keep: string[] } | { drop: string[] };

const namesPicked = (which: NamesPicked) =>
  "keep" in which
    ? which.keep.length === 0
      ? sql`true`
      : sql`name <> ALL (${which.keep}::text[])`
    : sql`name = ANY (${which.drop}::text[])`;

/**
 * Locks the links of the picked names before their secret rows are locked or
 * deleted (a deletion cascades to the links): the order of a link's use, which
 * locks its link and then its secret, so the two never wait on each other.
 */
async function lockLinks(trx: Tx, appId: string, which: NamesPicked): Promise<void> {
  await sql`SELECT 1 FROM secret_links WHERE app_id = ${appId}::uuid AND ${namesPicked(which)} ORDER BY id FOR UPDATE`.execute(
    trx,
  );
}

/**
 * Deletes the app's secrets that `which` picks, with their values and links,
 * and keeps each one's version as its name's floor (`secret_version_floors`),
 * in the same statement: a name declared again never repeats a version an app
 * may still hold. Their links must be locked already (`lockLinks`).
 */
async function dropSecrets(trx: Tx, appId: string, which: NamesPicked): Promise<void> {
  const picked = namesPicked(which);
  await sql`
    WITH gone AS (
      DELETE FROM secrets WHERE app_id = ${appId}::uuid AND ${picked} RETURNING name, version
    )
    INSERT INTO secret_version_floors (app_id, name, version)
    SELECT ${appId}::uuid, name, version FROM gone WHERE version IS NOT NULL
    ON CONFLICT (app_id, name) DO UPDATE
    SET version = greatest(secret_version_floors.version, excluded.version)`.execute(trx);
}

export function createSecretStore(database: Db) {
  const db: Kysely<SecretTables> = database.withTables<SecretTables>();
  /** Within `trx`: locks the secret row, bumps its version and stores the sealed value. Undefined when undeclared. */
  async function setInTransaction(trx: Tx, appId: string, name: string, seal: Sealer): Promise<SetResult | undefined> {
    const current = await trx
      .selectFrom("secrets")
      .select("version")
      .select((eb) =>
        eb
          .selectFrom("secret_version_floors as f")
          .select("f.version")
          .whereRef("f.app_id", "=", "secrets.app_id")
          .whereRef("f.name", "=", "secrets.name")
          .as("floor"),
      )
      .where("app_id", "=", appId)
      .where("name", "=", name)
      .forUpdate()
      .executeTakeFirst();
    if (!current) return undefined;
    const version = Math.max(current.version ?? 0, current.floor ?? 0) + 1;
    const { sealed, keyId } = seal(version);
    const row = await trx
      .updateTable("secrets")
      .set({ value_encrypted: sealed, key_id: keyId, version, set_at: sql<Date>`now()` })
      .where("app_id", "=", appId)
      .where("name", "=", name)
      .returning(["version", "set_at"])
      .executeTakeFirstOrThrow();
    return { appId, name, version: row.version!, setAt: new Date(row.set_at!) };
  }

  return {
    /**
     * In the transaction that deletes the app (`trx`): takes the app's row and
     * then its links before the deletion cascades to its secrets and links, the
     * order every change of secrets takes (a link's use locks its link, then its
     * secret). The cascade alone locked the secrets first, and a link used at that
     * moment deadlocked with the deletion.
     */
    async lockForAppDeletion(trx: Db, appId: string): Promise<void> {
      await sql`SELECT 1 FROM apps WHERE id = ${appId}::uuid FOR UPDATE`.execute(trx);
      await sql`SELECT 1 FROM secret_links WHERE app_id = ${appId}::uuid ORDER BY id FOR UPDATE`.execute(trx);
    },

    /** Deletes up to `batch` used or expired links, of any app; how many. */
    async deleteDeadLinks(batch: number): Promise<number> {
      const result = await db
        .deleteFrom("secret_links")
        .where("token_hash", "in", (eb) =>
          eb
            .selectFrom("secret_links")
            .select("token_hash")
            .where((w) => w.or([w("used_at", "is not", null), w("expires_at", "<=", sql<Date>`now()`)]))
            .limit(batch)
            .forUpdate()
            .skipLocked(),
        )
        .executeTakeFirst();
      return Number(result.numDeletedRows);
    },

    async list(appId: string): Promise<SecretRow[]> {
      const rows = await db
        .selectFrom("secrets")
        .select(["name", "version", "set_at"])
        .where("app_id", "=", appId)
        .orderBy("name")
        .execute();
      return rows.map((r) => ({ name: r.name, version: r.version, setAt: r.set_at ? new Date(r.set_at) : null }));
    },

    async read(appId: string, name: string): Promise<StoredSecret | undefined> {
      const row = await db
        .selectFrom("secrets")
        .select(["name", "version", "set_at", "value_encrypted", "key_id"])
        .where("app_id", "=", appId)
        .where("name", "=", name)
        .executeTakeFirst();
      if (!row) return undefined;
      return {
        name: row.name,
        version: row.version,
        setAt: row.set_at ? new Date(row.set_at) : null,
        value:
          row.value_encrypted && row.key_id ? { sealed: Buffer.from(row.value_encrypted), keyId: row.key_id } : null,
      };
    },

    /**
     * The owner's set: a new version of a declared secret. Undefined when
     * undeclared. `announce` (the `secret.set` event) runs in its transaction.
     */
    async set(appId: string, name: string, seal: Sealer, announce: Announce): Promise<SetResult | undefined> {
      return transact(db, async (trx) => {
        const result = await setInTransaction(trx, appId, name, seal);
        if (result) await announce(transactionAsDb(trx), result);
        return result;
      });
    },

    /**
     * Creates a link when the app has fewer than `maxOutstanding` unused,
     * unexpired links. The app's row is locked for the count and the insert,
     * so concurrent creations for one app take turns and never overshoot.
     * Dead links (used or expired) of the app are deleted on the way.
     * `answerIn` (an idempotent run's answer) runs in the transaction when
     * the link is created.
     */
    async createLink(
      {
        appId,
        name,
        tokenHash,
        ttlSeconds,
        maxOutstanding,
      }: { appId: string; name: string; tokenHash: string; ttlSeconds: number; maxOutstanding: number },
      answerIn?: InTransactionWith<{ expiresAt: Date }>,
    ): Promise<
      { kind: "created"; expiresAt: Date } | { kind: "undeclared" } | { kind: "too_many"; retryAfterSeconds: number }
    > {
      return transact(db, async (trx) => {
        await lockApp(trx, appId);
        const declared = await trx
          .selectFrom("secrets")
          .select("name")
          .where("app_id", "=", appId)
          .where("name", "=", name)
          .executeTakeFirst();
        if (!declared) return { kind: "undeclared" as const };
        await trx
          .deleteFrom("secret_links")
          .where("app_id", "=", appId)
          .where((eb) => eb.or([eb("used_at", "is not", null), eb("expires_at", "<=", sql<Date>`now()`)]))
          .execute();
        const outstanding = await trx
          .selectFrom("secret_links")
          .select([
            (eb) => eb.fn.countAll<number>().as("n"),
            sql<number | null>`ceil(extract(epoch from min(expires_at) - now()))`.as("next_expiry_seconds"),
          ])
          .where("app_id", "=", appId)
          .where("used_at", "is", null)
          .where("expires_at", ">", sql<Date>`now()`)
          .executeTakeFirstOrThrow();
        if (Number(outstanding.n) >= maxOutstanding) {
          const untilExpiry = Number(outstanding.next_expiry_seconds ?? 60);
          return { kind: "too_many" as const, retryAfterSeconds: Math.max(1, Math.min(60, untilExpiry)) };
        }
        const row = await trx
          .insertInto("secret_links")
          .values({
            token_hash: tokenHash,
            app_id: appId,
            name,
            expires_at: sql<Date>`now() + make_interval(secs => ${ttlSeconds})`,
          })
          .returning("expires_at")
          .executeTakeFirstOrThrow();
        const expiresAt = new Date(row.expires_at);
        await answerIn?.(transactionAsDb(trx), { expiresAt });
        return { kind: "created" as const, expiresAt };
      });
    },

    /** What the link page shows; undefined when the link is unknown, used, expired or its app has secrets disabled. */
    async findLink(tokenHash: string): Promise<LinkInfo | undefined> {
      const row = await db
        .selectFrom("secret_links")
        .innerJoin("apps", "apps.id", "secret_links.app_id")
        .select(["apps.name as app_name", "secret_links.name", "secret_links.expires_at"])
        .where("secret_links.token_hash", "=", tokenHash)
        .where("secret_links.used_at", "is", null)
        .where("secret_links.expires_at", ">", sql<Date>`now()`)
        .where("apps.secrets_enabled", "=", true)
        .executeTakeFirst();
      return row ? { appName: row.app_name, name: row.name, expiresAt: new Date(row.expires_at) } : undefined;
    },

    /**
     * Uses a link up and sets its secret, in one transaction. The conditional
     * UPDATE is the single point of truth: of any number of concurrent uses,
     * exactly one sees the row still unused and unexpired; the rest get
     * undefined, as do unknown and expired links.
     */
    async useLink(
      tokenHash: string,
      seal: (appId: string, name: string, version: number) => SealedValue,
      announce: Announce,
    ): Promise<SetResult | undefined> {
      return transact(db, async (trx) => {
        const link = await trx
          .updateTable("secret_links")
          .set({ used_at: sql<Date>`now()` })
          .where("token_hash", "=", tokenHash)
          .where("used_at", "is", null)
          .where("expires_at", ">", sql<Date>`now()`)
          .where((eb) =>
            eb.exists(
              eb
                .selectFrom("apps")
                .select("apps.id")
                .whereRef("apps.id", "=", "secret_links.app_id")
                .where("apps.secrets_enabled", "=", true),
            ),
          )
          .returning(["app_id", "name"])
          .executeTakeFirst();
        if (!link) return undefined;
        const result = await setInTransaction(trx, link.app_id, link.name, (version) =>
          seal(link.app_id, link.name, version),
        );
        if (result) await announce(transactionAsDb(trx), result);
        return result;
      });
    },

    /**
     * The blueprint's list of secret names: declaring keeps the secrets whose
     * names stay (values untouched), adds the new ones unset, and deletes the
     * rest with their values. A secret's links go with it (the `secret_links`
     * foreign key cascades), so a dropped name leaves no usable link behind.
     */
    async declare(appId: string, names: string[]): Promise<void> {
      await transact(db, async (trx) => {
        await lockApp(trx, appId);
        await lockLinks(trx, appId, { keep: names });
        await dropSecrets(trx, appId, { keep: names });
        await declareUnset(trx, appId, names);
      });
    },

    /** Declares more names, unset; names already declared keep their value. */
    async addNames(appId: string, names: string[]): Promise<void> {
      await transact(db, async (trx) => {
        await lockApp(trx, appId);
        await declareUnset(trx, appId, names);
      });
    },

    /**
     * Removes names with their values and links. Nothing changes when a name
     * has a value and `guard.confirmDestroyValues` is
     * false (`withValues` names them), or when a name's version is not the one
     * `guard.expectedVersions` gives for it (0: no value; `changed` names them).
     */
    async removeNames(
      appId: string,
      names: string[],
      guard: RemovalGuard,
    ): Promise<{ removed: boolean; withValues: string[]; changed: string[] }> {
      return transact(db, async (trx) => {
        await lockApp(trx, appId);
        await lockLinks(trx, appId, { drop: names });
        // Every named row is locked, with or without a value: a row is read as
        // it is once its lock is had, so a value set meanwhile (by a link, by
        // SetSecret) is seen and refused, never deleted unconfirmed. (Locking
        // only the rows with a value would pass over one being set right now.)
        const rows =
          names.length === 0
            ? []
            : await trx
                .selectFrom("secrets")
                .select(["name", "version", sql<boolean>`value_encrypted IS NOT NULL`.as("has_value")])
                .where("app_id", "=", appId)
                .where("name", "in", names)
                .orderBy("name")
                .forUpdate()
                .execute();
        const withValues = rows.filter((r) => r.has_value).map((r) => r.name);
        const changed = rows
          .filter((r) => {
            const expected = guard.expectedVersions?.get(r.name);
            return expected !== undefined && expected !== (r.has_value ? (r.version ?? 0) : 0);
          })
          .map((r) => r.name);
        if (changed.length > 0 || (withValues.length > 0 && !guard.confirmDestroyValues))
          return { removed: false, withValues, changed };
        if (names.length > 0) await dropSecrets(trx, appId, { drop: names });
        return { removed: true, withValues, changed };
      });
    },

    /** An app's outstanding links (unused, unexpired), oldest first. */
    async listLinks(appId: string): Promise<{ id: string; name: string; createdAt: Date; expiresAt: Date }[]> {
      const rows = await db
        .selectFrom("secret_links")
        .select(["id", "name", "created_at", "expires_at"])
        .where("app_id", "=", appId)
        .where("used_at", "is", null)
        .where("expires_at", ">", sql<Date>`now()`)
        .orderBy("created_at")
        .orderBy("id")
        .execute();
      return rows.map((r) => ({
        id: r.id,
        name: r.name,
        createdAt: new Date(r.created_at as unknown as string),
        expiresAt: new Date(r.expires_at),
      }));
    },

    /** Outstanding links of every app expiring within `seconds`, soonest first. */
    async expiringLinks(seconds: number): Promise<{ appId: string; name: string; expiresAt: Date }[]> {
      const rows = await db
        .selectFrom("secret_links")
        .select(["app_id", "name", "expires_at"])
        .where("used_at", "is", null)
        .where("expires_at", ">", sql<Date>`now()`)
        .where("expires_at", "<=", sql<Date>`now() + make_interval(secs => ${seconds})`)
        .orderBy("expires_at")
        .limit(100)
        .execute();
      return rows.map((r) => ({ appId: r.app_id, name: r.name, expiresAt: new Date(r.expires_at) }));
    },

    /**
     * Deletes one of the app's outstanding links: its secret's name; `used`
     * when the link has set its value (that value stays, and the link is dead
     * anyway); undefined when the app has no such link or it expired. The row
     * is locked first, so a use under way finishes before this looks.
     */
    async revokeLink(appId: string, linkId: string): Promise<{ name: string } | "used" | undefined> {
      return transact(db, async (trx) => {
        const link = await trx
          .selectFrom("secret_links")
          .select([
            "name",
            sql<boolean>`used_at IS NOT NULL`.as("used"),
            sql<boolean>`expires_at <= now()`.as("expired"),
          ])
          .where("app_id", "=", appId)
          .where("id", "=", linkId)
          .forUpdate()
          .executeTakeFirst();
        if (!link || link.expired) return undefined;
        if (link.used) return "used";
        await trx.deleteFrom("secret_links").where("app_id", "=", appId).where("id", "=", linkId).execute();
        return { name: link.name };
      });
    },

    /** The declared names of every app (or of one), by app id, in name order. */
    async declaredNames(appId?: string): Promise<Map<string, string[]>> {
      let query = db.selectFrom("secrets").select(["app_id", "name"]).orderBy("name");
      if (appId !== undefined) query = query.where("app_id", "=", appId);
      const byApp = new Map<string, string[]>();
      for (const row of await query.execute()) {
        const names = byApp.get(row.app_id);
        if (names) names.push(row.name);
        else byApp.set(row.app_id, [row.name]);
      }
      return byApp;
    },

    /** Key ids of values not under `currentKeyId` (null: a value without one). */
    async staleKeyIds(currentKeyId: string): Promise<(string | null)[]> {
      const rows = await db
        .selectFrom("secrets")
        .select(["key_id"])
        .distinct()
        .where("value_encrypted", "is not", null)
        .where("key_id", "<>", currentKeyId)
        .execute();
      return rows.map((r) => r.key_id);
    },

    /** Up to `limit` values not under `currentKeyId`, in a stable order. */
    async staleValues(currentKeyId: string, limit: number): Promise<StaleValue[]> {
      const rows = await db
        .selectFrom("secrets")
        .select(["app_id", "name", "version", "key_id", "value_encrypted"])
        .where("value_encrypted", "is not", null)
        .where("key_id", "<>", currentKeyId)
        .orderBy("app_id")
        .orderBy("name")
        .limit(limit)
        .execute();
      return rows.map((r) => ({
        appId: r.app_id,
        name: r.name,
        version: r.version,
        value: { sealed: r.value_encrypted!, keyId: r.key_id! },
      }));
    },

    /** Replaces a value re-sealed under another key, only if the row still holds what was read; true when it did. */
    async replaceSealed(stale: StaleValue, resealed: SealedValue): Promise<boolean> {
      const result = await db
        .updateTable("secrets")
        .set({ value_encrypted: resealed.sealed, key_id: resealed.keyId })
        .where("app_id", "=", stale.appId)
        .where("name", "=", stale.name)
        .where("key_id", "=", stale.value.keyId)
        .where("value_encrypted", "=", stale.value.sealed)
        .executeTakeFirst();
      return Number(result.numUpdatedRows) > 0;
    },

    /** How many values are sealed under `keyId`. */
    async countUnderKey(keyId: string): Promise<number> {
      const row = await db
        .selectFrom("secrets")
        .select((eb) => eb.fn.countAll<number>().as("n"))
        .where("key_id", "=", keyId)
        .executeTakeFirstOrThrow();
      return Number(row.n);
    },

    /** For each key id, how many values it seals and one of them (`secrets check-key` opens it). */
    async sampleUnderEachKey(): Promise<SealedUnderKey[]> {
      const rows = await db
        .selectFrom("secrets")
        .select(["app_id", "name", "version", "key_id", "value_encrypted"])
        .select(sql<number>`count(*) OVER (PARTITION BY key_id)`.as("n"))
        .distinctOn("key_id")
        .where("value_encrypted", "is not", null)
        .orderBy("key_id")
        .orderBy("app_id")
        .orderBy("name")
        .execute();
      return rows.map((r) => ({
        keyId: r.key_id ?? "(none)",
        count: Number(r.n),
        sample: {
          appId: r.app_id,
          name: r.name,
          version: r.version,
          value: { sealed: r.value_encrypted!, keyId: r.key_id ?? "(none)" },
        },
      }));
    },

    /** Key ids of stored values, to warn at start about values no configured key opens. */
    async keyIds(): Promise<string[]> {
      const rows = await db.selectFrom("secrets").select("key_id").distinct().where("key_id", "is not", null).execute();
      return rows.map((r) => r.key_id!);
    },
  };
}

export type SecretStore = ReturnType<typeof createSecretStore>;

/** The values sealed under one key: how many, and one of them to try a key on. */
export interface SealedUnderKey {
  keyId: string;
  count: number;
  sample: StaleValue;
}
