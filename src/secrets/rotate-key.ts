/**
 * `npm run cli -- secrets rotate-key`: opens the database of the
 * configuration directly (no running server needed, and safe beside running
 * ones) and re-seals every secret value under the current `SECRETS_KEY`,
 * opening the old ones with `SECRETS_OLD_KEYS`. See docs/secrets.md for the
 * whole procedure.
 */
import fs from "node:fs/promises";
import path from "node:path";
import type { Config } from "../core/config.ts";
import { openDatabase } from "../core/database/database.ts";
import { createKeyring, rotateSecretsKey, type RotationReport } from "./keyring.ts";
import { recordSecretsKey } from "../core/shared-keys.ts";

/** The current key: `SECRETS_KEY`, else the key the server generated into DATA_DIR. Never generates one. */
async function currentKey(config: Config): Promise<Buffer> {
  if (config.secretsKey) return config.secretsKey;
  const file = path.join(config.dataDir, "secrets-key");
  let text: string;
  try {
    text = (await fs.readFile(file, "utf8")).trim();
  } catch {
    throw new Error(`SECRETS_KEY is not set and ${file} does not exist: nothing to rotate to`);
  }
  const key = Buffer.from(text, "base64");
  if (key.length !== 32) throw new Error(`${file}: must hold the base64 of 32 bytes`);
  return key;
}

export async function rotateSecretsKeyFromConfig(config: Config): Promise<RotationReport> {
  const keyring = createKeyring(await currentKey(config), config.secretsOldKeys);
  const database = await openDatabase({ databaseUrl: config.databaseUrl, dataDir: config.dataDir, poolSize: 2 });
  try {
    const report = await rotateSecretsKey(database.db, keyring);
    // Every value is under the current key now: it is the one every instance must start with.
    await recordSecretsKey(database.db, keyring.currentKeyId);
    return report;
  } finally {
    await database.close();
  }
}
