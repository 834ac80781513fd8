/**
 * `npm run cli -- secrets rotate-key`: opens the database of the
 * configuration directly (no running server needed, and safe beside running
 * ones) and re-seals every secret value under the current `SECRETS_KEY`,
 * opening the old ones with `SECRETS_OLD_KEYS`. See docs/secrets.md for the
 * whole procedure.
 */
import type { Config } from "../core/config.ts";
import { readSecretsKeyFile, secretsKeyFile } from "../core/data-dir.ts";
import { openDatabase, type Db } from "../core/database/index.ts";
import { createKeyring, UnknownKeyError, type Keyring } from "./keyring.ts";
import { createSecretStore } from "./secret-store.ts";
import { checkSecretsKeyMove, recordSecretsKey } from "../core/shared-keys/index.ts";

/** The current key: `SECRETS_KEY`, else the key the server generated into DATA_DIR. Never generates one. */
async function currentKey(config: Config): Promise<Buffer> {
  if (config.secretsKey) return config.secretsKey;
  const key = await readSecretsKeyFile(config.dataDir);
  if (!key)
    throw new Error(
      `SECRETS_KEY is not set and ${secretsKeyFile(config.dataDir)} does not exist: nothing to rotate to`,
    );
  return key;
}

export async function rotateSecretsKeyFromConfig(
  config: Config,
  /** Runs on the same database once the rotation is done (the CLI writes its audit entry there). */
  afterwards?: (db: Db, report: RotationReport) => Promise<void>,
): Promise<RotationReport> {
  const keyring = createKeyring(await currentKey(config), config.secretsOldKeys);
  const database = await openDatabase({ databaseUrl: config.databaseUrl, dataDir: config.dataDir, poolSize: 2 });
  try {
    await checkSecretsKeyMove(database.db, keyring);
    const report = await rotateSecretsKey(database.db, keyring);
    // Every value is under the current key now: it is the one every instance must start with.
    await recordSecretsKey(database.db, keyring);
    await afterwards?.(database.db, report);
    return report;
  } finally {
    await database.close();
  }
}

export interface RotationReport {
  /** The key every value is now sealed under. */
  keyId: string;
  /** Values re-sealed by this run. */
  reencrypted: number;
  /** Values that were already under the current key. */
  alreadyCurrent: number;
}

const ROTATION_BATCH = 200;

/**
 * `npm run cli -- secrets rotate-key`: re-seals every stored value that is not
 * under the keyring's current key. Safe while the service runs: each row is
 * rewritten only if it still holds the ciphertext that was read (a value set
 * meanwhile is already under the current key and is left alone). Idempotent:
 * a second run finds nothing to do. Throws `UnknownKeyError` before changing
 * anything when some value is under a key the keyring does not have.
 */
export async function rotateSecretsKey(db: Db, keyring: Keyring): Promise<RotationReport> {
  const store = createSecretStore(db);
  for (const keyId of await store.staleKeyIds(keyring.currentKeyId)) {
    if (keyId === null || !keyring.has(keyId)) throw new UnknownKeyError(keyId ?? "(none)");
  }

  let reencrypted = 0;
  for (;;) {
    const rows = await store.staleValues(keyring.currentKeyId, ROTATION_BATCH);
    if (rows.length === 0) break;
    let batchUpdated = 0;
    for (const row of rows) {
      const context = { appId: row.appId, name: row.name, version: row.version ?? 0 };
      const plaintext = keyring.open(row.value, context);
      if (await store.replaceSealed(row, keyring.seal(plaintext, context))) batchUpdated++;
    }
    if (batchUpdated === 0) {
      // Every row changed under us and is still not under the current key: some
      // instance keeps sealing with an old key. Stop rather than loop forever.
      throw new Error(
        "values keep being set under an old key: configure every instance with the new SECRETS_KEY first",
      );
    }
    reencrypted += batchUpdated;
  }
  const current = await store.countUnderKey(keyring.currentKeyId);
  return { keyId: keyring.currentKeyId, reencrypted, alreadyCurrent: current - reencrypted };
}
