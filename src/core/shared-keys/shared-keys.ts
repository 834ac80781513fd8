/**
 * Instances that share a database must share two things that each one could
 * otherwise make up on its own: the secrets key (a value sealed by one
 * instance must open on every other) and the admin token (an admin call must
 * not depend on which instance the load balancer picked). The first instance
 * records the key's id and the token's hash in `platform_settings`; every
 * later start compares and refuses with one line naming the variable, rather
 * than starting and answering some requests wrongly.
 *
 * Changes that are meant: a key rotation (the recorded key is among
 * `SECRETS_OLD_KEYS`, so the record moves to the new key) and a new admin
 * token (`npm run cli -- admin-token adopt`, run with the new token once).
 */
import { ConfigError } from "../config.ts";
import type { Db } from "../database/index.ts";
import { hashToken } from "../auth.ts";
import { createSettingsStore } from "./settings-store.ts";

/** What this check needs of the secrets facility's keyring: which key seals, and which keys open. */
export interface KeyIds {
  readonly currentKeyId: string;
  has(keyId: string): boolean;
}

const SECRETS_KEY_ID = "secrets_key_id";
const ADMIN_TOKEN_HASH = "admin_token_sha256";

/** Records this instance's key id and admin token hash if none are recorded; else checks them. Throws `ConfigError`. */
export async function verifySharedKeys(db: Db, options: { keyring: KeyIds; adminToken: string }): Promise<void> {
  const { keyring } = options;
  const settings = createSettingsStore(db);
  const recordedKey = await settings.recordOrRead(SECRETS_KEY_ID, keyring.currentKeyId);
  if (recordedKey !== keyring.currentKeyId) {
    if (!keyring.has(recordedKey)) {
      throw new ConfigError(
        "SECRETS_KEY",
        `this database's secrets are sealed under key id ${recordedKey}, and this instance has key id ${keyring.currentKeyId}: ` +
          "every instance on one database must use the same SECRETS_KEY (during a rotation, the old one in SECRETS_OLD_KEYS)",
      );
    }
    // A rotation: the recorded key is one of SECRETS_OLD_KEYS; from now on the new key is the one to share.
    // Only if it is still the recorded one: of two instances rotating to different keys at once, one moves the
    // record and the other, finding the record moved to a key it lacks, is refused.
    const now = await settings.replace(SECRETS_KEY_ID, recordedKey, keyring.currentKeyId);
    if (now !== keyring.currentKeyId) {
      throw new ConfigError(
        "SECRETS_KEY",
        `another instance on this database moved its secrets to key id ${now ?? "(none)"} while this one started with key id ${keyring.currentKeyId}: ` +
          "every instance on one database must use the same SECRETS_KEY",
      );
    }
  }
  const tokenHash = hashToken(options.adminToken);
  if ((await settings.recordOrRead(ADMIN_TOKEN_HASH, tokenHash)) !== tokenHash) {
    throw new ConfigError(
      "ADMIN_TOKEN",
      "another instance on this database uses a different admin token: every instance must share ADMIN_TOKEN " +
        "(to change it on purpose, run `npm run cli -- admin-token adopt` with the new ADMIN_TOKEN)",
    );
  }
}

/**
 * Throws `ConfigError` unless the recorded secrets key may move to this
 * keyring's current one: nothing is recorded, it is that key, or the keyring
 * has it (`SECRETS_OLD_KEYS`). Else the command runs with a key the instances
 * do not have (a shell without the production `SECRETS_KEY`, which falls back
 * to a local DATA_DIR key), and moving the record would make every instance
 * refuse to start. Checked before `secrets rotate-key` changes anything.
 */
export async function checkSecretsKeyMove(db: Db, keyring: KeyIds): Promise<void> {
  const recorded = await createSettingsStore(db).read(SECRETS_KEY_ID);
  if (recorded === undefined || recorded === keyring.currentKeyId || keyring.has(recorded)) return;
  throw new ConfigError(
    "SECRETS_KEY",
    `this database's instances use key id ${recorded}, and this command has key id ${keyring.currentKeyId} without ` +
      `${recorded} in SECRETS_OLD_KEYS: run it with the new key as SECRETS_KEY and the instances' key in SECRETS_OLD_KEYS`,
  );
}

/** Makes the keyring's current key the one every instance must have (after `secrets rotate-key` re-sealed every value under it). */
export async function recordSecretsKey(db: Db, keyring: KeyIds): Promise<void> {
  await checkSecretsKeyMove(db, keyring);
  await createSettingsStore(db).put(SECRETS_KEY_ID, keyring.currentKeyId);
}

/** Makes `adminToken` the one every instance must use (an intended change of the admin token). */
export async function adoptAdminToken(db: Db, adminToken: string): Promise<void> {
  await createSettingsStore(db).put(ADMIN_TOKEN_HASH, hashToken(adminToken));
}

/** What this database records of its instances' keys: the secrets key's id and the admin token's hash (undefined before a first start). */
export async function readSharedKeys(db: Db): Promise<{ secretsKeyId?: string; adminTokenHash?: string }> {
  const settings = createSettingsStore(db);
  return { secretsKeyId: await settings.read(SECRETS_KEY_ID), adminTokenHash: await settings.read(ADMIN_TOKEN_HASH) };
}
