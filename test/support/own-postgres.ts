/**
 * A PostgreSQL server that one test owns and may stop and start: a fresh
 * cluster (`initdb`) in a temporary directory on a free port, run with the
 * machine's PostgreSQL binaries. As root it runs as the `postgres` user
 * (the server refuses to run as root).
 */
import { execFile } from "node:child_process";
import fs from "node:fs";
import fsp from "node:fs/promises";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);

/** The directory of `pg_ctl` and `initdb`, or undefined where PostgreSQL's server binaries are not installed. */
export const postgresBin: string | undefined = (() => {
  const root = "/usr/lib/postgresql";
  if (!fs.existsSync(root)) return undefined;
  const versions = fs.readdirSync(root).filter((v) => fs.existsSync(path.join(root, v, "bin/pg_ctl")));
  versions.sort((a, b) => Number(b) - Number(a));
  return versions[0] ? path.join(root, versions[0], "bin") : undefined;
})();

export interface OwnPostgres {
  /** A connection string for its `postgres` database. */
  readonly url: string;
  stop(): Promise<void>;
  start(): Promise<void>;
  /** Stops it and removes its files. */
  destroy(): Promise<void>;
}

async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

export async function startOwnPostgres(): Promise<OwnPostgres> {
  if (!postgresBin) throw new Error("PostgreSQL's server binaries are not installed");
  const bin = postgresBin;
  const dir = await fsp.mkdtemp(path.join(os.tmpdir(), "pb-own-pg-"));
  const asRoot = process.getuid?.() === 0;
  if (asRoot) await run("chown", ["postgres", dir]);
  const pgRun = (tool: string, args: string[]) =>
    asRoot
      ? run("runuser", ["-u", "postgres", "--", path.join(bin, tool), ...args], { cwd: "/" })
      : run(path.join(bin, tool), args);
  const data = path.join(dir, "data");
  await pgRun("initdb", ["-D", data, "-A", "trust", "-U", "postgres", "--no-sync"]);
  const port = await freePort();
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off`;
  const self: OwnPostgres = {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    start: async () =>
      void (await pgRun("pg_ctl", ["-D", data, "-o", options, "-l", path.join(dir, "log"), "-w", "start"])),
    stop: async () => void (await pgRun("pg_ctl", ["-D", data, "-m", "fast", "-w", "stop"])),
    async destroy() {
      await self.stop().catch(() => {});
      await fsp.rm(dir, { recursive: true, force: true });
    },
  };
  await self.start();
  return self;
}
