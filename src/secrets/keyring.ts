/**
 * Encryption of secret values at rest, and key rotation.
 *
 * Values are sealed with AES-256-GCM under the current key (`SECRETS_KEY`).
 * Each stored value carries the id of the key that sealed it, so values sealed
 * under an earlier key stay readable as long as that key is still listed in
 * `SECRETS_OLD_KEYS`; `rotateSecretsKey` (`rotate-key.ts`) re-seals every such value under the
 * current key, after which the old key can be dropped.
 *
 * The ciphertext is bound to the app, the secret's name and its version with
 * GCM's additional authenticated data: a row copied onto another app, another
 * name, or an older ciphertext put back under a newer version, fails to open
 * instead of handing out the wrong value.
 */
import crypto from "node:crypto";

const IV_BYTES = 12;
const TAG_BYTES = 16;

/** A key id: the first 16 hex digits of the SHA-256 of the key. Identifies, reveals nothing usable. */
export function keyIdOf(key: Buffer): string {
  return crypto.createHash("sha256").update(key).digest("hex").slice(0, 16);
}

export interface SealedValue {
  /** iv (12 bytes) | tag (16 bytes) | ciphertext. */
  sealed: Buffer;
  keyId: string;
}

/** What a sealed value is bound to. */
interface SealContext {
  appId: string;
  name: string;
  version: number;
}

export interface Keyring {
  /** The id of the key that seals new values. */
  readonly currentKeyId: string;
  /** True when `keyId` can be opened with this keyring. */
  has(keyId: string): boolean;
  seal(plaintext: string, context: SealContext): SealedValue;
  /** Throws when the key is unknown or the value does not authenticate. */
  open(value: SealedValue, context: SealContext): string;
  /** A key for another purpose, derived from the current key (e.g. the link pages' CSRF key). */
  deriveKey(purpose: string): Buffer;
  /** The same, derived from every key of the ring (current first): for checking what another instance made. */
  deriveKeys(purpose: string): Buffer[];
}

export class UnknownKeyError extends Error {
  override readonly name = "UnknownKeyError";
  readonly keyId: string;
  constructor(keyId: string) {
    super(`no key with id ${keyId} in SECRETS_KEY or SECRETS_OLD_KEYS`);
    this.keyId = keyId;
  }
}

function aad(context: SealContext): Buffer {
  return Buffer.from(`platform-batteries/secret\0${context.appId}\0${context.name}\0${context.version}`, "utf8");
}

function derive(key: Buffer, purpose: string): Buffer {
  return Buffer.from(crypto.hkdfSync("sha256", key, Buffer.alloc(0), `platform-batteries/${purpose}`, 32));
}

/** A keyring that seals under `current` and opens under `current` or any of `old`. */
export function createKeyring(current: Buffer, old: readonly Buffer[] = []): Keyring {
  for (const key of [current, ...old]) {
    if (key.length !== 32) throw new Error("a secrets key must be exactly 32 bytes");
  }
  const keys = new Map<string, Buffer>();
  for (const key of [...old, current]) keys.set(keyIdOf(key), key);
  const currentKeyId = keyIdOf(current);

  return {
    currentKeyId,
    has: (keyId) => keys.has(keyId),
    seal(plaintext, context) {
      const iv = crypto.randomBytes(IV_BYTES);
      const cipher = crypto.createCipheriv("aes-256-gcm", current, iv);
      cipher.setAAD(aad(context));
      const body = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()]);
      return { sealed: Buffer.concat([iv, cipher.getAuthTag(), body]), keyId: currentKeyId };
    },
    open(value, context) {
      const key = keys.get(value.keyId);
      if (!key) throw new UnknownKeyError(value.keyId);
      const iv = value.sealed.subarray(0, IV_BYTES);
      const tag = value.sealed.subarray(IV_BYTES, IV_BYTES + TAG_BYTES);
      const decipher = crypto.createDecipheriv("aes-256-gcm", key, iv);
      decipher.setAAD(aad(context));
      decipher.setAuthTag(tag);
      return Buffer.concat([decipher.update(value.sealed.subarray(IV_BYTES + TAG_BYTES)), decipher.final()]).toString(
        "utf8",
      );
    },
    deriveKey: (purpose) => derive(current, purpose),
    deriveKeys: (purpose) => [current, ...old].map((key) => derive(key, purpose)),
  };
}

/** The keyring of a resolved configuration: `SECRETS_KEY` seals, `SECRETS_OLD_KEYS` still open. */
export function keyringFromConfig(config: {
  secretsKey: Buffer | undefined;
  secretsOldKeys?: readonly Buffer[] | undefined;
}): Keyring {
  if (!config.secretsKey)
    throw new Error("SECRETS_KEY is not resolved (set it, or let the server generate it into DATA_DIR)");
  return createKeyring(config.secretsKey, config.secretsOldKeys ?? []);
}
