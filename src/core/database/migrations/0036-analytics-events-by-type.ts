/**
 * The raw events laid out for the query extensions (docs/analytics.md "What is
 * indexed and rolled up"):
 * - `analytics_events` is partitioned by hash of (app_id, type) into 16
 *   partitions. Events arrive in time order with every type mixed, so a type's
 *   events over a month lay scattered over every page of that month: reading
 *   one property of 170,000 events of one type read some 75,000 pages. In a
 *   partition of its own (shared with the few types that hash alike) the same
 *   events lie on about a sixteenth of the pages. A query names its app and
 *   type, so it reads one partition; inserts are routed row by row.
 * - the `(app_id, type, at)` index carries `distinct_id` in its leaf entries
 *   (`INCLUDE`): unique users per bucket and a funnel's steps read only the app,
 *   type, time and id of a type's events over a range, so they are answered from
 *   the index alone (an index-only scan, once the pages are all-visible). The
 *   old index had the same keys, so it goes: one index to maintain per insert,
 *   as before. The partial `(app_id, type, distinct_id, at)` index of migration
 *   0032 is made again on the new table.
 * Existing events are moved in one statement (the table is rewritten once).
 */
import { sql, type Kysely } from "kysely";

const PARTITIONS = 16;

async function createEvents(db: Kysely<unknown>, partitioned: boolean): Promise<void> {
  await sql`
    CREATE TABLE analytics_events (
      app_id uuid NOT NULL,
      type text NOT NULL,
      at timestamptz NOT NULL,
      properties jsonb NOT NULL,
      distinct_id text,
      numbers jsonb
    )${partitioned ? sql` PARTITION BY HASH (app_id, type)` : sql``}`.execute(db);
  if (partitioned)
    for (let i = 0; i < PARTITIONS; i++)
      await sql`
        CREATE TABLE ${sql.table(`analytics_events_p${i}`)} PARTITION OF analytics_events
        FOR VALUES WITH (MODULUS ${sql.lit(PARTITIONS)}, REMAINDER ${sql.lit(i)})`.execute(db);
}

async function moveEvents(db: Kysely<unknown>): Promise<void> {
  await sql`
    INSERT INTO analytics_events (app_id, type, at, properties, distinct_id, numbers)
    SELECT app_id, type, at, properties, distinct_id, numbers FROM analytics_events_before
    ORDER BY at`.execute(db);
  await sql`DROP TABLE analytics_events_before`.execute(db);
}

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE analytics_events RENAME TO analytics_events_before`.execute(db);
  await sql`DROP INDEX analytics_events_app_type_at, analytics_events_app_type_distinct`.execute(db);
  await createEvents(db, true);
  await moveEvents(db);
  await sql`
    CREATE INDEX analytics_events_app_type_at_id ON analytics_events (app_id, type, at) INCLUDE (distinct_id)`.execute(
    db,
  );
  await sql`
    CREATE INDEX analytics_events_app_type_distinct ON analytics_events (app_id, type, distinct_id, at)
    WHERE distinct_id IS NOT NULL`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE analytics_events RENAME TO analytics_events_before`.execute(db);
  await createEvents(db, false);
  await moveEvents(db);
  await sql`CREATE INDEX analytics_events_app_type_at ON analytics_events (app_id, type, at)`.execute(db);
  await sql`
    CREATE INDEX analytics_events_app_type_distinct ON analytics_events (app_id, type, distinct_id, at)
    WHERE distinct_id IS NOT NULL`.execute(db);
}
