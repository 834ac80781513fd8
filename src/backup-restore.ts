/**
 * `backup FILE` and `restore FILE` of the operator CLI, for the embedded
 * database (DATA_DIR). PostgreSQL is backed up with its own tools
 * (docs/operations.md); these commands refuse with one line when
 * DATABASE_URL is set.
 *
 * What an archive holds: the whole database (every app, token hash, message,
 * encrypted secret value, link, event, mail, usage counter and audit entry).
 * What it never holds: the secrets key and the admin token. The key is left
 * out on purpose: an archive that carries its key would make the encryption of
 * the secret values worthless to whoever gets a copy, so the key is stored
 * apart (and must be: without it the archive's secrets can never be read).
 * The admin token is a live credential, and the database keeps only its hash;
 * a restore adopts the admin token it is given (or a new one) instead.
 *
 * `restore` refuses, before changing anything, when the key it is given
 * (`--key-file`, else SECRETS_KEY, else DATA_DIR/secrets-key, with
 * SECRETS_OLD_KEYS) cannot open every secret of the archive.
 */
import fs from "node:fs/promises";
import type { Config } from "./core/config.ts";
import { hashToken } from "./core/auth.ts";
import {
  adminTokenFile,
  keepSecretsKeyFile,
  readSecretsKeyFile,
  resolveDataDirSecrets,
  secretsKeyFile,
} from "./core/data-dir.ts";
import type { Db } from "./core/database/index.ts";
import { ArchiveRefusal, readManifest, restoreArchive, writeArchive } from "./core/database/pglite-archive.ts";
import { DataDirInUseError } from "./core/database/data-dir-lock.ts";
import { adoptAdminToken, readSharedKeys } from "./core/shared-keys/index.ts";
import { createKeyring, keyIdOf, keysNeeded } from "./secrets/index.ts";

/** What `backup` and `restore` say the archive does not hold (also in docs/operations.md). */
const NOT_IN_ARCHIVE =
  "NOT in the archive: the secrets key and the admin token. Keep a copy of the secrets key apart from the archive: without it the archive's secrets can never be read";

function refuseOnPostgres(config: Config, command: string, instead: string): void {
  if (config.databaseUrl)
    throw new ArchiveRefusal(
      `${command}: DATABASE_URL is set: ${instead} (docs/operations.md, "Backups and restore"); this command is for the embedded DATA_DIR`,
    );
}

/** The one line for a DATA_DIR a server holds: the procedure is stop, copy, start. */
async function whileNotInUse<T>(command: string, dataDir: string, run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (err) {
    if (!(err instanceof DataDirInUseError)) throw err;
    throw new ArchiveRefusal(
      `${command}: DATA_DIR ${dataDir} is held by a running server (pid ${err.pid}): stop it, run ${command}, then start it again (docs/operations.md, "Backups and restore")`,
    );
  }
}

