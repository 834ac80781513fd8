/**
 * Every SQL statement on `platform_settings`, and its table type: facts every
 * instance on one database must agree on, by name (see `shared-keys.ts`).
 */
import type { Kysely } from "kysely";
import type { Db, Timestamp } from "../database/index.ts";

interface PlatformSettingsTable {
  name: string;
  /** A hash or a key id, never a key or a token. */
  value: string;
  updated_at: Timestamp;
}

type SettingsTables = {
  platform_settings: PlatformSettingsTable;
};

export interface SettingsStore {
  /** Records `value` under `name` unless something is recorded already; answers what is recorded now. */
  recordOrRead(name: string, value: string): Promise<string>;
  /** Records `value` under `name`, replacing what was there. */
  put(name: string, value: string): Promise<void>;
  /**
   * Replaces `expected` under `name` by `value`, if `expected` is still what is recorded; answers what is
   * recorded now (`value` when this replaced it, else what another writer put there first).
   */
  replace(name: string, expected: string, value: string): Promise<string | undefined>;
  /** What is recorded under `name`; undefined when nothing is. */
  read(name: string): Promise<string | undefined>;
}

export function createSettingsStore(database: Db): SettingsStore {
  const db: Kysely<SettingsTables> = database.withTables<SettingsTables>();
  return {
    async recordOrRead(name, value) {
      await db
        .insertInto("platform_settings")
        .values({ name, value, updated_at: new Date() })
        .onConflict((oc) => oc.column("name").doNothing())
        .execute();
      const row = await db
        .selectFrom("platform_settings")
        .select("value")
        .where("name", "=", name)
        .executeTakeFirstOrThrow();
      return row.value;
    },
    async replace(name, expected, value) {
      await db
        .updateTable("platform_settings")
        .set({ value, updated_at: new Date() })
        .where("name", "=", name)
        .where("value", "=", expected)
        .execute();
      return this.read(name);
    },
    async read(name) {
      const row = await db.selectFrom("platform_settings").select("value").where("name", "=", name).executeTakeFirst();
      return row?.value;
    },
    async put(name, value) {
      await db
        .insertInto("platform_settings")
        .values({ name, value, updated_at: new Date() })
        .onConflict((oc) => oc.column("name").doUpdateSet({ value, updated_at: new Date() }))
        .execute();
    },
  };
}
