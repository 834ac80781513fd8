/** Runs the migrations of `migrations/`, in name order. */
import { inspect } from "node:util";
import { Migrator, type Migration } from "kysely/migration";
import type { Db } from "./database.ts";
import { migrations } from "./migrations/index.ts";

/** Runs every pending migration; safe to call from several instances at once (Kysely takes a lock). */
export async function migrate(db: Db): Promise<void> {
  const migrator = new Migrator({
    db,
    provider: { getMigrations: (): Promise<Record<string, Migration>> => Promise.resolve(migrations) },
  });
  const { error, results } = await migrator.migrateToLatest();
  if (error) {
    const failed = results?.find((r) => r.status === "Error")?.migrationName;
    throw new Error(`migration ${failed ?? "(unknown)"} failed: ${error instanceof Error ? error.message : inspect(error)}`, { cause: error });
  }
}
