/**
 * Every SQL statement on the audit log (migration 0017), the admin
 * facility's one table. An entry is written through the transaction of the
 * change it records (the auditor writes it on the change's unit of work), so a
 * change is never without its record; refused and failed attempts are
 * written on their own.
 *
 * Entries become visible in the order of their ids and times: a reader that
 * pages newest first (`id` below the last seen) or polls by time never passes
 * over an entry committed later with a smaller id or an earlier time. Each
 * entry is written holding a transaction-scoped advisory lock (`audit-log`)
 * that is taken before its id is drawn and kept until its transaction ends,
 * and its time is the clock when it is written, not when its transaction
 * began. The entry is its change's last statement (the auditor writes it
 * once the change is done), so the lock is held only for the commit and its holder
 * waits on nothing else: it cannot be part of a deadlock.
 */
import { sql, type ColumnType, type Kysely } from "kysely";
import type { Db } from "../core/database/index.ts";

export type AuditOutcome = "ok" | "denied" | "failed";

interface AuditLogTable {
  id: ColumnType<string, never, never>;
  at: ColumnType<Date, never, never>;
  operator_id: string;
  operator_name: string;
  action: string;
  app_id: string | null;
  app_name: string;
  request_id: string;
  outcome: AuditOutcome;
  detail: ColumnType<Record<string, unknown>, string, never>;
}

export type AuditTables = { audit_log: AuditLogTable };

export interface AuditEntryInput {
  operatorId: string;
  operatorName: string;
  action: string;
  appId?: string | undefined;
  appName?: string | undefined;
  requestId: string;
  outcome: AuditOutcome;
  /** What changed; never a secret value or a token. */
  detail: Record<string, unknown>;
}

interface AuditEntryRecord extends Required<AuditEntryInput> {
  id: string;
  at: Date;
}

interface AuditFilter {
  appId?: string | undefined;
  operatorId?: string | undefined;
  action?: string | undefined;
  since?: Date | undefined;
  until?: Date | undefined;
  /** Entries with a smaller id than this (the page token). */
  beforeId?: string | undefined;
  limit: number;
}

export interface AuditStore {
  record(entry: AuditEntryInput): Promise<void>;
  /** Newest first. */
  list(filter: AuditFilter): Promise<AuditEntryRecord[]>;
  /** Deletes up to `limit` entries older than `cutoff`; how many. */
  deleteOlderThan(cutoff: Date, limit: number): Promise<number>;
}

/**
 * What PostgreSQL's text and jsonb cannot hold, NUL, written as the JSON
 * escape it was sent as (`\u0000`). The log records what a caller typed, and a
 * refused call is what such input makes: the entry of a `CreateApp` named
 * "\u0000" must not be lost because its name cannot be stored. (A lone
 * surrogate never gets this far: Connect's JSON form refuses it and the binary
 * form cannot carry one.)
 */
function storableText(s: string): string {
  return s.replaceAll("\u0000", "\\u0000");
}

function storableValue(value: unknown): unknown {
  if (typeof value === "string") return storableText(value);
  if (Array.isArray(value)) return value.map(storableValue);
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [storableText(k), storableValue(v)]));
  }
  return value;
}

function storable(entry: AuditEntryInput): AuditEntryInput {
  return {
    ...entry,
    operatorName: storableText(entry.operatorName),
    action: storableText(entry.action),
    appName: entry.appName === undefined ? undefined : storableText(entry.appName),
    requestId: storableText(entry.requestId),
    detail: storableValue(entry.detail) as Record<string, unknown>,
  };
}

export function createAuditStore(database: Db): AuditStore {
  const db: Kysely<AuditTables> = database.withTables<AuditTables>();
  return {
    async record(input) {
      const entry = storable(input);
      await sql`
        WITH turn AS (SELECT pg_advisory_xact_lock(hashtextextended('audit-log', 0)))
        INSERT INTO audit_log (at, operator_id, operator_name, action, app_id, app_name, request_id, outcome, detail)
        SELECT clock_timestamp(), ${entry.operatorId}, ${entry.operatorName}, ${entry.action}, ${entry.appId ?? null}::uuid,
               ${entry.appName ?? ""}, ${entry.requestId}, ${entry.outcome}, ${JSON.stringify(entry.detail)}::jsonb
        FROM turn`.execute(db);
    },

    async list(filter) {
      let query = db.selectFrom("audit_log").selectAll().orderBy("id", "desc").limit(filter.limit);
      if (filter.appId !== undefined) query = query.where("app_id", "=", filter.appId);
      if (filter.operatorId !== undefined) query = query.where("operator_id", "=", filter.operatorId);
      if (filter.action !== undefined) query = query.where("action", "=", filter.action);
      if (filter.since !== undefined) query = query.where("at", ">=", filter.since as never);
      if (filter.until !== undefined) query = query.where("at", "<", filter.until as never);
      if (filter.beforeId !== undefined) query = query.where("id", "<", filter.beforeId as never);
      const rows = await query.execute();
      return rows.map((r) => ({
        id: String(r.id),
        at: new Date(r.at),
        operatorId: r.operator_id,
        operatorName: r.operator_name,
        action: r.action,
        appId: r.app_id ?? "",
        appName: r.app_name,
        requestId: r.request_id,
        outcome: r.outcome,
        detail: typeof r.detail === "string" ? (JSON.parse(r.detail) as Record<string, unknown>) : r.detail,
      }));
    },

    async deleteOlderThan(cutoff, limit) {
      const result = await db
        .deleteFrom("audit_log")
        .where("id", "in", (eb) =>
          eb
            .selectFrom("audit_log")
            .select("id")
            .where("at", "<", sql<Date>`${cutoff}`)
            .limit(limit),
        )
        .executeTakeFirst();
      return Number(result.numDeletedRows);
    },
  };
}
