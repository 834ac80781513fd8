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

export async function resolveDataDirSecrets(config: Config): Promise<Resolution> {
  let adminToken = config.adminToken;
  let generatedAdminToken: string | undefined;
  if (adminToken === undefined) {
    const r = await readOrCreate(
      path.join(config.dataDir, "admin-token"),
      () => "pba_" + crypto.randomBytes(32).toString("base64url"),
    );
    adminToken = r.value;
    if (r.created) generatedAdminToken = r.value;
  }
  let secretsKey = config.secretsKey;
  if (secretsKey === undefined) {
    const r = await readOrCreate(path.join(config.dataDir, "secrets-key"), () =>
      crypto.randomBytes(32).toString("base64"),
    );
    secretsKey = Buffer.from(r.value, "base64");
    if (secretsKey.length !== 32)
      throw new Error(`${path.join(config.dataDir, "secrets-key")}: must hold the base64 of 32 bytes`);
  }
  return { config: { ...config, adminToken, secretsKey }, generatedAdminToken };
}
