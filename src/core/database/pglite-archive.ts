/**
 * The embedded database (DATA_DIR/pg) as one archive file, and back: the
 * mechanics of `backup` and `restore` (the commands, with what they check and
 * say, are `src/backup-restore.ts`; the procedure is docs/operations.md).
 *
 * Consistency by stop-copy-start: only one process may open DATA_DIR
 * (`data-dir-lock.ts`), so a backup opens the database itself, which is
 * refused with one line while a server holds it. Holding it open, and so
 * holding the lock, it runs a CHECKPOINT and copies the directory: PGlite is
 * one process with one connection and no background writer, so nothing
 * changes a file while the copy is made, and the files are a clean database
 * (what PGlite's own `dumpDataDir` makes the same way, but in memory).
 *
 * The archive is a gzip'd tar: `backup.json` first (what it is and holds,
 * readable with `tar -xzOf FILE backup.json`), then `pg/`, the database
 * directory. It never holds the secrets key or the admin token (see the
 * commands). A restore unpacks `pg/` into a staging directory inside DATA_DIR,
 * opens it there (the caller checks the key and adopts the admin token on it),
 * and only then moves it into place: a refused or failed restore leaves
 * DATA_DIR as it was.
 */
import crypto from "node:crypto";
import fs from "node:fs/promises";
import fsSync from "node:fs";
import path from "node:path";
import { pipeline } from "node:stream/promises";
import { sql } from "kysely";
import { Header, Pack, ReadEntry, extract, list } from "tar";
import { openDatabase, type Db } from "./database.ts";
import { lockDataDir } from "./data-dir-lock.ts";
import { isMigratablePrefix, pgliteVersion } from "./pglite-template.ts";
import { syncDir } from "../data-dir.ts";
import { makeOwnerOnly, ownerOnlyDir } from "../owner-only.ts";

const ARCHIVE_FORMAT = "platform-batteries-backup";
const ARCHIVE_FORMAT_VERSION = 1;
const MANIFEST = "backup.json";

/** What `backup.json` says; the caller adds its own facts (`describe`). */
export interface ArchiveManifest {
  format: typeof ARCHIVE_FORMAT;
  formatVersion: number;
  createdAt: string;
  /** The PGlite build that wrote the files (its Postgres on-disk format). */
  pglite: string;
  /** The migrations the database had, in order. */
  migrations: string[];
  [fact: string]: unknown;
}

/** A refusal of `backup` or `restore`, said in one line; nothing was changed. */
export class ArchiveRefusal extends Error {
  override readonly name = "ArchiveRefusal";
}

/** Whether `pgDir` holds a database (Postgres writes PG_VERSION first). */
async function holdsDatabase(pgDir: string): Promise<boolean> {
  return fsSync.existsSync(path.join(pgDir, "PG_VERSION"));
}

/** Files of a data directory that describe a running process, not the database. */
const NOT_ARCHIVED = new Set(["postmaster.pid", "postmaster.opts"]);

/**
 * Writes the database of `dataDir` to `file` (a new file, 0600: it holds
 * every row). Refused (`DataDirInUseError`) while another process holds
 * DATA_DIR. `describe` adds facts to the manifest from the open database.
 */
export async function writeArchive(options: {
  dataDir: string;
  file: string;
  describe?: (db: Db) => Promise<Record<string, unknown>>;
}): Promise<{ manifest: ArchiveManifest; bytes: number }> {
  const { dataDir, file } = options;
  const pgDir = path.join(dataDir, "pg");
  if (!(await holdsDatabase(pgDir)))
    throw new ArchiveRefusal(`backup: DATA_DIR ${dataDir} holds no database (no ${path.join(pgDir, "PG_VERSION")})`);
  if (fsSync.existsSync(file)) throw new ArchiveRefusal(`backup: ${file} exists: give the backup a new name`);
  // Opening takes DATA_DIR's lock: a running server makes this throw DataDirInUseError, and while it is
  // open no other process can start on it.
  const database = await openDatabase({ dataDir, poolSize: 1 });
  try {
    const { rows } = await sql<{ name: string }>`SELECT name FROM kysely_migration ORDER BY name`.execute(database.db);
    const manifest: ArchiveManifest = {
      format: ARCHIVE_FORMAT,
      formatVersion: ARCHIVE_FORMAT_VERSION,
      createdAt: new Date().toISOString(),
      pglite: await pgliteVersion(),
      migrations: rows.map((r) => r.name),
      ...(await options.describe?.(database.db)),
    };
    // Every committed change into the data files, so the copy needs no WAL replay to be read.
    await sql`CHECKPOINT`.execute(database.db);
    const partial = `${file}.partial-${process.pid}-${crypto.randomBytes(4).toString("hex")}`;
    try {
      await packDatabase(dataDir, manifest, partial);
      // Linked into place: a backup file is whole or absent, and an existing one is never replaced.
      await fs.link(partial, file).catch((err: NodeJS.ErrnoException) => {
        throw err.code === "EEXIST" ? new ArchiveRefusal(`backup: ${file} exists: give the backup a new name`) : err;
      });
    } finally {
      await fs.rm(partial, { force: true });
    }
    return { manifest, bytes: (await fs.stat(file)).size };
  } finally {
    await database.close();
  }
}

