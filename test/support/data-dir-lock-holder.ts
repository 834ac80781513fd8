/**
 * A process that takes DATA_DIR's lock (argv[2]) and says so on stdout
 * (`locked`, or `in-use <pid>`), then holds it until its stdin closes: two of
 * these started at once race for one lock.
 */
import { DataDirInUseError, lockDataDir } from "../../src/core/database/data-dir-lock.ts";

try {
  const release = await lockDataDir(process.argv[2]);
  process.stdout.write("locked\n");
  process.stdin.resume();
  process.stdin.on("end", () => void release().then(() => process.exit(0)));
} catch (err) {
  if (!(err instanceof DataDirInUseError)) throw err;
  process.stdout.write(`in-use ${err.pid}\n`);
  process.exit(0);
}
