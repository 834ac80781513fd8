/**
 * The mail log's SQL, in one place: one row per send attempt, always scoped
 * by the app id. Newest first is by the identity column, which follows insert
 * order (timestamps can tie).
 */
import { sql, type Generated, type Kysely } from "kysely";
import { inTransaction, type Db, type InTransaction, type Timestamp } from "../core/database/index.ts";

/** One send attempt, by either provider. */
interface MailLogTable {
  id: Generated<number>;
  app_id: string;
  to_address: string;
  from_address: string;
  subject: string;
  /** Kept only for the outbox, where the row is the message; null for SES. */
  body_text: string | null;
  status: MailLogStatus;
  provider: string;
  provider_message_id: string;
  created_at: Timestamp;
}

export type MailTables = {
  mail_log: MailLogTable;
};

/**
 * `sent`: the provider took it; `stored`: the outbox holds it; `failed`: not sent (refused, or the provider was
 * never reached); `unconfirmed`: the provider failed after taking it (SES 5xx, no answer), so it may have been.
 */
export type MailLogStatus = "sent" | "stored" | "failed" | "unconfirmed";

export interface MailLogEntry {
  to: string;
  from: string;
  subject: string;
  /** Kept only where the log row is the message (the outbox). */
  text: string | null;
  status: MailLogStatus;
  provider: string;
  providerMessageId: string;
}

export interface MailLogRecord extends MailLogEntry {
  /** The log's id (a bigint, as text). */
  id: string;
  at: Date;
}

/** What the operator searches the mail log by; every field optional but the page size. */
export interface MailSearch {
  /** A case-insensitive substring of the recipient or the subject. */
  query?: string | undefined;
  status?: MailLogStatus | undefined;
  since?: Date | undefined;
  until?: Date | undefined;
  /** Entries with a smaller id than this (the page token: the last id of the previous page). */
  beforeId?: string | undefined;
  limit: number;
}

export interface MailStore {
  /**
   * Logs one attempt; `answerIn` (an idempotent answer) runs in the same
   * transaction, so for the outbox, whose row is the message, the message and
   * its answer commit together.
   */
  record(appId: string, entry: MailLogEntry, answerIn?: InTransaction): Promise<void>;
  /** The app's entries that match, newest first. */
  search(appId: string, search: MailSearch): Promise<MailLogRecord[]>;
  /** The app's most recent `limit` entries, newest first. */
  list(appId: string, limit: number): Promise<MailLogRecord[]>;
  /** Deletes up to `batch` of the app's entries older than `before`; how many. */
  deleteOlderThan(appId: string, before: Date, batch: number): Promise<number>;
  /** One entry of the app's log, or undefined when the app has none by that id. */
  get(appId: string, id: string): Promise<MailLogRecord | undefined>;
}

const COLUMNS = [
  "id",
  "to_address",
  "from_address",
  "subject",
  "body_text",
  "status",
  "provider",
  "provider_message_id",
  "created_at",
] as const;

/** A row as read (raw SQL gives the identity as a string, or a bigint; the time as a Date, or text). */
type MailLogRow = Omit<MailLogTable, "id" | "app_id" | "created_at"> & {
  id: string | number | bigint;
  created_at: Date | string;
};

function recordFromRow(r: MailLogRow): MailLogRecord {
  return {
    id: String(r.id),
    to: r.to_address,
    from: r.from_address,
    subject: r.subject,
    text: r.body_text,
    status: r.status,
    provider: r.provider,
    providerMessageId: r.provider_message_id,
    at: new Date(r.created_at),
  };
}

export function createMailStore(database: Db): MailStore {
  const db: Kysely<MailTables> = database.withTables<MailTables>();
  return {
    async record(appId, entry, answerIn) {
      if (answerIn)
        return inTransaction(database, async (trx) => {
          await createMailStore(trx).record(appId, entry);
          await answerIn(trx);
        });
      await db
        .insertInto("mail_log")
        .values({
          app_id: appId,
          to_address: entry.to,
          from_address: entry.from,
          subject: entry.subject,
          body_text: entry.text,
          status: entry.status,
          provider: entry.provider,
          provider_message_id: entry.providerMessageId,
        })
        .execute();
    },

    async deleteOlderThan(appId, before, batch) {
      const result = await db
        .deleteFrom("mail_log")
        .where("id", "in", (eb) =>
          eb
            .selectFrom("mail_log")
            .select("id")
            .where("app_id", "=", appId)
            .where("created_at", "<", before)
            .limit(batch)
            .forUpdate()
            .skipLocked(),
        )
        .executeTakeFirst();
      return Number(result.numDeletedRows);
    },

    async list(appId, limit) {
      const rows = await db
        .selectFrom("mail_log")
        .select(COLUMNS)
        .where("app_id", "=", appId)
        .orderBy("id", "desc")
        .limit(limit)
        .execute();
      return rows.map(recordFromRow);
    },

    async search(appId, search) {
      let query = db.selectFrom("mail_log").select(COLUMNS).where("app_id", "=", appId);
      if (search.query) {
        // ILIKE with the pattern characters escaped: the operator's text is matched literally.
        const pattern = `%${search.query.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
        query = query.where((eb) => eb.or([eb("to_address", "ilike", pattern), eb("subject", "ilike", pattern)]));
      }
      if (search.status) query = query.where("status", "=", search.status);
      if (search.since) query = query.where("created_at", ">=", search.since);
      if (search.until) query = query.where("created_at", "<", search.until);
      if (search.beforeId) query = query.where("id", "<", sql<number>`${search.beforeId}::bigint`);
      const rows = await query.orderBy("id", "desc").limit(search.limit).execute();
      return rows.map(recordFromRow);
    },

    async get(appId, id) {
      const row = await db
        .selectFrom("mail_log")
        .select(COLUMNS)
        .where("app_id", "=", appId)
        .where("id", "=", id as never)
        .executeTakeFirst();
      return row ? recordFromRow(row) : undefined;
    },
  };
}
