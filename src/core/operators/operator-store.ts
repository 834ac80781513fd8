/**
 * Every SQL statement on operators and their tokens (migration 0016), and the
 * two tables' types. The authenticator reads through it (`lookupToken`), the
 * admin API writes through it. Tokens are stored only as their SHA-256.
 */
import { sql, type ColumnType, type Generated, type Kysely } from "kysely";
import type { Db } from "../database/index.ts";
import { deleteTokenIn, insertTokenIn, listTokensIn, markTokenUsedIn, type TokenInfo } from "../apps/app-store.ts";

export type OperatorRole = "admin" | "viewer";

interface OperatorsTable {
  id: Generated<string>;
  name: string;
  role: OperatorRole;
  disabled: Generated<boolean>;
  created_at: ColumnType<Date, Date | string | undefined, never>;
}

interface OperatorTokensTable {
  id: Generated<string>;
  operator_id: string;
  token_hash: string;
  label: string;
  created_at: ColumnType<Date, Date | string | undefined, never>;
  last_used_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
}

export type OperatorTables = {
  operators: OperatorsTable;
  operator_tokens: OperatorTokensTable;
};

/** An operator as the admin API shows it. */
export interface OperatorRecord {
  id: string;
  name: string;
  role: OperatorRole;
  disabled: boolean;
  createdAt: Date;
  /** Its tokens' latest use (coarse); null when never used. */
  lastUsedAt: Date | null;
}

/** Who an operator token belongs to, as the authenticator needs it. */
interface OperatorTokenRow {
  tokenId: string;
  operatorId: string;
  name: string;
  role: OperatorRole;
}

export interface OperatorStore {
  /** Undefined when the name is taken. */
  create(name: string, role: OperatorRole): Promise<OperatorRecord | undefined>;
  /** Undefined when there is no such operator. */
  get(id: string): Promise<OperatorRecord | undefined>;
  list(): Promise<OperatorRecord[]>;
  /** Undefined when there is no such operator. */
  update(id: string, changes: { role?: OperatorRole; disabled?: boolean }): Promise<OperatorRecord | undefined>;
  /** False when there was no such operator; its tokens go with it. */
  delete(id: string): Promise<boolean>;
  insertToken(operatorId: string, tokenHash: string, label: string): Promise<string>;
  /** The token's operator id, or undefined when there was no such token. */
  deleteToken(tokenId: string): Promise<string | undefined>;
  listTokens(operatorId: string): Promise<TokenInfo[]>;
  /** The enabled operator holding this token hash. */
  lookupToken(tokenHash: string): Promise<OperatorTokenRow | undefined>;
  /** Marks a token used now, unless it was marked within the last `intervalSeconds`. */
  markTokenUsed(tokenId: string, intervalSeconds: number): Promise<void>;
}

const toDate = (v: Date | string | null): Date | null => (v === null ? null : new Date(v));

export function createOperatorStore(database: Db): OperatorStore {
  const db: Kysely<OperatorTables> = database.withTables<OperatorTables>();
  const select = () =>
    db.selectFrom("operators").select([
      "operators.id",
      "operators.name",
      "operators.role",
      "operators.disabled",
      "operators.created_at",
      (eb) =>
        eb
          .selectFrom("operator_tokens")
          .select(sql<Date | null>`max(operator_tokens.last_used_at)`.as("m"))
          .whereRef("operator_tokens.operator_id", "=", "operators.id")
          .as("last_used_at"),
    ]);
  type Row = Awaited<ReturnType<ReturnType<typeof select>["executeTakeFirstOrThrow"]>>;
  const record = (r: Row): OperatorRecord => ({
    id: r.id,
    name: r.name,
    role: r.role,
    disabled: r.disabled,
    createdAt: new Date(r.created_at),
    lastUsedAt: toDate(r.last_used_at),
  });

  const store: OperatorStore = {
    async create(name, role) {
      const row = await db
        .insertInto("operators")
        .values({ name, role })
        .onConflict((oc) => oc.column("name").doNothing())
        .returning("id")
        .executeTakeFirst();
      return row ? store.get(row.id) : undefined;
    },

    async get(id) {
      const row = await select().where("operators.id", "=", id).executeTakeFirst();
      return row ? record(row) : undefined;
    },

    async list() {
      return (await select().orderBy("operators.name").execute()).map(record);
    },

    async update(id, changes) {
      const set: { role?: OperatorRole; disabled?: boolean } = {};
      if (changes.role !== undefined) set.role = changes.role;
      if (changes.disabled !== undefined) set.disabled = changes.disabled;
      if (Object.keys(set).length > 0) await db.updateTable("operators").set(set).where("id", "=", id).execute();
      return store.get(id);
    },

    async delete(id) {
      const result = await db.deleteFrom("operators").where("id", "=", id).executeTakeFirst();
      return Number(result.numDeletedRows) > 0;
    },

    insertToken(operatorId, tokenHash, label) {
      return insertTokenIn(db, "operator_tokens", operatorId, tokenHash, label);
    },

    deleteToken(tokenId) {
      return deleteTokenIn(db, "operator_tokens", tokenId);
    },

    listTokens(operatorId) {
      return listTokensIn(db, "operator_tokens", operatorId);
    },

    async lookupToken(tokenHash) {
      const row = await db
        .selectFrom("operator_tokens")
        .innerJoin("operators", "operators.id", "operator_tokens.operator_id")
        .select(["operator_tokens.id as token_id", "operators.id", "operators.name", "operators.role"])
        .where("operator_tokens.token_hash", "=", tokenHash)
        .where("operators.disabled", "=", false)
        .executeTakeFirst();
      return row ? { tokenId: row.token_id, operatorId: row.id, name: row.name, role: row.role } : undefined;
    },

    async markTokenUsed(tokenId, intervalSeconds) {
      await markTokenUsedIn(db, "operator_tokens", tokenId, intervalSeconds);
    },
  };
  return store;
}
