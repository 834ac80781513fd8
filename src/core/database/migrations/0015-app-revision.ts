import { sql, type Kysely } from "kysely";

/**
 * The app record's revision: bumped by every change of the record (settings,
 * limits, the blueprint's secret names), so a writer that loaded revision N
 * can ask that its change apply only if nobody changed the app since
 * (`expected_revision`), instead of silently overwriting a concurrent edit.
 * And an id for each secret link, so an operator can list and revoke links
 * without ever seeing (or being sent) the link's token or its hash.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE apps ADD COLUMN revision bigint NOT NULL DEFAULT 1`.execute(db);
  await sql`ALTER TABLE secret_links ADD COLUMN id uuid NOT NULL DEFAULT gen_random_uuid() UNIQUE`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE secret_links DROP COLUMN id`.execute(db);
  await sql`ALTER TABLE apps DROP COLUMN revision`.execute(db);
}
