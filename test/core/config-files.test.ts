/**
 * `SECRETS_KEY_FILE` and `ADMIN_TOKEN_FILE` (src/core/config.ts): the key and
 * the token read from files, the convention of Docker and Kubernetes secrets.
 * Every refusal is one line naming the `_FILE` variable and never the value.
 */
import crypto from "node:crypto";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../../src/core/config.ts";

let dir: string;
beforeAll(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), "pb-config-files-"));
});
afterAll(() => fs.rm(dir, { recursive: true, force: true }));

async function file(name: string, contents: string, mode = 0o600): Promise<string> {
  const p = path.join(dir, name);
  await fs.writeFile(p, contents, { mode });
  await fs.chmod(p, mode);
  return p;
}

function refusal(env: Record<string, string>): ConfigError {
  try {
    loadConfig(env);
  } catch (err) {
    if (err instanceof ConfigError) return err;
    throw err;
  }
  throw new Error("expected a ConfigError");
}

describe("SECRETS_KEY_FILE and ADMIN_TOKEN_FILE", () => {
  it("read the key and the token from files, less the final line break that `openssl rand` and editors write", async () => {
    const key = crypto.randomBytes(32);
    const token = "pba_" + crypto.randomBytes(32).toString("base64url");
    const config = loadConfig({
      SECRETS_KEY_FILE: await file("secrets.key", key.toString("base64") + "\n"),
      ADMIN_TOKEN_FILE: await file("admin.token", token + "\r\n"),
    });
    expect(config.secretsKey).toEqual(key);
    expect(config.adminToken).toBe(token);
  });

  it("refuse both forms of one variable at once, naming the _FILE variable", async () => {
    const key = crypto.randomBytes(32).toString("base64");
    const err = refusal({ SECRETS_KEY: key, SECRETS_KEY_FILE: await file("both.key", key) });
    expect(err.variable).toBe("SECRETS_KEY_FILE");
    expect(err.message).toBe("SECRETS_KEY_FILE: set SECRETS_KEY or SECRETS_KEY_FILE, not both");
    const token = "t".repeat(40);
    expect(refusal({ ADMIN_TOKEN: token, ADMIN_TOKEN_FILE: await file("both.token", token) }).variable).toBe(
      "ADMIN_TOKEN_FILE",
    );
  });

  it("refuse a missing, unreadable or empty file with one line naming the variable and the file", async () => {
    const missing = path.join(dir, "nowhere.key");
    expect(refusal({ SECRETS_KEY_FILE: missing }).message).toBe(`SECRETS_KEY_FILE: ${missing} does not exist`);
    const empty = await file("empty.token", "\n");
    expect(refusal({ ADMIN_TOKEN_FILE: empty }).message).toBe(`ADMIN_TOKEN_FILE: ${empty} is empty`);
    // A directory cannot be read as a file (root reads every mode, so unreadability is shown this way too).
    const unreadable = refusal({ SECRETS_KEY_FILE: dir });
    expect(unreadable.variable).toBe("SECRETS_KEY_FILE");
    expect(unreadable.message).toMatch(new RegExp(`^SECRETS_KEY_FILE: ${dir} cannot be read \\(EISDIR\\)$`));
  });

  it("refuse a file whose contents break the variable's rule without printing them", async () => {
    const wrong = "not-a-key-but-a-secret-" + crypto.randomBytes(8).toString("hex");
    const keyFile = await file("wrong.key", wrong + "\n");
    const err = refusal({ SECRETS_KEY_FILE: keyFile });
    expect(err.variable).toBe("SECRETS_KEY_FILE");
    expect(err.message).toBe(
      `SECRETS_KEY_FILE: the contents of ${keyFile} must be the base64 of exactly 32 bytes (openssl rand -base64 32)`,
    );
    expect(err.message).not.toContain(wrong);
    const short = "short-secret-token";
    const tokenErr = refusal({ ADMIN_TOKEN_FILE: await file("short.token", short) });
    expect(tokenErr.message).toMatch(/^ADMIN_TOKEN_FILE: the contents of .* must be at least 32 characters$/);
    expect(tokenErr.message).not.toContain(short);
  });
});
