import { sql, type Kysely } from "kysely";

/**
 * Every change to an app or a token announces itself on `pb_auth_changed`
 * when it commits, whoever made it (any instance, the CLI, a hand-run SQL
 * statement), so every instance can forget the tokens it remembers.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE FUNCTION pb_auth_changed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      PERFORM pg_notify('pb_auth_changed', TG_TABLE_NAME);
      RETURN NULL;
    END $$`.execute(db);
  await sql`CREATE TRIGGER apps_auth_changed AFTER UPDATE OR DELETE ON apps FOR EACH STATEMENT EXECUTE FUNCTION pb_auth_changed()`.execute(
    db,
  );
  await sql`CREATE TRIGGER app_tokens_auth_changed AFTER UPDATE OR DELETE ON app_tokens FOR EACH STATEMENT EXECUTE FUNCTION pb_auth_changed()`.execute(
    db,
  );
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TRIGGER app_tokens_auth_changed ON app_tokens`.execute(db);
  await sql`DROP TRIGGER apps_auth_changed ON apps`.execute(db);
  await sql`DROP FUNCTION pb_auth_changed()`.execute(db);
}
