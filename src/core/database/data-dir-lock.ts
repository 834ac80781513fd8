/**
 * The embedded database (PGlite in `DATA_DIR/pg`) may be opened by one
 * process at a time: two PGlite instances on one directory corrupt it. Every
 * opener (the server, `npm run cli -- migrate`, `secrets rotate-key`, `backup`, `restore`) takes
 * this lock first, so a second opener is refused with a clear line instead.
 *
 * The lock is a file holding the owner's pid, linked into place whole. A lock
 * whose pid no longer runs (the owner was killed) is stale and taken over at
 * once, so a restart after `kill -9` is never blocked; of several openers
 * taking over at the same moment, one gets it (`removeStale`). A directory lock with
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

/** How long an opener keeps trying while others take over a stale lock (each takeover takes a few file operations). */
const TAKEOVER_PATIENCE_MS = 5_000;

/** Takes the lock of `dataDir`; resolves to its release. Throws `DataDirInUseError` while another live process holds it. */
export async function lockDataDir(dataDir: string): Promise<() => Promise<void>> {
  const file = path.join(dataDir, "pg.lock");
  await ownerOnlyDir(dataDir);
  // Written whole under a name of its own, then linked into place: a lock is never seen half-written, and
  // a link fails when a lock is there (it never replaces one).
  const mine = `${file}.${process.pid}.${crypto.randomBytes(6).toString("hex")}`;
  await fs.writeFile(mine, `${process.pid}\n`, { flag: "wx", mode: 0o600 });
  try {
    const giveUpAt = Date.now() + TAKEOVER_PATIENCE_MS;
    while (Date.now() < giveUpAt) {
      try {
        await fs.link(mine, file);
        return async () => {
          // Only our own lock is removed (nobody takes over the lock of a live process).
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
      // Stale (its owner is gone), unreadable, or our own from an earlier open that was not closed.
      await removeStale(file, text, mine);
    }
    throw new Error(`DATA_DIR ${dataDir}: could not take ${path.basename(file)}`);
  } finally {
    await fs.rm(mine, { force: true });
  }
}

/**
 * Removes `file` if it still holds `text` (the lock judged stale), one opener
 * at a time: the remover first links its own pid file (`mine`) as
 * `<file>.takeover`. Without that gate, an opener that judged the old lock
 * stale could remove a fresh lock another opener had linked in the meantime,
 * and two processes would open one database. Under the gate the check and the
 * removal cannot be overtaken: nobody else removes a lock, and nobody links
 * one while the stale one is there. A gate left by a remover that died is
 * itself taken away, moved aside and checked (a narrower race: it needs a
 * remover killed within its few file operations and several openers at once).
 * Resolves when the caller should try to link its lock again.
 */
async function removeStale(file: string, text: string, mine: string): Promise<void> {
  const gate = `${file}.takeover`;
  try {
    await fs.link(mine, gate);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    const gateText = await fs.readFile(gate, "utf8").catch(() => undefined);
    if (gateText === undefined) return;
    const remover = Number(gateText.trim());
    if (Number.isInteger(remover) && remover > 0 && isRunning(remover)) {
      // Another opener is removing it: try again in a moment.
      await new Promise((resolve) => setTimeout(resolve, 2 + Math.random() * 8));
      return;
    }
    const aside = `${gate}.stale.${process.pid}.${crypto.randomBytes(6).toString("hex")}`;
    try {
      await fs.rename(gate, aside);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return;
      throw e;
    }
    const moved = await fs.readFile(aside, "utf8").catch(() => undefined);
    if (moved !== gateText) await fs.link(aside, gate).catch(() => undefined);
    await fs.rm(aside, { force: true });
    return;
  }
  try {
    const current = await fs.readFile(file, "utf8").catch(() => undefined);
    if (current === text) await fs.rm(file, { force: true });
  } finally {
    await fs.rm(gate, { force: true });
  }
}
