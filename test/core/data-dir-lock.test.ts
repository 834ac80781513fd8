/**
 * DATA_DIR's lock (src/core/database/data-dir-lock.ts lockDataDir) between
 * processes: of openers racing for a lock left by a killed process, exactly
 * one takes it; the others are told who holds it.
 */
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { nodeBinary } from "../support/service-process.ts";

const HOLDER = new URL("../support/data-dir-lock-holder.ts", import.meta.url).pathname;
let scratch: string;
beforeAll(async () => {
  scratch = await fs.mkdtemp(path.join(os.tmpdir(), "pb-lock-"));
});
afterAll(() => fs.rm(scratch, { recursive: true, force: true }));

/** Starts a holder; resolves with what it said, and a way to let it go. */
function holder(dir: string): Promise<{ said: string; release(): Promise<void> }> {
  const child = spawn(nodeBinary, [HOLDER, dir], { stdio: ["pipe", "pipe", "inherit"] });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  return new Promise((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (chunk: Buffer) => {
      out += chunk.toString();
      if (out.endsWith("\n"))
        resolve({
          said: out.trim(),
          release: async () => {
            child.stdin.end();
            await exited;
          },
        });
    });
    child.once("error", reject);
  });
}

describe("lockDataDir (src/core/database/data-dir-lock.ts)", () => {
  it("of two processes racing for a stale lock, exactly one takes it, every time", async () => {
    // The pid of a process that has ended: its lock is stale.
    const gone = spawnSync(nodeBinary, ["-e", "process.stdout.write(String(process.pid))"], {
      encoding: "utf8",
    }).stdout;
    for (let trial = 0; trial < 20; trial++) {
      const dir = path.join(scratch, `d${trial}`);
      await fs.mkdir(dir, { mode: 0o700 });
      await fs.writeFile(path.join(dir, "pg.lock"), `${gone}\n`, { mode: 0o600 });
      const both = await Promise.all([holder(dir), holder(dir)]);
      const said = both.map((h) => h.said.split(" ")[0]).sort();
      await Promise.all(both.map((h) => h.release()));
      expect(said, `trial ${trial}`).toEqual(["in-use", "locked"]);
    }
  });
});
