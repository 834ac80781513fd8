/**
 * `npm run check:production`: proves the production install of docs/production.md
 * end to end, from the package a release would ship. It packs the project
 * (`npm pack`, whose `prepack` builds the dashboard and the client), unpacks
 * it into a temporary directory with the lockfile, runs `npm ci --omit=dev`
 * there (`--offline`: from this machine's npm cache, as a locked-down
 * deployment would from its mirror), checks that no dev tool was installed,
 * then `npm start` on an empty DATA_DIR and asks `/ready` and the dashboard
 * (compressed as the browser asks). Exits 1 with the step that failed.
 */
import { execFile, spawn } from "node:child_process";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, "..");
const DEV_TOOLS = ["vite", "eslint", "playwright-core", "typescript", "vitest", "prettier"];

function step(message: string): void {
  process.stdout.write(`== ${message}\n`);
}

const work = await fs.mkdtemp(path.join(os.tmpdir(), "pb-production-"));
try {
  step("npm run build, npm pack");
  // What `prepack` runs, run first so that pack's own output is only its JSON.
  await run("npm", ["run", "build"], { cwd: root, maxBuffer: 64 * 1024 * 1024 });
  const { stdout: packed } = await run("npm", ["pack", "--json", "--ignore-scripts", "--pack-destination", work], {
    cwd: root,
    maxBuffer: 64 * 1024 * 1024,
  });
  const [{ filename }] = JSON.parse(packed) as [{ filename: string }];
  const app = path.join(work, "app");
  await fs.mkdir(app);
  await run("tar", ["-xzf", path.join(work, filename), "-C", app, "--strip-components=1"]);
  await fs.copyFile(path.join(root, "package-lock.json"), path.join(app, "package-lock.json"));

  step("npm ci --omit=dev --offline");
  await run("npm", ["ci", "--omit=dev", "--offline", "--no-audit", "--no-fund"], {
    cwd: app,
    maxBuffer: 64 * 1024 * 1024,
  });
  const present: string[] = [];
  for (const tool of DEV_TOOLS) if (await exists(path.join(app, "node_modules", tool))) present.push(tool);
  if (present.length > 0) throw new Error(`dev tools were installed: ${present.join(", ")}`);

  step("npm start on an empty DATA_DIR");
  const dataDir = path.join(work, "data");
  const child = spawn("npm", ["start", "--silent"], {
    cwd: app,
    env: { PATH: process.env.PATH, HOME: process.env.HOME, DATA_DIR: dataDir, PORT: "0" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  let err = "";
  child.stderr.on("data", (d: Buffer) => (err += d.toString()));
  const url = await new Promise<string>((resolve, reject) => {
    child.stdout.on("data", (d: Buffer) => {
      out += d.toString();
      const line = out.split("\n").find((l) => l.includes('"platform batteries listening"'));
      if (line) resolve((JSON.parse(line) as { url: string }).url);
    });
    child.once("exit", (code) => reject(new Error(`npm start exited (${code}):\n${err}${out}`)));
  });
  try {
    const ready = await fetch(`${url}/ready`);
    if (ready.status !== 200) throw new Error(`/ready answered ${ready.status}`);
    const dashboard = await fetch(`${url}/dashboard/`, { headers: { "accept-encoding": "br" } });
    if (dashboard.status !== 200 || dashboard.headers.get("content-encoding") !== "br")
      throw new Error(`/dashboard/ answered ${dashboard.status}, ${dashboard.headers.get("content-encoding")}`);
    for (const line of out.trim().split("\n")) JSON.parse(line); // the log is JSON lines, nothing else
  } finally {
    child.kill("SIGTERM");
  }
  step("ok: installed without dev dependencies, started, ready, dashboard served");
} catch (failure) {
  process.stderr.write(
    `production install check failed: ${failure instanceof Error ? failure.message : String(failure)}\n`,
  );
  process.exitCode = 1;
} finally {
  await fs.rm(work, { recursive: true, force: true });
}

async function exists(p: string): Promise<boolean> {
  return fs.access(p).then(
    () => true,
    () => false,
  );
}
