/**
 * The blueprint's list of secret names: declaring keeps the secrets whose
 * names stay (values untouched), adds the new ones unset, and deletes the
 * rest with their values. A secret's links go with it (the `secret_links`
 * foreign key cascades), so a dropped name leaves no usable link behind.
 */
import type { Db } from "../core/database/database.ts";

export async function declareSecrets(db: Db, appId: string, names: string[]): Promise<void> {
  await db.transaction().execute(async (trx) => {
    let removal = trx.deleteFrom("secrets").where("app_id", "=", appId);
    if (names.length > 0) removal = removal.where("name", "not in", names);
    await removal.execute();
    if (names.length > 0) {
      await trx
        .insertInto("secrets")
        .values(names.map((name) => ({ app_id: appId, name, value_encrypted: null, key_id: null, version: null, set_at: null })))
        .onConflict((oc) => oc.columns(["app_id", "name"]).doNothing())
        .execute();
    }
  });
}
