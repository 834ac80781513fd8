/**
 * The mail of one UTC day across apps, by status, from `mail_days` (kept by a
 * trigger on `mail_log`, migration 0028): a read of a few rows, never a count
 * over the log. For the operator's overview.
 */
import { sql } from "kysely";
import type { Db } from "../core/database/index.ts";
import { DAY_MS } from "../core/time.ts";

type MailDayTables = {
  mail_days: { day: string; status: string; slot: number; n: number };
};

/** How many days of `mail_days` are kept. */
const MAIL_DAYS_KEPT = 7;

export interface MailDayStore {
  /** Mail logged on `day` (YYYY-MM-DD) per status. */
  onDay(day: string): Promise<Map<string, number>>;
  /** Deletes the days older than `MAIL_DAYS_KEPT`; how many rows. */
  prune(now?: number): Promise<number>;
}

export function createMailDayStore(database: Db): MailDayStore {
  const db = database.withTables<MailDayTables>();
  return {
    async onDay(day) {
      const { rows } = await sql<{ status: string; n: string | number }>`
        SELECT status, sum(n) AS n FROM mail_days WHERE day = ${day}::date GROUP BY status`.execute(db);
      return new Map(rows.map((r) => [r.status, Number(r.n)]));
    },
    async prune(now = Date.now()) {
      const before = new Date(now - MAIL_DAYS_KEPT * DAY_MS).toISOString().slice(0, 10);
      const r = await sql`DELETE FROM mail_days WHERE day < ${before}::date`.execute(db);
      return Number(r.numAffectedRows ?? 0n);
    },
  };
}
