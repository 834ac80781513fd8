/**
 * Values the embedded default generates once into DATA_DIR when the
 * environment does not give them: the admin token and the secrets key.
 * Files are created with mode 0600 (DATA_DIR 0700, see `owner-only.ts`) and
 * never overwritten. A file appears whole or not at all: it is written and
 * synced under a name of its own, then linked into place (a link never
 * replaces a file; of two starts at once, one link wins and the other reads
 * that file). A start stopped midway so leaves no empty or cut file, and one
 * found anyway (written by an older version) is refused, never trusted.
 */
import crypto from "node:crypto";
import fs from "node:fs/promises";
import path from "node:path";
import { ConfigError, type Config } from "./config.ts";
import { ownerOnlyDir } from "./owner-only.ts";

export interface ResolvedConfig extends Config {
  adminToken: string;
  secretsKey: Buffer;
}

export interface Resolution {
  config: ResolvedConfig;
  /** Set when this start generated the admin token: it is printed once, now. */
  generatedAdminToken: string | undefined;
}

/** Writes `text` durably to a new file of its own; the caller links it into place. */
async function writeSynced(file: string, text: string): Promise<void> {
  const handle = await fs.open(file, "wx", 0o600);
  try {
    await handle.writeFile(text);
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** The directory's entries made durable (a new name in it survives a power loss). */
export async function syncDir(dir: string): Promise<void> {
  const handle = await fs.open(dir, "r");
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

async function readOrCreate(file: string, make: () => string): Promise<{ value: string; created: boolean }> {
  const dir = path.dirname(file);
  await ownerOnlyDir(dir);
  const value = make();
  const temp = `${file}.${process.pid}.${crypto.randomBytes(6).toString("hex")}.tmp`;
  await writeSynced(temp, value + "\n");
  let created = false;
  try {
    await fs.link(temp, file);
    created = true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
  } finally {
    await fs.unlink(temp);
  }
  if (created) {
    await syncDir(dir);
    return { value, created };
  }
  return { value: (await fs.readFile(file, "utf8")).trim(), created };
}

/** Shorter than the 32 characters an admin token must have: the file was cut short (see the header). */
function checkAdminToken(file: string, token: string): string {
  if (token.length < 32)
    throw new ConfigError(
      "ADMIN_TOKEN",
      `${file} holds ${token.length === 0 ? "nothing" : "a token shorter than 32 characters"} (cut short when it was first written?); set ADMIN_TOKEN, or delete the file to have a new token generated (then \`admin-token adopt\` if the database knows another)`,
    );
  return token;
}

/** Where the generated admin token is kept (the CLI reads it there when ADMIN_TOKEN is not set). */
export function adminTokenFile(dataDir: string): string {
  return path.join(dataDir, "admin-token");
}

/** Where the generated secrets key is kept. */
export function secretsKeyFile(dataDir: string): string {
  return path.join(dataDir, "secrets-key");
}

/** The key in `secretsKeyFile`, checked; undefined when there is no such file. Never generates one. */
export async function readSecretsKeyFile(dataDir: string): Promise<Buffer | undefined> {
  let text: string;
  try {
    text = await fs.readFile(secretsKeyFile(dataDir), "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
  return decodeSecretsKey(dataDir, text);
}

function decodeSecretsKey(dataDir: string, text: string): Buffer {
  const key = Buffer.from(text.trim(), "base64");
  if (key.length !== 32)
    throw new ConfigError(
      "SECRETS_KEY",
      `${secretsKeyFile(dataDir)} must hold the base64 of 32 bytes, and holds ${text.trim() === "" ? "nothing" : "something else"}; set SECRETS_KEY to the key the secrets were sealed with`,
    );
  return key;
}

export async function resolveDataDirSecrets(config: Config): Promise<Resolution> {
  let adminToken = config.adminToken;
  let generatedAdminToken: string | undefined;
  if (adminToken === undefined) {
    const r = await readOrCreate(
      adminTokenFile(config.dataDir),
      () => "pba_" + crypto.randomBytes(32).toString("base64url"),
    );
    adminToken = checkAdminToken(adminTokenFile(config.dataDir), r.value);
    if (r.created) generatedAdminToken = r.value;
  }
  let secretsKey = config.secretsKey;
  if (secretsKey === undefined) {
    const r = await readOrCreate(secretsKeyFile(config.dataDir), () => crypto.randomBytes(32).toString("base64"));
    secretsKey = decodeSecretsKey(config.dataDir, r.value);
  }
  return { config: { ...config, adminToken, secretsKey }, generatedAdminToken };
}

/**
 * Puts `key` in `secretsKeyFile` (a restore's key, for the server to find) unless a file is there; throws
 * `ConfigError` when the file there holds another key (it is never replaced: it may be the only copy).
 */
export async function keepSecretsKeyFile(dataDir: string, key: Buffer): Promise<{ created: boolean }> {
  const r = await readOrCreate(secretsKeyFile(dataDir), () => key.toString("base64"));
  if (!decodeSecretsKey(dataDir, r.value).equals(key))
    throw new ConfigError(
      "SECRETS_KEY",
      `${secretsKeyFile(dataDir)} holds another key: move it away first (it is never replaced; it may be the only copy of that key)`,
    );
  return { created: r.created };
}
