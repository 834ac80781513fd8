/**
 * Tests that look at rows directly see every table through this view; the
 * service itself never does (each store knows only its own tables).
 */
import type { Kysely } from "kysely";
import type { AppTables } from "../../src/core/apps/app-store.ts";
import type { Db } from "../../src/core/database/index.ts";
import type { QuotaTables } from "../../src/core/quotas/quota-store.ts";
import type { EventTypeTables } from "../../src/analytics/event-type-store.ts";
import type { AnalyticsEventTables } from "../../src/analytics/sql-event-store.ts";
import type { MailTables } from "../../src/mail/mail-store.ts";
import type { QueueTables } from "../../src/queues/queue-store.ts";
import type { SecretTables } from "../../src/secrets/secret-store.ts";
import type { OperatorTables } from "../../src/core/operators/operator-store.ts";
import type { AuditTables } from "../../src/admin/audit-store.ts";

export type AllTables = AppTables &
  QuotaTables &
  EventTypeTables &
  AnalyticsEventTables &
  MailTables &
  QueueTables &
  SecretTables &
  OperatorTables &
  AuditTables;

export function tables(db: Db): Kysely<AllTables> {
  return db.withTables<AllTables>();
}
