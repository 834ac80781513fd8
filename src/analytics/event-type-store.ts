/**
 * Event types, always in the platform database (whichever store holds the
 * events), so registering and listing types never depend on the analytics
 * store. Every SQL statement on `analytics_event_types` lives here.
 */
import { sql, type ColumnType, type Generated, type Kysely } from "kysely";
import { queryPrepared, type Db, type Timestamp } from "../core/database/index.ts";

interface AnalyticsEventTypesTable {
  app_id: string;
  name: string;
  /** Property name -> declared kind (`string`, `number`, `boolean`). */
  properties: ColumnType<Record<string, string>, string, string>;
  created_at: Generated<Timestamp>;
  updated_at: Generated<Timestamp>;
}

export type EventTypeTables = {
  analytics_event_types: AnalyticsEventTypesTable;
};

export type PropertyKindName = "string" | "number" | "boolean";

export interface EventTypeRecord {
  name: string;
  properties: Record<string, PropertyKindName>;
  createdAt: Date;
  updatedAt: Date;
}

interface Row {
  name: string;
  properties: Record<string, PropertyKindName> | string;
  created_at: Date;
  updated_at: Date;
}

function fromRow(row: Row): EventTypeRecord {
  return {
    name: row.name,
    properties:
      typeof row.properties === "string"
        ? (JSON.parse(row.properties) as Record<string, PropertyKindName>)
        : row.properties,
    createdAt: new Date(row.created_at),
    updatedAt: new Date(row.updated_at),
  };
}

export interface EventTypeStore {
  /** Creates the type or replaces its properties (`createdAt` stays). */
  register(appId: string, name: string, properties: Record<string, PropertyKindName>): Promise<EventTypeRecord>;
  list(appId: string): Promise<EventTypeRecord[]>;
  /** The named types of the app that exist. */
  get(appId: string, names: readonly string[]): Promise<Map<string, EventTypeRecord>>;
}

/** `list`'s statement. */
const LIST_TYPES = `SELECT name, properties, created_at, updated_at FROM analytics_event_types
  WHERE app_id = $1::uuid ORDER BY name`;

export function createEventTypeStore(database: Db): EventTypeStore {
  const db: Kysely<EventTypeTables> = database.withTables<EventTypeTables>();
  return {
    async register(appId, name, properties) {
      const result = await sql<Row>`
        INSERT INTO analytics_event_types AS t (app_id, name, properties)
        VALUES (${appId}::uuid, ${name}, ${JSON.stringify(properties)}::jsonb)
        ON CONFLICT (app_id, name) DO UPDATE SET properties = excluded.properties, updated_at = clock_timestamp()
        RETURNING name, properties, created_at, updated_at`.execute(db);
      return fromRow(result.rows[0]);
    },

    async list(appId) {
      // Every ListEventTypes reads this: run without the query builder (`queryPrepared`).
      const rows = await queryPrepared<Row>(database, LIST_TYPES, [appId]);
      return rows.map(fromRow);
    },

    async get(appId, names) {
      const result = await sql<Row>`
        SELECT name, properties, created_at, updated_at FROM analytics_event_types
        WHERE app_id = ${appId}::uuid AND name = ANY(${[...names]}::text[])`.execute(db);
      return new Map(result.rows.map((row) => [row.name, fromRow(row)]));
    },
  };
}
