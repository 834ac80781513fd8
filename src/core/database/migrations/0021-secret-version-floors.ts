/**
 * `secret_version_floors`: the last version a dropped secret name had, per
 * app and name, so that a name declared again counts on from it.
 *
 * A secret's `version` changes when its value is set anew (docs/api.md), and apps (and the
 * client's cache) tell a new value from the one they hold by it. Dropping a
 * name deletes its row, so the next value of that name started again at
 * version 1: an app that had read version 1 of the old value saw "version 1"
 * again and kept serving the destroyed value. The row removal now leaves the
 * version here, and the next set takes the greater of the row's and this one
 * plus one. The floors go with their app.
 */
import { sql, type Kysely } from "kysely";

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE TABLE secret_version_floors (
      app_id uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
      name text NOT NULL,
      version integer NOT NULL,
      PRIMARY KEY (app_id, name)
    )`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE secret_version_floors`.execute(db);
}
