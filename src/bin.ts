#!/usr/bin/env -S node --max-semi-space-size=16 --heap-growing-percent=50 --liftoff-only
/**
 * `platform-batteries`: the installed package's one command (package.json
 * `bin`, compiled to dist/bin.js). With no argument, or `serve`, it runs the
 * server as `npm start` does (the V8 flags above are `npm start`'s: see
 * docs/benchmarks.md); `--help` lists everything; any other first word is an
 * operator command of `src/cli.ts` (`migrate`, `apps create`, `secrets
 * check-key`, ...). It is npm-free: nothing but the command's own output is
 * printed, so `TOKEN=$(platform-batteries tokens issue my-app)` captures the
 * token alone.
 *
 * Run by a Node older than 24 (a shell's `node` on a machine with Node 20),
 * it runs itself again on the Node 24 the package brings (the `node`
 * dependency), passing signals on, so the command works whatever `node` comes
 * first on PATH.
 */
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import path from "node:path";

const NODE_MAJOR = 24;
const args = process.argv.slice(2);
const require = createRequire(import.meta.url);

const HELP = `usage: platform-batteries [serve]        run the server (configuration from the environment)
       platform-batteries <command> ...   an operator command (below)
       platform-batteries --help | --version

The server's configuration: docs/configuration.md; running it: docs/production.md, docs/operations.md.
`;

function onNode24(): void {
  let node: string;
  try {
    node = path.join(path.dirname(require.resolve("node/package.json")), "bin", "node");
  } catch {
    process.stderr.write(`platform-batteries needs Node ${NODE_MAJOR} or newer (this is ${process.version})\n`);
    process.exit(1);
  }
  const child = spawn(node, [...process.execArgv, process.argv[1], ...args], { stdio: "inherit" });
  for (const signal of ["SIGTERM", "SIGINT", "SIGHUP"] as const) process.on(signal, () => child.kill(signal));
  child.on("exit", (code, signal) => {
    if (signal) process.kill(process.pid, signal);
    process.exit(code ?? 1);
  });
}

async function run(): Promise<void> {
  const [first] = args;
  if (first === undefined || first === "serve") {
    if (args.length > 1) {
      process.stderr.write(`serve takes no arguments (the server is configured by its environment)\n\n${HELP}`);
      process.exit(2);
    }
    await import("./main.ts");
    return;
  }
  if (first === "--version" || first === "-v") {
    const { name, version } = require("../package.json") as { name: string; version: string };
    process.stdout.write(`${name} ${version}\n`);
    return;
  }
  const cli = await import("./cli.ts");
  if (first === "--help" || first === "-h" || first === "help") {
    process.stdout.write(`${HELP}\n${cli.usage("platform-batteries")}\n`);
    return;
  }
  cli.main(args, "platform-batteries");
}

if (Number(process.versions.node.split(".")[0]) < NODE_MAJOR) onNode24();
else await run();
