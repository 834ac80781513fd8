/**
 * `platform-batteries secrets check-key`: whether a secrets key opens a
 * database's secrets, without starting a server and without changing
 * anything (no migration runs, nothing is recorded). For a backup being
 * restored, a key found in a vault, or a host about to be started with a key
 * it was given: a key that does not open the database is refused at start
 * anyway, but only once the instance is being rolled out.
 *
 * The key opens the database when every stored value is sealed under a key of
 * the ring (`SECRETS_KEY`/`SECRETS_KEY_FILE`, plus `SECRETS_OLD_KEYS`) and one
 * value under each such key does open (its GCM tag authenticates), and the key
 * the instances recorded is one of the ring's. A database with neither values
 * nor a recorded key is opened by any key.
 */
import fs from "node:fs/promises";
import path from "node:path";
import type { Config } from "../core/config.ts";
import { readSecretsKeyFile, secretsKeyFile } from "../core/data-dir.ts";
import { appliedMigrations, openDatabase } from "../core/database/index.ts";
import { createKeyring } from "./keyring.ts";
import { keysNeeded } from "./key-check.ts";

export interface KeyCheck {
  /** Whether the key opens every secret of the database. */
  opens: boolean;
  /** The id of the key checked (the first 16 hex digits of its SHA-256; reveals nothing usable). */
  keyId: string;
  /** The key id the database's instances use; undefined before the first instance started. */
  databaseKeyId: string | undefined;
  /** How many values are stored. */
  values: number;
  /** Key ids that seal stored values but are not in the ring, each with its number of values. */
  missingKeys: Record<string, number>;
  /** One line saying why. */
  summary: string;
}

/** A check that could not be made: no key, no database, a database never migrated. */
class KeyCheckError extends Error {
  override readonly name = "KeyCheckError";
}

async function keyOf(config: Config): Promise<Buffer> {
  if (config.secretsKey) return config.secretsKey;
  const key = await readSecretsKeyFile(config.dataDir);
  if (!key)
    throw new KeyCheckError(
      `no key to check: set SECRETS_KEY_FILE (or SECRETS_KEY); ${secretsKeyFile(config.dataDir)} does not exist either`,
    );
  return key;
}

export async function checkSecretsKey(config: Config): Promise<KeyCheck> {
  const keyring = createKeyring(await keyOf(config), config.secretsOldKeys);
  if (!config.databaseUrl) {
    // Opening an embedded database that is not there would make a new one.
    const pg = path.join(config.dataDir, "pg");
    if (
      !(await fs.stat(path.join(pg, "PG_VERSION")).then(
        () => true,
        () => false,
      ))
    )
      throw new KeyCheckError(`no database in ${pg}: set DATA_DIR (or DATABASE_URL) to the database to check`);
  }
  const database = await openDatabase({ databaseUrl: config.databaseUrl, dataDir: config.dataDir, poolSize: 1 });
  try {
    if ((await appliedMigrations(database.db)).length === 0)
      throw new KeyCheckError("the database holds no platform-batteries data (it was never migrated)");
    // Which keys the database needs, as `restore` asks; then one value under each key the ring has is opened.
    const needed = await keysNeeded(database.db, keyring);
    const databaseKeyId = needed.recordedKeyId;
    const missingKeys: Record<string, number> = {};
    const failed: string[] = [];
    let values = 0;
    for (const { keyId, count, sample } of needed.sealed) {
      values += count;
      if (needed.missing.includes(keyId)) {
        missingKeys[keyId] = count;
        continue;
      }
      try {
        keyring.open(sample.value, { appId: sample.appId, name: sample.name, version: sample.version ?? 0 });
      } catch {
        failed.push(keyId);
      }
    }
    const keyId = keyring.currentKeyId;
    const missing = Object.entries(missingKeys);
    const recordedMissing = databaseKeyId !== undefined && needed.missing.includes(databaseKeyId);
    let summary: string;
    if (missing.length > 0) {
      summary = `key id ${keyId} does not open this database's secrets: ${missing
        .map(([id, n]) => `${n} value(s) are sealed under key id ${id}`)
        .join(", ")}`;
    } else if (failed.length > 0) {
      summary = `key id ${keyId} does not open this database's secrets: a value under key id ${failed.join(", ")} does not authenticate (the row was changed)`;
    } else if (recordedMissing) {
      summary = `key id ${keyId} does not open this database: its instances use key id ${databaseKeyId}`;
    } else {
      summary =
        values === 0 && databaseKeyId === undefined
          ? `key id ${keyId} opens this database: it holds no secret values and no instance has recorded a key yet`
          : `key id ${keyId} opens this database's secrets (${values} value(s); the instances use key id ${databaseKeyId ?? keyId})`;
    }
    const opens = missing.length === 0 && failed.length === 0 && !recordedMissing;
    return { opens, keyId, databaseKeyId, values, missingKeys, summary };
  } finally {
    await database.close();
  }
}
