/**
 * A process that takes DATA_DIR's lock (argv[2]) and says so on stdout
 * (`locked`, or `in-use <pid>`), then holds it until its stdin closes: several
 * of these race for one lock. It says `ready` first and takes the lock when it
 * reads a line (`go`), so that racers started one after the other all try at
 * the same moment.
 */
import { DataDirInUseError, lockDataDir } from "../../src/core/database/data-dir-lock.ts";

process.stdout.write("ready\n");
process.stdin.setEncoding("utf8");
let input = "";
let started = false;
process.stdin.on("data", (chunk: string) => {
  input += chunk;
  if (started || !input.includes("\n")) return;
  started = true;
  void race();
});

let release: (() => Promise<void>) | undefined;
process.stdin.on("end", () => void (release ? release() : Promise.resolve()).then(() => process.exit(0)));

async function race(): Promise<void> {
  try {
    release = await lockDataDir(process.argv[2]);
    process.stdout.write("locked\n");
  } catch (err) {
    if (!(err instanceof DataDirInUseError)) throw err;
    process.stdout.write(`in-use ${err.pid}\n`);
  }
}
