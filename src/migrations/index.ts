/**
 * Every migration, in order. Names sort in the order they run; a facility adds
 * its own file and one line here. Applied migrations are never edited.
 */
import type { Migration } from "kysely/migration";
import * as foundation from "./0001-foundation.ts";

export const migrations: Record<string, Migration> = {
  "0001-foundation": foundation,
};
