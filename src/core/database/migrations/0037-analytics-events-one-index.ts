/**
 * The raw events keep one index (docs/analytics.md "What is indexed and rolled
 * up"): the partial `(app_id, type, distinct_id, at)` index of migration 0032,
 * made again by 0036, goes. Every event with an id is a key in it, in id
 * order, so each insert lands on a page of its own (ids arrive in no order):
 * it cost more than a third of PostgreSQL's CPU per ingested event (about 4.7
 * µs of 11 in bench:analytics). No statement of the store needs it: unique
 * users and each funnel step's users read `(app_id, type, at) INCLUDE
 * (distinct_id)` (index-only), and so can a condition on `distinctId`, over
 * the range's entries of the type: the trade, about 17 ms for 30 days of a
 * type with 170,000 events, against well under a millisecond through the
 * dropped index.
 */
import { sql, type Kysely } from "kysely";

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`DROP INDEX analytics_events_app_type_distinct`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE INDEX analytics_events_app_type_distinct ON analytics_events (app_id, type, distinct_id, at)
    WHERE distinct_id IS NOT NULL`.execute(db);
}
