/**
 * Values the embedded default generates once into DATA_DIR when the
 * environment does not give them: the admin token and the secrets key.
 * Files are created with mode 0600 (DATA_DIR 0700, see `owner-only.ts`) and
 * never overwritten.
 */
import crypto from "node:crypto";
import fs from "node:fs/promises";
import path from "node:path";
import type { Config } from "./config.ts";
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

async function readOrCreate(file: string, make: () => string): Promise<{ value: string; created: boolean }> {
  await ownerOnlyDir(path.dirname(file));
  const value = make();
  try {
    await fs.writeFile(file, value + "\n", { mode: 0o600, flag: "wx" });
    return { value, created: true };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    return { value: (await fs.readFile(file, "utf8")).trim(), created: false };
  }
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
  if (key.length !== 32) throw new Error(`${secretsKeyFile(dataDir)}: must hold the base64 of 32 bytes`);
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
    adminToken = r.value;
    if (r.created) generatedAdminToken = r.value;
  }
  let secretsKey = config.secretsKey;
  if (secretsKey === undefined) {
    const r = await readOrCreate(secretsKeyFile(config.dataDir), () => crypto.randomBytes(32).toString("base64"));
    secretsKey = decodeSecretsKey(config.dataDir, r.value);
  }
  return { config: { ...config, adminToken, secretsKey }, generatedAdminToken };
}
