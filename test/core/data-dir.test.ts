/**
 * The admin token and the secrets key generated into DATA_DIR
 * (src/core/data-dir.ts resolveDataDirSecrets): a file appears whole or not
 * at all, so starts at the same moment agree on one value, and a file found
 * empty or cut short is refused naming its variable, never trusted.
 */
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../../src/core/config.ts";
import { resolveDataDirSecrets } from "../../src/core/data-dir.ts";

let dataDir: string;
beforeEach(async () => {
  dataDir = path.join(await fs.mkdtemp(path.join(os.tmpdir(), "pb-data-dir-")), "data");
});
afterEach(async () => {
  await fs.rm(path.dirname(dataDir), { recursive: true, force: true });
});

const refusal = (p: Promise<unknown>) =>
  p.then(
    () => undefined,
    (e: unknown) => e,
  );

describe("resolveDataDirSecrets (src/core/data-dir.ts)", () => {
  it("starts at the same moment on a fresh DATA_DIR agree on one token and one key, and leave no other file", async () => {
    const config = loadConfig({ DATA_DIR: dataDir });
    const all = await Promise.all(Array.from({ length: 8 }, () => resolveDataDirSecrets(config)));
    expect(new Set(all.map((r) => r.config.adminToken)).size).toBe(1);
    expect(new Set(all.map((r) => r.config.secretsKey.toString("hex"))).size).toBe(1);
    // Exactly one start generated (and so prints) the token.
    expect(all.filter((r) => r.generatedAdminToken !== undefined)).toHaveLength(1);
    expect(all[0].config.adminToken).toMatch(/^pba_[\w-]{43}$/);
    expect((await fs.readdir(dataDir)).sort()).toEqual(["admin-token", "secrets-key"]);
  });

  it("an empty or cut admin-token file is refused naming ADMIN_TOKEN, never used as the token", async () => {
    await fs.mkdir(dataDir, { recursive: true, mode: 0o700 });
    for (const text of ["", "pba_short\n"]) {
      await fs.writeFile(path.join(dataDir, "admin-token"), text, { mode: 0o600 });
      const err = await refusal(resolveDataDirSecrets(loadConfig({ DATA_DIR: dataDir })));
      expect(err).toBeInstanceOf(ConfigError);
      expect((err as ConfigError).variable).toBe("ADMIN_TOKEN");
      expect((err as ConfigError).message).toMatch(/admin-token holds (nothing|a token shorter than 32 characters)/);
    }
  });

  it("an empty secrets-key file is refused naming SECRETS_KEY", async () => {
    await fs.mkdir(dataDir, { recursive: true, mode: 0o700 });
    await fs.writeFile(path.join(dataDir, "secrets-key"), "", { mode: 0o600 });
    const config = loadConfig({ DATA_DIR: dataDir, ADMIN_TOKEN: "pba_" + "x".repeat(40) });
    const err = await refusal(resolveDataDirSecrets(config));
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).message).toMatch(
      /^SECRETS_KEY: .*secrets-key must hold the base64 of 32 bytes, and holds nothing/,
    );
  });
});
