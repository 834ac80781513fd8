/**
 * Runs the migrations of `migrations/`, in name order. Migrations only move
 * forward (docs/compatibility.md): a database that records a migration this
 * code does not know was migrated by a newer version, and is refused with one
 * line before anything runs, rather than served by code that does not know its
 * schema.
 */
import { createRequire } from "node:module";
import { inspect } from "node:util";
import { sql, type Kysely } from "kysely";
import { Migrator, type Migration } from "kysely/migration";
import { migrations } from "./migrations/index.ts";

const { version } = createRequire(import.meta.url)("../../../package.json") as { version: string };

/** Kysely's own table of applied migrations. */
const MIGRATION_TABLE = "kysely_migration";

/** The database was migrated by a newer version of this service: nothing was changed. */
export class NewerDatabaseError extends Error {
  override readonly name = "NewerDatabaseError";
  readonly unknownMigrations: string[];
  constructor(unknown: string[]) {
    super(
      `database: migrated by a newer version of platform-batteries (migration ${unknown.join(", ")} ${unknown.length === 1 ? "is" : "are"} unknown to ${version}); run that version or a newer one`,
    );
    this.unknownMigrations = unknown;
  }
}

/** The names of the migrations applied to `db`; none when it was never migrated. */
export async function appliedMigrations(db: Kysely<Record<never, never>>): Promise<string[]> {
  const { rows: found } = await sql<{
    relation: string | null;
  }>`SELECT to_regclass(${MIGRATION_TABLE})::text AS relation`.execute(db);
  if (!found[0]?.relation) return [];
  const { rows } = await sql<{ name: string }>`SELECT name FROM ${sql.table(MIGRATION_TABLE)} ORDER BY name`.execute(
    db,
  );
  return rows.map((r) => r.name);
}

/** Throws `NewerDatabaseError` when `applied` names a migration this code does not have. */
function checkNotNewer(applied: readonly string[]): void {
  const unknown = applied.filter((name) => !Object.hasOwn(migrations, name));
  if (unknown.length > 0) throw new NewerDatabaseError(unknown);
}

/** Runs every pending migration; safe to call from several instances at once (Kysely takes a lock). */
export async function migrate(db: Kysely<Record<never, never>>): Promise<void> {
  let applied: string[];
  try {
    applied = await appliedMigrations(db);
  } catch (err) {
    throw new Error(`database: cannot run migrations: ${describeError(err)}`, { cause: err });
  }
  checkNotNewer(applied);
  const migrator = new Migrator({
    db,
    provider: { getMigrations: (): Promise<Record<string, Migration>> => Promise.resolve(migrations) },
  });
  const { error, results } = await migrator.migrateToLatest();
  if (error) {
    // A newer version migrated the database between the check above and Kysely's lock.
    const missing = /previously executed migration (\S+) is missing/.exec(describeError(error))?.[1];
    if (missing) throw new NewerDatabaseError([missing]);
    const failed = results?.find((r) => r.status === "Error")?.migrationName;
    const reason = describeError(error);
    // No migration ran: the database itself could not be reached.
    throw new Error(failed ? `migration ${failed} failed: ${reason}` : `database: cannot run migrations: ${reason}`, {
      cause: error,
    });
  }
}

/** A driver error in one line: `connect ECONNREFUSED 127.0.0.1:5432`, or its code when it has no message (an AggregateError). */
function describeError(error: unknown): string {
  if (error instanceof AggregateError && error.errors.length > 0) return describeError(error.errors[0]);
  if (error instanceof Error) return error.message || (error as NodeJS.ErrnoException).code || error.name;
  return inspect(error);
}
