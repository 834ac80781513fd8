/**
 * The three packages install anywhere (docs/production.md, docs/connect.md):
 * the server (`platform-batteries`, compiled to dist/ with its
 * `platform-batteries` command), the app client and the generated Connect
 * code are packed (`npm pack`), installed into a scratch project outside the
 * repository (from the npm cache, `--prefer-offline`), and used there as
 * another team would: the installed command serves, runs admin commands and
 * prints its help with nothing but its own output; a strict TypeScript program
 * using the app client and a generated Connect client
 * (test/packages/scratch-program.ts, whose code is docs/connect.md's snippets)
 * compiles and runs against that server. Runs on the suite's backend.
 */
import { execFile, spawn, type ChildProcessByStdio } from "node:child_process";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import type { Readable } from "node:stream";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, type TestDatabase } from "../support/harness.ts";
import { nodeBinary } from "../support/service-process.ts";

const exec = promisify(execFile);
const root = path.resolve(import.meta.dirname, "../..");
const program = path.join(root, "test/packages/scratch-program.ts");
const rootPkg = JSON.parse(await fs.readFile(path.join(root, "package.json"), "utf8")) as {
  version: string;
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
};
const MB = 1024 * 1024;

type Outcome = { code: number; stdout: string; stderr: string };
function outcome(file: string, args: string[], options: { cwd?: string; env: NodeJS.ProcessEnv }): Promise<Outcome> {
  return new Promise((resolve) => {
    execFile(file, args, { ...options, maxBuffer: 64 * MB }, (err, stdout, stderr) =>
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

interface Packed {
  filename: string;
  files: { path: string }[];
}

let work: string;
let scratch: string;
let database: TestDatabase;
const packed: Record<"server" | "client" | "gen", Packed> = {} as never;
/** The installed command, and the environment every run of it gets (its keys from files, generated once). */
let command: string;
let env: NodeJS.ProcessEnv;

async function npm(args: string[], cwd: string): Promise<string> {
  return (await exec("npm", args, { cwd, maxBuffer: 64 * MB })).stdout;
}

async function pack(args: string[], cwd: string): Promise<Packed> {
  const out = await npm(["pack", "--json", "--ignore-scripts", "--pack-destination", work, ...args], cwd);
  return (JSON.parse(out) as Packed[])[0];
}

beforeAll(async () => {
  work = await fs.mkdtemp(path.join(os.tmpdir(), "pb-packages-"));
  // What prepack (`npm run build`) makes, made first so that pack's own output is only its JSON. The
  // client is built and packed from a copy: other test files read client/dist while this one runs.
  await npm(["run", "build:server"], root);
  await exec(nodeBinary, ["scripts/build-dashboard.ts", "--if-stale"], { cwd: root });
  packed.server = await pack([], root);
  const client = path.join(work, "client");
  for (const entry of ["package.json", "README.md", "LICENSE", "tsconfig.json", "src"])
    await fs.cp(path.join(root, "client", entry), path.join(client, entry), { recursive: true });
  await exec(path.join(root, "node_modules/.bin/tsc"), ["-p", client], { cwd: root });
  packed.client = await pack([], client);
  packed.gen = await pack(["--workspace", "gen"], root);

  scratch = path.join(work, "service");
  await fs.mkdir(scratch);
  const tarball = (p: Packed) => `file:${path.join(work, p.filename)}`;
  const pin = (name: string) => rootPkg.dependencies[name] ?? rootPkg.devDependencies[name];
  await fs.writeFile(
    path.join(scratch, "package.json"),
    JSON.stringify({
      name: "scratch-service",
      private: true,
      type: "module",
      dependencies: {
        "platform-batteries": tarball(packed.server),
        "@platform-batteries/client": tarball(packed.client),
        "@platform-batteries/gen": tarball(packed.gen),
        ...Object.fromEntries(
          ["@connectrpc/connect", "@connectrpc/connect-node", "@bufbuild/protobuf", "typescript", "@types/node"].map(
            (name) => [name, pin(name)],
          ),
        ),
      },
    }),
  );
  await npm(["install", "--prefer-offline", "--no-audit", "--no-fund"], scratch);

  database = await createTestDatabase();
  // The keys are generated once into files, as docs/production.md's example does.
  const keyFile = path.join(work, "secrets.key");
  const tokenFile = path.join(work, "admin.token");
  await fs.writeFile(keyFile, database.secretsKey + "\n", { mode: 0o600 });
  await fs.writeFile(tokenFile, database.adminToken + "\n", { mode: 0o600 });
  command = path.join(scratch, "node_modules/.bin/platform-batteries");
  env = {
    PATH: `${path.join(scratch, "node_modules/.bin")}:/usr/bin:/bin`,
    HOME: process.env.HOME,
    DATA_DIR: database.dataDir,
    PORT: "0",
    SECRETS_KEY_FILE: keyFile,
    ADMIN_TOKEN_FILE: tokenFile,
    ...(database.url ? { DATABASE_URL: database.url } : {}),
  };
}, 900_000);

afterAll(async () => {
  await database?.drop();
  if (work) await fs.rm(work, { recursive: true, force: true });
});

function serve(): Promise<{
  child: ChildProcessByStdio<null, Readable, Readable>;
  url: string;
  exited: Promise<number | string>;
}> {
  const child = spawn(command, ["serve"], { cwd: scratch, env, stdio: ["ignore", "pipe", "pipe"] });
  const exited = new Promise<number | string>((resolve) =>
    child.once("exit", (code, signal) => resolve(code ?? signal!)),
  );
  let out = "";
  let err = "";
  child.stderr.on("data", (d: Buffer) => (err += d.toString()));
  return new Promise((resolve, reject) => {
    void exited.then((code) => reject(new Error(`platform-batteries serve exited (${code}): ${err}${out}`)));
    child.stdout.on("data", (d: Buffer) => {
      out += d.toString();
      const line = out.split("\n").find((l) => l.includes('"platform batteries listening"'));
      if (line) resolve({ child, url: (JSON.parse(line) as { url: string }).url, exited });
    });
  });
}

describe("the packed packages, installed outside the repository", () => {
  it("are licensed Apache-2.0, versioned alike, publishable, and the server ships JavaScript", async () => {
    for (const [name, p] of Object.entries(packed)) {
      expect(
        p.files.map((f) => f.path),
        name,
      ).toContain("LICENSE");
    }
    const serverFiles = packed.server.files.map((f) => f.path);
    expect(serverFiles).toEqual(expect.arrayContaining(["dist/bin.js", "dist/main.js", "dist/cli.js", "CHANGELOG.md"]));
    expect(serverFiles.filter((f) => f.startsWith("test/"))).toEqual([]);
    const installed = async (name: string) =>
      JSON.parse(await fs.readFile(path.join(scratch, "node_modules", name, "package.json"), "utf8")) as {
        version: string;
        license: string;
        private?: boolean;
        dependencies?: Record<string, string>;
      };
    for (const name of ["platform-batteries", "@platform-batteries/client", "@platform-batteries/gen"]) {
      const pkg = await installed(name);
      expect(pkg, name).toMatchObject({ version: rootPkg.version, license: "Apache-2.0" });
      expect(pkg.private, name).toBeUndefined();
    }
    expect((await installed("@platform-batteries/gen")).dependencies).toHaveProperty("@bufbuild/protobuf");
  });

  it("platform-batteries --help prints the commands and nothing else", async () => {
    const help = await outcome(command, ["--help"], { cwd: scratch, env });
    expect(help.code).toBe(0);
    expect(help.stderr).toBe("");
    expect(help.stdout).toMatch(/^usage: platform-batteries \[serve\]/);
    for (const words of ["apps create", "tokens issue", "secrets check-key", "migrate", "admin-token adopt"])
      expect(help.stdout).toContain(words);
    expect(help.stdout).not.toMatch(/npm run cli|^>/m);
  });

  it("from a shell whose node is older than 24, the command runs on the Node 24 the package brought", async (ctx) => {
    const system = await outcome("/usr/bin/node", ["--version"], { env: {} });
    if (system.code !== 0 || Number(system.stdout.slice(1).split(".")[0]) >= 24) ctx.skip();
    const version = await outcome(command, ["--version"], { env: { ...env, PATH: "/usr/bin:/bin" } });
    expect(version).toEqual({ code: 0, stdout: `platform-batteries ${rootPkg.version}\n`, stderr: "" });
  });

  it("serves; its admin commands print only their answer; a strict program with both clients runs against it; then it stops on SIGTERM", async () => {
    const server = await serve();
    try {
      const adminEnv = { ...env, PLATFORM_ADMIN_URL: server.url };
      const created = await outcome(command, ["apps", "create", "scratch-app"], { cwd: scratch, env: adminEnv });
      expect(created.code, created.stderr).toBe(0);
      expect(JSON.parse(created.stdout)).toMatchObject({ name: "scratch-app" });
      const issued = await outcome(command, ["tokens", "issue", "scratch-app"], { cwd: scratch, env: adminEnv });
      expect(issued.code).toBe(0);
      // The token alone on stdout: TOKEN=$(platform-batteries tokens issue APP) captures it.
      expect(issued.stdout).toMatch(/^pbt_[A-Za-z0-9_-]+\n$/);
      const token = issued.stdout.trim();

      await fs.copyFile(program, path.join(scratch, "scratch-program.ts"));
      await fs.writeFile(
        path.join(scratch, "tsconfig.json"),
        JSON.stringify({
          compilerOptions: {
            target: "es2023",
            module: "nodenext",
            moduleResolution: "nodenext",
            strict: true,
            noUncheckedIndexedAccess: true,
            types: ["node"],
            outDir: "out",
          },
          files: ["scratch-program.ts"],
        }),
      );
      const compiled = await outcome(path.join(scratch, "node_modules/.bin/tsc"), ["-p", "."], { cwd: scratch, env });
      expect(compiled, "tsc --strict").toMatchObject({ code: 0 });
      const ran = await outcome(path.join(scratch, "node_modules/.bin/node"), ["out/scratch-program.js"], {
        cwd: scratch,
        env: { ...env, PLATFORM_ANALYTICS_URL: server.url, PLATFORM_SERVICE_TOKEN: token },
      });
      expect(ran.code, ran.stderr).toBe(0);
      const result = JSON.parse(ran.stdout) as { put: string[]; received: unknown[] };
      expect(result.put).toHaveLength(2);
      expect(result.received).toEqual(expect.arrayContaining([{ from: "client" }, { job: 42 }]));
      expect(result.received).toHaveLength(2);
    } finally {
      server.child.kill("SIGTERM");
    }
    expect(await server.exited).toBe(0);

    // With the server stopped, the direct-database commands: the key in the file opens the secrets.
    const migrated = await outcome(command, ["migrate"], { cwd: scratch, env });
    expect(migrated).toMatchObject({ code: 0, stderr: "" });
    expect(migrated.stdout).toMatch(/^migrations applied to (the embedded database|PostgreSQL database) .+\n$/);
    const checked = await outcome(command, ["secrets", "check-key"], { cwd: scratch, env });
    expect(checked.code, checked.stderr).toBe(0);
    expect(checked.stdout).toMatch(/^key id [0-9a-f]{16} opens this database/);
  });

  it("every TypeScript snippet of docs/connect.md is in the program, word for word", async () => {
    const doc = await fs.readFile(path.join(root, "docs/connect.md"), "utf8");
    const snippets = [...doc.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]);
    expect(snippets.length).toBeGreaterThanOrEqual(3);
    const code = await fs.readFile(program, "utf8");
    for (const snippet of snippets) expect(code, snippet).toContain(snippet);
  });
});
