/**
 * Which keys a database's secrets need, and which of them a keyring lacks:
 * what `restore` checks before it puts a database in place (a database whose
 * key is lost restores rows whose values can never be read again, and a server
 * refuses to start on it with another key).
 */
import type { Db } from "../core/database/index.ts";
import { readSharedKeys } from "../core/shared-keys/index.ts";
import type { Keyring } from "./keyring.ts";
import { createSecretStore, type SealedUnderKey } from "./secret-store.ts";

export interface KeysNeeded {
  /** The key id the database's instances must start with (recorded at the first start); undefined before one. */
  recordedKeyId: string | undefined;
  /** The ids of the keys stored values are sealed under (more than one during a rotation). */
  sealedKeyIds: string[];
  /** For each of those keys, how many values it seals and one of them, to try the key on. */
  sealed: SealedUnderKey[];
  /** The ids among both that `keyring` cannot open (all of them without a keyring). */
  missing: string[];
}

export async function keysNeeded(db: Db, keyring: Keyring | undefined): Promise<KeysNeeded> {
  const { secretsKeyId } = await readSharedKeys(db);
  const sealed = await createSecretStore(db).sampleUnderEachKey();
  const sealedKeyIds = sealed.map((s) => s.keyId).sort();
  const all = [...new Set([...(secretsKeyId ? [secretsKeyId] : []), ...sealedKeyIds])];
  return {
    recordedKeyId: secretsKeyId,
    sealedKeyIds,
    sealed,
    missing: all.filter((id) => !keyring?.has(id)),
  };
}
