/**
 * `queue_messages.trace_parent`: the W3C `traceparent` of the span that put the
 * message, when tracing is on (`OTEL_EXPORTER_OTLP_ENDPOINT`), so the span of
 * the consume that receives it links back to the put (docs/operations.md#traces).
 * Nullable and without a default: adding it rewrites no row, and a server
 * that does not trace never writes it.
 */
import { sql, type Kysely } from "kysely";

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE queue_messages ADD COLUMN trace_parent text`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE queue_messages DROP COLUMN trace_parent`.execute(db);
}
