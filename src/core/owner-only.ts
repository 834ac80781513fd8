/**
 * DATA_DIR holds the embedded database, the admin token and the secrets key:
 * it and everything in it are readable and writable by their owner only
 * (directories 0700, files 0600), whatever the umask. PGlite creates its files
 * 0666 regardless of the umask, so the database directory is made owner-only
 * again at every open and close; in between, DATA_DIR's own 0700 keeps other
 * users out of everything below it.
 */
import fs from "node:fs/promises";
import path from "node:path";

const OWNER_ONLY_DIR = 0o700;
const OWNER_ONLY_FILE = 0o600;

/** Creates `dir` (and missing parents) if needed and makes it 0700. */
export async function ownerOnlyDir(dir: string): Promise<void> {
  await fs.mkdir(dir, { recursive: true, mode: OWNER_ONLY_DIR });
  await fs.chmod(dir, OWNER_ONLY_DIR);
}

/** Makes `dir` and everything under it owner-only: directories 0700, files 0600 (links are left alone). */
export async function makeOwnerOnly(dir: string): Promise<void> {
  await fs.chmod(dir, OWNER_ONLY_DIR);
  for (const entry of await fs.readdir(dir, { withFileTypes: true, recursive: true })) {
    const file = path.join(entry.parentPath, entry.name);
    if (entry.isDirectory()) await fs.chmod(file, OWNER_ONLY_DIR);
    else if (entry.isFile()) await fs.chmod(file, OWNER_ONLY_FILE);
  }
}
