import { sql, type Kysely } from "kysely";

/** What every instance on one database must agree on: the secrets key's id and the admin token's hash. */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable("platform_settings")
    .addColumn("name", "text", (c) => c.primaryKey())
    .addColumn("value", "text", (c) => c.notNull())
    .addColumn("updated_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable("platform_settings").execute();
}
