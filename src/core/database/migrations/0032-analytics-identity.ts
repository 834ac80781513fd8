/**
 * Analytics identity and numbers, for unique users, funnels and arithmetic
 * (docs/analytics.md "Aggregations, filters and breakdowns"):
 * - `analytics_events.distinct_id`: who did it (an event's `distinctId`, 1 to
 *   200 characters, or null). Indexed with the type and the time, only where
 *   set: unique users and funnels read the ids of one type over a range, and an
 *   event without one costs the index nothing.
 * - `analytics_events.numbers`: the values of the event's `number` properties
 *   as JSON numbers, beside their stored strings (`properties`, as the API
 *   promises). Sums, averages and comparisons read them; casting `properties`
 *   instead would fail on an event logged while the property was declared a
 *   string. Existing events get theirs from the kinds their types declare now
 *   (values that do not read as a number are left out).
 */
import { sql, type Kysely } from "kysely";

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE analytics_events ADD COLUMN distinct_id text, ADD COLUMN numbers jsonb`.execute(db);
  await sql`
    UPDATE analytics_events e SET numbers = n.numbers
    FROM (
      SELECT e2.ctid AS id, jsonb_object_agg(d.k, (e2.properties->>d.k)::float8) AS numbers
      FROM analytics_events e2
      JOIN analytics_event_types t ON t.app_id = e2.app_id AND t.name = e2.type
      CROSS JOIN LATERAL jsonb_each_text(t.properties) AS d(k, kind)
      WHERE d.kind = 'number'
        AND (e2.properties->>d.k) ~ '^-?[0-9]+(\\.[0-9]+)?([eE][-+]?[0-9]+)?$'
      GROUP BY e2.ctid
    ) n
    WHERE e.ctid = n.id`.execute(db);
  await sql`
    CREATE INDEX analytics_events_app_type_distinct ON analytics_events (app_id, type, distinct_id, at)
    WHERE distinct_id IS NOT NULL`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP INDEX analytics_events_app_type_distinct`.execute(db);
  await sql`ALTER TABLE analytics_events DROP COLUMN distinct_id, DROP COLUMN numbers`.execute(db);
}
