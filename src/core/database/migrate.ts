/** Runs the migrations of `migrations/`, in name order. */
import { inspect } from "node:util";
import type { Kysely } from "kysely";
import { Migrator, type Migration } from "kysely/migration";
import { migrations } from "./migrations/index.ts";

/** Runs every pending migration; safe to call from several instances at once (Kysely takes a lock). */
export async function migrate(db: Kysely<Record<never, never>>): Promise<void> {
  const migrator = new Migrator({
    db,
    provider: { getMigrations: (): Promise<Record<string, Migration>> => Promise.resolve(migrations) },
  });
  const { error, results } = await migrator.migrateToLatest();
  if (error) {
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
