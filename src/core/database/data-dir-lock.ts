/**
 * The embedded database (PGlite in `DATA_DIR/pg`) may be opened by one
 * process at a time: two PGlite instances on one directory corrupt it. Every
 * opener (the server, `npm run cli -- migrate`, `secrets rotate-key`) takes
 * this lock first, so a second opener is refused with a clear line instead.
 *
 * The lock is a file holding the owner's pid, linked into place whole. A lock
 * whose pid no longer runs (the owner was killed) is stale and taken over at
 * once, so a restart after `kill -9` is never blocked; of several openers
 * taking over at the same moment, one gets it. A directory lock with
 * a heartbeat (proper-lockfile) would make that restart wait for staleness.
 */
import crypto from "node:crypto";
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
  // Written whole under a name of its own, then linked into place: a lock is never seen half-written, and
  // a link fails when a lock is there (it never replaces one).
  const mine = `${file}.${process.pid}.${crypto.randomBytes(6).toString("hex")}`;
  await fs.writeFile(mine, `${process.pid}\n`, { flag: "wx", mode: 0o600 });
  try {
    for (let attempt = 0; attempt < 5; attempt++) {
      try {
        await fs.link(mine, file);
        return async () => {
          // Only our own lock is removed (a stale-lock takeover may have replaced it).
          const owner = Number((await fs.readFile(file, "utf8").catch(() => "")).trim());
          if (owner === process.pid) await fs.rm(file, { force: true });
        };
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
      }
      const text = await fs.readFile(file, "utf8").catch(() => undefined);
      if (text === undefined) continue; // released meanwhile
      const owner = Number(text.trim());
      if (Number.isInteger(owner) && owner > 0 && owner !== process.pid && isRunning(owner)) {
        throw new DataDirInUseError(dataDir, owner);
      }
      // Stale (its owner is gone), unreadable, or our own from an earlier open that was not closed. Moved
      // aside under a name of our own rather than deleted: of two openers that judged it stale, the second
      // would otherwise delete the lock the first has just taken. What was moved is checked: if it is not
      // the lock judged stale, it is put back.
      const aside = `${file}.stale.${process.pid}.${crypto.randomBytes(6).toString("hex")}`;
      try {
        await fs.rename(file, aside);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === "ENOENT") continue;
        throw err;
      }
      const moved = await fs.readFile(aside, "utf8").catch(() => undefined);
      if (moved !== text) await fs.link(aside, file).catch(() => undefined);
      await fs.rm(aside, { force: true });
    }
    throw new Error(`DATA_DIR ${dataDir}: could not take ${path.basename(file)}`);
  } finally {
    await fs.rm(mine, { force: true });
  }
}
