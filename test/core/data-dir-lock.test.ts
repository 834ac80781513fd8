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

/** Starts a holder; resolves once it is ready, with a way to start its race, what it then said, and its release. */
function holder(dir: string): Promise<{ go(): Promise<string>; release(): Promise<void> }> {
  const child = spawn(nodeBinary, [HOLDER, dir], { stdio: ["pipe", "pipe", "inherit"] });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const lines: string[] = [];
  const waiting: ((line: string) => void)[] = [];
  let out = "";
  child.stdout.on("data", (chunk: Buffer) => {
    out += chunk.toString();
    let end;
    while ((end = out.indexOf("\n")) >= 0) {
      const line = out.slice(0, end);
      out = out.slice(end + 1);
      const w = waiting.shift();
      if (w) w(line);
      else lines.push(line);
    }
  });
  const nextLine = () =>
    new Promise<string>((resolve) => (lines.length ? resolve(lines.shift()!) : waiting.push(resolve)));
  return new Promise((resolve, reject) => {
    child.once("error", reject);
    void nextLine().then((ready) => {
      if (ready !== "ready") return reject(new Error(`holder said ${ready}`));
      resolve({
        go: () => {
          child.stdin.write("go\n");
          return nextLine();
        },
        release: async () => {
          child.stdin.end();
          await exited;
        },
      });
    });
  });
}

/** Writes a lock left by a process that has ended into a new directory `name`. */
async function staleLockDir(name: string, gone: string): Promise<string> {
  const dir = path.join(scratch, name);
  await fs.mkdir(dir, { mode: 0o700 });
  await fs.writeFile(path.join(dir, "pg.lock"), `${gone}\n`, { mode: 0o600 });
  return dir;
}

describe("lockDataDir (src/core/database/data-dir-lock.ts)", () => {
  // The pid of a process that has ended: its lock is stale.
  const gone = () =>
    spawnSync(nodeBinary, ["-e", "process.stdout.write(String(process.pid))"], { encoding: "utf8" }).stdout;

  for (const racers of [2, 4]) {
    it(`of ${racers} processes racing for a stale lock at one moment, exactly one takes it, every time`, async () => {
      const pid = gone();
      for (let trial = 0; trial < 20; trial++) {
        const dir = await staleLockDir(`r${racers}-${trial}`, pid);
        const holders = await Promise.all(Array.from({ length: racers }, () => holder(dir)));
        const said = (await Promise.all(holders.map((h) => h.go()))).map((s) => s.split(" ")[0]).sort();
        await Promise.all(holders.map((h) => h.release()));
        expect(said, `trial ${trial}`).toEqual(["locked", ...Array<string>(racers - 1).fill("in-use")].sort());
      }
    });
  }
});
