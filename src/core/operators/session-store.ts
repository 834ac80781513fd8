/**
 * Every SQL statement on the dashboard's single sign-on sessions (migration
 * 0030). A session is found by the SHA-256 of its cookie; what it grants is
 * read from its operator's row at every lookup, so a role changed, an operator
 * disabled or deleted applies to the next call of a signed-in browser.
 */
import { sql, type ColumnType, type Generated, type Kysely } from "kysely";
import type { Db } from "../database/index.ts";
import type { OperatorRole, OperatorTables } from "./operator-store.ts";

export interface OperatorSessionsTable {
  id: Generated<string>;
  session_hash: string;
  /** Null: the built-in operator "owner". */
  operator_id: string | null;
  subject: string;
  email: string | null;
  created_at: ColumnType<Date, Date | string | undefined, never>;
  expires_at: ColumnType<Date, Date | string, Date | string>;
}

type Tables = OperatorTables & { operator_sessions: OperatorSessionsTable };

/** The operator of a live session; `operatorId` null is the owner. */
interface SessionOperator {
  operatorId: string | null;
  name: string;
  role: OperatorRole;
  /** The identity that signed in: the provider's subject, and the verified e-mail it was mapped by (or null). */
  subject: string;
  email: string | null;
}

/** An enabled named operator, as single sign-on maps an identity to it. */
interface NamedOperator {
  id: string;
  name: string;
  role: OperatorRole;
  disabled: boolean;
}

export interface SessionStore {
  /** The named operator called `name`, or undefined. */
  operatorByName(name: string): Promise<NamedOperator | undefined>;
  create(session: {
    hash: string;
    operatorId: string | null;
    subject: string;
    email: string | null;
    expiresAt: Date;
  }): Promise<void>;
  /** The session's operator while the session has not expired and its operator is enabled; else undefined. */
  lookup(hash: string): Promise<SessionOperator | undefined>;
  /** Ends the session; false when there was none. */
  delete(hash: string): Promise<boolean>;
  /** Removes expired sessions, at most `limit` of them; the number removed. */
  sweepExpired(limit: number): Promise<number>;
}

export function createSessionStore(database: Db): SessionStore {
  const db: Kysely<Tables> = database.withTables<Tables>();
  return {
    async operatorByName(name) {
      const row = await db
        .selectFrom("operators")
        .select(["id", "name", "role", "disabled"])
        .where("name", "=", name)
        .executeTakeFirst();
      return row;
    },

    async create(session) {
      await db
        .insertInto("operator_sessions")
        .values({
          session_hash: session.hash,
          operator_id: session.operatorId,
          subject: session.subject,
          email: session.email,
          expires_at: session.expiresAt,
        })
        .execute();
    },

    async lookup(hash) {
      // The expiry is the database's clock, like every other expiry of the platform.
      const row = await db
        .selectFrom("operator_sessions")
        .leftJoin("operators", "operators.id", "operator_sessions.operator_id")
        .select([
          "operator_sessions.operator_id",
          "operator_sessions.subject",
          "operator_sessions.email",
          "operators.name",
          "operators.role",
          "operators.disabled",
        ])
        .where("operator_sessions.session_hash", "=", hash)
        .where("operator_sessions.expires_at", ">", sql<Date>`now()`)
        .executeTakeFirst();
      if (!row) return undefined;
      const identity = { subject: row.subject, email: row.email };
      if (row.operator_id === null) return { operatorId: null, name: "owner", role: "admin", ...identity };
      if (row.name === null || row.role === null || row.disabled) return undefined;
      return { operatorId: row.operator_id, name: row.name, role: row.role, ...identity };
    },

    async delete(hash) {
      const result = await db.deleteFrom("operator_sessions").where("session_hash", "=", hash).executeTakeFirst();
      return Number(result.numDeletedRows) > 0;
    },

    async sweepExpired(limit) {
      const result = await db
        .deleteFrom("operator_sessions")
        .where(
          "id",
          "in",
          db
            .selectFrom("operator_sessions")
            .select("id")
            .where("expires_at", "<=", sql<Date>`now()`)
            .limit(limit),
        )
        .executeTakeFirst();
      return Number(result.numDeletedRows);
    },
  };
}
