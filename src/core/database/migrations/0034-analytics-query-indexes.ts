/**
 * The query extensions' index (docs/analytics.md "What is indexed and rolled
 * up"): `analytics_events (app_id, type, at)` now carries `distinct_id` in its
 * leaf entries (`INCLUDE`). Unique users per bucket and a funnel's steps read
 * only the app, type, time and id of a type's events over a range: with the id
 * in the index they are answered from the index alone (an index-only scan,
 * once the pages are marked all-visible), without visiting the table's pages,
 * where a type's events lie scattered among every other type's. The old index
 * had the same keys, so it goes: one index to maintain per insert, as before.
 */
import { sql, type Kysely } from "kysely";

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE INDEX analytics_events_app_type_at_id ON analytics_events (app_id, type, at) INCLUDE (distinct_id)`.execute(
    db,
  );
  await sql`DROP INDEX analytics_events_app_type_at`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`CREATE INDEX analytics_events_app_type_at ON analytics_events (app_id, type, at)`.execute(db);
  await sql`DROP INDEX analytics_events_app_type_at_id`.execute(db);
}