async function packDatabase(dataDir: string, manifest: ArchiveManifest, file: string): Promise<void> {
  const body = Buffer.from(JSON.stringify(manifest, null, 2) + "\n");
  const pack = new Pack({
    gzip: true,
    cwd: dataDir,
    portable: true,
    filter: (p) => !NOT_ARCHIVED.has(path.basename(p)),
  });
  const entry = new ReadEntry(
    new Header({ path: MANIFEST, mode: 0o600, size: body.length, type: "File", mtime: new Date() }),
  );
  pack.add(entry);
  entry.end(body);
  pack.add("pg");
  pack.end();
  const out = fsSync.createWriteStream(file, { flags: "wx", mode: 0o600 });
  await pipeline(pack, out);
  const handle = await fs.open(file, "r");
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** The manifest of an archive; an ArchiveRefusal when `file` is not one this code can restore. */
export async function readManifest(file: string): Promise<ArchiveManifest> {
  if (!fsSync.existsSync(file)) throw new ArchiveRefusal(`restore: ${file}: no such file`);
  let text: string | undefined;
  try {
    await list({
      file,
      filter: (p) => p === MANIFEST,
      onReadEntry: (entry) => {
        const chunks: Buffer[] = [];
        entry.on("data", (c: Buffer) => chunks.push(c));
        entry.on("end", () => (text = Buffer.concat(chunks).toString("utf8")));
      },
    });
  } catch {
    throw new ArchiveRefusal(`restore: ${file} is not a backup made by \`backup\` (not a gzip'd tar)`);
  }
  let manifest: ArchiveManifest | undefined;
  try {
    manifest = text === undefined ? undefined : (JSON.parse(text) as ArchiveManifest);
  } catch {
    manifest = undefined;
  }
  if (manifest?.format !== ARCHIVE_FORMAT || !Array.isArray(manifest.migrations))
    throw new ArchiveRefusal(`restore: ${file} is not a backup made by \`backup\` (no ${MANIFEST} in it)`);
  if (manifest.formatVersion > ARCHIVE_FORMAT_VERSION)
    throw new ArchiveRefusal(`restore: ${file} was made by a newer version (archive format ${manifest.formatVersion})`);
  if (!isMigratablePrefix(manifest.migrations))
    throw new ArchiveRefusal(
      `restore: ${file} holds a database migrated by a newer version (migrations this version does not know): restore it with that version or a later one`,
    );
  return manifest;
}

/**
 * Replaces the database of `dataDir` by the archive's. Refused while another
 * process holds DATA_DIR (`DataDirInUseError`), and when DATA_DIR holds a
 * database already, unless `force`. `prepare` runs on the unpacked database
 * before anything in DATA_DIR changes: it checks (a throw leaves DATA_DIR as
 * it was) and may write into it (it is migrated by the next start, not here).
 */
export async function restoreArchive(options: {
  dataDir: string;
  file: string;
  force: boolean;
  prepare?: (db: Db, manifest: ArchiveManifest) => Promise<void>;
}): Promise<ArchiveManifest> {
  const { dataDir, file, force } = options;
  const manifest = await readManifest(file);
  const unlock = await lockDataDir(dataDir);
  const staging = path.join(dataDir, `.restore-${process.pid}-${crypto.randomBytes(4).toString("hex")}`);
  try {
    const pgDir = path.join(dataDir, "pg");
    if (!force && (await holdsDatabase(pgDir)))
      throw new ArchiveRefusal(
        `restore: DATA_DIR ${dataDir} holds a database already: restore into an empty DATA_DIR, or pass --force to replace it`,
      );
    // A staging directory left by a restore that was killed (none runs now: this one holds the lock).
    for (const entry of await fs.readdir(dataDir))
      if (entry.startsWith(".restore-")) await fs.rm(path.join(dataDir, entry), { recursive: true, force: true });
    await ownerOnlyDir(staging);
    await extract({
      file,
      cwd: staging,
      // Only the database: the manifest was read above, and nothing else belongs in DATA_DIR.
      filter: (p) => p === "pg" || p === "pg/" || p.startsWith("pg/"),
    });
    if (!(await holdsDatabase(path.join(staging, "pg"))))
      throw new ArchiveRefusal(`restore: ${file} holds no database (no pg/PG_VERSION in it)`);
    await makeOwnerOnly(staging);
    const database = await openDatabase({ dataDir: staging, poolSize: 1 });
    try {
      await options.prepare?.(database.db, manifest);
    } finally {
      await database.close();
    }
    // The old database is moved aside before the new one is moved in, and removed only then: a crash in
    // between leaves both on disk, never neither.
    const aside = `${pgDir}.replaced-${process.pid}`;
    if (fsSync.existsSync(pgDir)) await fs.rename(pgDir, aside);
    await fs.rename(path.join(staging, "pg"), pgDir);
    await fs.rm(aside, { recursive: true, force: true });
    await syncDir(dataDir);
    return manifest;
  } finally {
    await fs.rm(staging, { recursive: true, force: true });
    await unlock();
  }
}