const megabytes = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MB`;

/** Writes DATA_DIR's database to `file`; the lines to print. */
export async function backupDataDir(config: Config, file: string): Promise<string[]> {
  refuseOnPostgres(config, "backup", "back up PostgreSQL with pg_dump -Fc");
  const { manifest, bytes } = await whileNotInUse("backup", config.dataDir, () =>
    writeArchive({
      dataDir: config.dataDir,
      file,
      describe: async (db) => {
        const needed = await keysNeeded(db, undefined);
        return {
          secretsKeyId: needed.recordedKeyId ?? null,
          sealedKeyIds: needed.sealedKeyIds,
          contains:
            "the embedded database: apps, token hashes, queue messages and dead letters, secret values (encrypted), secret links, analytics, mail log, usage, audit log",
          notContained: ["the secrets key", "the admin token (the database holds its hash only)"],
        };
      },
    }),
  );
  const keyId = manifest.secretsKeyId as string | null;
  const sealed = manifest.sealedKeyIds as string[];
  return [
    `backed up DATA_DIR ${config.dataDir} to ${file} (${megabytes(bytes)}, ${manifest.migrations.length} migrations)`,
    `in the archive: the whole embedded database; secret values sealed under key id ${sealed.length > 0 ? sealed.join(", ") : (keyId ?? "(none)")}`,
    `${NOT_IN_ARCHIVE} (key id ${keyId ?? "(none yet)"}: ${config.secretsKey ? "SECRETS_KEY" : secretsKeyFile(config.dataDir)}).`,
  ];
}

/** A key file as `secrets-key` holds it: the base64 of 32 bytes. */
async function readKeyFile(file: string): Promise<Buffer> {
  let text: string;
  try {
    text = await fs.readFile(file, "utf8");
  } catch (err) {
    throw new ArchiveRefusal(`--key-file ${file}: ${(err as NodeJS.ErrnoException).code ?? "unreadable"}`);
  }
  const key = Buffer.from(text.trim(), "base64");
  if (key.length !== 32) throw new ArchiveRefusal(`--key-file ${file}: must hold the base64 of 32 bytes`);
  return key;
}

/** Restores `file` into DATA_DIR; the lines to print. `audit` writes the restore's audit entry into the restored database. */
export async function restoreDataDir(
  config: Config,
  file: string,
  options: {
    keyFile?: string | undefined;
    force: boolean;
    audit?: (db: Db, detail: Record<string, unknown>) => Promise<void>;
  },
): Promise<string[]> {
  refuseOnPostgres(config, "restore", "restore PostgreSQL with pg_restore");
  const { dataDir } = config;
  const given = options.keyFile === undefined ? undefined : await readKeyFile(options.keyFile);
  if (given && config.secretsKey && !given.equals(config.secretsKey))
    throw new ArchiveRefusal(
      `restore: SECRETS_KEY is set and is not the key of --key-file: the server would start with SECRETS_KEY; give one of them`,
    );
  const key = given ?? config.secretsKey ?? (await readSecretsKeyFile(dataDir));
  const source = given ? `--key-file ${options.keyFile}` : config.secretsKey ? "SECRETS_KEY" : secretsKeyFile(dataDir);
  const keyring = key ? createKeyring(key, config.secretsOldKeys) : undefined;
  const refuseMissing = (missing: string[]) => {
    if (missing.length === 0) return;
    const has = key ? `the key of ${source} has id ${keyIdOf(key)}` : "no key was given";
    throw new ArchiveRefusal(
      `restore: the archive's secrets need key id ${missing.join(", ")} and ${has}` +
        `${config.secretsOldKeys.length > 0 ? " (nor SECRETS_OLD_KEYS)" : ""}: give that key with --key-file FILE or SECRETS_KEY (without it they can never be read); nothing was restored`,
    );
  };
  // Refused at once from the manifest's key ids, before the archive is unpacked.
  const described = await readManifest(file);
  const listed: unknown[] = [
    described.secretsKeyId,
    ...(Array.isArray(described.sealedKeyIds) ? (described.sealedKeyIds as unknown[]) : []),
  ];
  refuseMissing([...new Set(listed.filter((id): id is string => typeof id === "string" && !keyring?.has(id)))]);
  const lines: string[] = [];
  const manifest = await whileNotInUse("restore", dataDir, () =>
    restoreArchive({
      dataDir,
      file,
      force: options.force,
      async prepare(db, archive) {
        // The database itself is the authority (a manifest can be edited); the manifest was checked first.
        const needed = await keysNeeded(db, keyring);
        refuseMissing(needed.missing);
        // The key where the server will find it: SECRETS_KEY when set, else DATA_DIR/secrets-key.
        if (key && !config.secretsKey) {
          const { created } = await keepSecretsKeyFile(dataDir, key);
          lines.push(
            `secrets key: id ${keyIdOf(key)}, ${created ? "written to" : "already in"} ${secretsKeyFile(dataDir)}`,
          );
        } else if (key) lines.push(`secrets key: id ${keyIdOf(key)} (SECRETS_KEY; start the server with it)`);
        // The admin token: ADMIN_TOKEN, else DATA_DIR/admin-token, else a new one generated there.
        // (Given a key, so that only the admin token is resolved: with no key needed, the server makes one at start.)
        const resolved = await resolveDataDirSecrets({ ...config, secretsKey: key ?? Buffer.alloc(32) });
        const token = resolved.config.adminToken;
        const where = config.adminToken ? "ADMIN_TOKEN" : adminTokenFile(dataDir);
        const { adminTokenHash } = await readSharedKeys(db);
        if (adminTokenHash !== hashToken(token)) {
          await adoptAdminToken(db, token);
          lines.push(
            `admin token: the one in ${where}${resolved.generatedAdminToken ? " (generated now)" : ""} is now this database's; the backup's own admin token no longer works`,
          );
        } else lines.push(`admin token: the one in ${where}, as in the backup`);
        await options.audit?.(db, {
          archiveCreatedAt: archive.createdAt,
          secretsKeyId: needed.recordedKeyId ?? null,
          replacedDatabase: options.force,
        });
      },
    }),
  );
  return [
    `restored ${file} (made ${manifest.createdAt}, ${manifest.migrations.length} migrations) into DATA_DIR ${dataDir}`,
    ...lines,
    "start the server on it (it runs any newer migrations); leased messages stay leased until their lease ends",
  ];
}
