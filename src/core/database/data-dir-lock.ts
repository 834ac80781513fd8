/**
 * The embedded database (PGlite in `DATA_DIR/pg`) may be opened by one
 * process at a time: two PGlite instances on one directory corrupt it. Every
 * opener (the server, `npm run cli -- migrate`, `secrets rotate-key`) takes
 * this lock first, so a second opener is refused with a clear line instead.
 *
 * The lock is a file holding the owner's pid, created exclusively. A lock
 * whose pid no longer runs (the owner was killed) is stale and taken over at
 * once, so a restart after `kill -9` is never blocked. A directory lock with
 * a heartbeat (proper-lockfile) would make that restart wait for staleness.
 */
import fs from "node:fs/promises";
import path from "node:path";
import { ownerOnlyDir } from "../owner-only.ts";

export class DataDirInUseError extends Error {
  override readonly name = "DataDirInUseError";
  readonly pid: number;
  constructor(dir: string, pid: number) {
    super(
      `DATA_DIR ${dir} is in use by another process (pid ${pid}, e.g. a running server): stop it first, or use the running server's API`,
    );
    this.pid = pid;
  }
}

function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: it runs, as another user.
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** Takes the lock of `dataDir`; resolves to its release. Throws `DataDirInUseError` while another live process holds it. */
export async function lockDataDir(dataDir: string): Promise<() => Promise<void>> {
  const file = path.join(dataDir, "pg.lock");
  await ownerOnlyDir(dataDir);
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      await fs.writeFile(file, `${process.pid}\n`, { flag: "wx", mode: 0o600 });
      return async () => {
        // Only our own lock is removed (a stale-lock takeover may have replaced it).
        const owner = Number((await fs.readFile(file, "utf8").catch(() => "")).trim());
        if (owner === process.pid) await fs.rm(file, { force: true });
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    }
    const owner = Number((await fs.readFile(file, "utf8").catch(() => "")).trim());
    if (Number.isInteger(owner) && owner > 0 && owner !== process.pid && isRunning(owner)) {
      throw new DataDirInUseError(dataDir, owner);
    }
    // Stale (its owner is gone), half-written, or our own from an earlier open that was not closed.
    await fs.rm(file, { force: true });
  }
  throw new Error(`DATA_DIR ${dataDir}: could not take ${path.basename(file)}`);
}
