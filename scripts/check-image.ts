/**
 * `node scripts/check-image.ts`: builds the container image from the
 * Containerfile with podman and proves it works, on a machine that can build
 * images but not run containers. As root (it mounts and chroots):
 *
 * 1. the base image `debian:bookworm-slim`, made from Debian's packages with
 *    debootstrap (the mirror apt uses) when no registry can be pulled from,
 *    and imported once under that public name (kept for the next run);
 * 2. `podman build --isolation=chroot --format docker` (layers cached, so a
 *    second run with no change takes seconds);
 * 3. the image's configuration: the non-root user, DATA_DIR=/data as a
 *    volume, HOST=0.0.0.0, the port exposed, the health check, exec-form
 *    entrypoint;
 * 4. its files, from `podman image mount`: the application root's and not
 *    writable by the runtime user, /data the runtime user's alone, no dev
 *    dependency, no tests, the dashboard build shipped and the embedded
 *    database's template not (it is built on request only);
 * 5. its entrypoint, run by `chroot --userspec` as the image's user with the
 *    image's environment only (a fresh directory bound on /data, as a volume
 *    would be): it reaches /ready, the HEALTHCHECK command passes, the CLI in
 *    the image makes an app and a token, a put and a consume over /v1 work,
 *    and SIGTERM stops it with exit 0.
 *
 * Prints the image's size and how long each part took; exits 1 naming the
 * check that failed. IMAGE names the image to build (default
 * localhost/platform-batteries:check).
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs/promises";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, "..");
const IMAGE = process.env.IMAGE ?? "localhost/platform-batteries:check";
const BASE = "docker.io/library/debian:bookworm-slim";
const DEV_PACKAGES = ["vite", "typescript", "vitest", "eslint", "prettier", "playwright-core", "@bufbuild/buf"];
const NOT_SHIPPED = ["test", "docs", "bench", "client", "proto", "scripts", "dashboard/src", ".git"];
const started = Date.now();

function step(message: string): void {
  process.stdout.write(`== ${message} (${((Date.now() - started) / 1000).toFixed(1)} s)\n`);
}

function check(ok: boolean, message: string): asserts ok {
  if (!ok) throw new Error(message);
}

async function podman(...args: string[]): Promise<string> {
  const { stdout } = await run("podman", args, { maxBuffer: 64 * 1024 * 1024 });
  return stdout.trim();
}

async function exists(p: string): Promise<boolean> {
  return fs.lstat(p).then(
    () => true,
    () => false,
  );
}

/** The Debian mirror apt already uses (so the base comes from where this machine's packages do). */
async function aptMirror(): Promise<string> {
  const files = ["/etc/apt/sources.list"];
  for (const name of await fs.readdir("/etc/apt/sources.list.d").catch(() => [])) {
    if (name.endsWith(".list") || name.endsWith(".sources")) files.push(path.join("/etc/apt/sources.list.d", name));
  }
  for (const file of files) {
    const text = await fs.readFile(file, "utf8").catch(() => "");
    for (const line of text.split("\n")) {
      const uri = /^\s*(?:deb\s+(?:\[[^\]]*\]\s+)?|URIs:\s*)(\S+)/.exec(line)?.[1];
      if (uri && /\/debian\/?$/.test(uri)) return uri;
    }
  }
  return "http://deb.debian.org/debian";
}

/**
 * `debian:bookworm-slim` from Debian's packages: debootstrap's minimal
 * variant, trimmed as the published slim image is (no package lists or
 * downloaded packages, no documentation, manual pages or translations, and
 * no device files: the engine provides /dev).
 */
async function ensureBase(): Promise<void> {
  const present = await run("podman", ["image", "exists", BASE]).then(
    () => true,
    () => false,
  );
  if (present) return;
  const mirror = await aptMirror();
  step(`making ${BASE} with debootstrap from ${mirror}`);
  const rootfs = await fs.mkdtemp(path.join(os.tmpdir(), "pb-rootfs-"));
  try {
    await run("debootstrap", ["--variant=minbase", "bookworm", rootfs, mirror], { maxBuffer: 64 * 1024 * 1024 });
    for (const dir of ["var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "dev"]) {
      for (const entry of await fs.readdir(path.join(rootfs, dir))) {
        if (entry !== "partial" && entry !== "lock") await fs.rm(path.join(rootfs, dir, entry), { recursive: true });
      }
    }
    await fs.rm(path.join(rootfs, "usr/share/locale"), { recursive: true, force: true });
    await fs.mkdir(path.join(rootfs, "usr/share/locale"));
    await run("sh", [
      "-c",
      'tar -C "$1" -c . | podman import --change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" --change \'CMD ["bash"]\' - "$2"',
      "sh",
      rootfs,
      BASE,
    ]);
  } finally {
    await fs.rm(rootfs, { recursive: true, force: true });
  }
}

/**
 * The image build. The host's CA bundle is given to the build stage as one more local CA (Debian's
 * ca-certificates adds it to the system's list, which the build's npm trusts), so a registry reached
 * through a TLS-inspecting proxy is trusted as the host trusts it; and the host's npm cache is lent
 * to the build, so `npm ci --prefer-offline` there fetches only what the host has not.
 */
async function build(): Promise<void> {
  // npm ci opens more files at once than podman's default limit for a build step (EMFILE in its cache): the
  // step gets this process's own hard limit (podman may not raise it past that).
  const hard = (await run("sh", ["-c", "ulimit -Hn"]).catch(() => ({ stdout: "" }))).stdout.trim();
  const nofile = /^\d+$/.test(hard) ? hard : "4096";
  const args = [
    "build",
    "--isolation=chroot",
    "--ulimit",
    `nofile=${nofile}:${nofile}`,
    "--format",
    "docker",
    "--layers",
    "-t",
    IMAGE,
    "-f",
    "Containerfile",
  ];
  const ca = "/etc/ssl/certs/ca-certificates.crt";
  if (await exists(ca)) args.push("-v", `${ca}:/usr/local/share/ca-certificates/build-host.crt:ro`);
  const npmCache = (await run("npm", ["config", "get", "cache"]).catch(() => ({ stdout: "" }))).stdout.trim();
  if (npmCache && (await exists(npmCache))) args.push("-v", `${npmCache}:/root/.npm`);
  const log = path.join(os.tmpdir(), `pb-image-build-${process.pid}.log`);
  const out = await fs.open(log, "w");
  try {
    const code = await new Promise<number | null>((resolve, reject) => {
      const child = spawn("podman", [...args, "."], { cwd: root, stdio: ["ignore", out.fd, out.fd] });
      child.once("error", reject);
      child.once("exit", resolve);
    });
    if (code !== 0) {
      const text = await fs.readFile(log, "utf8");
      const lines = text.split("\n").filter((l) => !l.includes("EBADENGINE"));
      throw new Error(`podman build failed (${code}):\n${lines.slice(-40).join("\n")}`);
    }
  } finally {
    await out.close();
    await fs.rm(log, { force: true });
  }
}

interface ImageConfig {
  User: string;
  Env: string[];
  ExposedPorts?: Record<string, object>;
  Volumes?: Record<string, object>;
  Entrypoint: string[];
  Cmd: string[];
  WorkingDir: string;
  StopSignal?: string;
  Healthcheck?: { Test: string[] };
}

async function inspect(image: string): Promise<{ size: number; config: ImageConfig }> {
  const [info] = JSON.parse(await podman("image", "inspect", image)) as [
    { Size: number; Config: ImageConfig; Healthcheck?: { Test: string[] } },
  ];
  // podman shows a docker-format image's health check beside its configuration, not in it.
  return { size: info.Size, config: { ...info.Config, Healthcheck: info.Config.Healthcheck ?? info.Healthcheck } };
}

function checkConfig(config: ImageConfig): { uid: number; gid: number; port: string } {
  const env = new Map(config.Env.map((e) => [e.slice(0, e.indexOf("=")), e.slice(e.indexOf("=") + 1)]));
  const [uid, gid] = config.User.split(":").map(Number);
  check(uid > 0 && gid > 0, `the image's user is ${config.User}: a numeric non-root uid:gid was expected`);
  check(env.get("DATA_DIR") === "/data", `DATA_DIR is ${env.get("DATA_DIR")}, not /data`);
  check(env.get("HOST") === "0.0.0.0", `HOST is ${env.get("HOST")}, not 0.0.0.0`);
  const port = env.get("PORT") ?? "8080";
  check(Object.keys(config.ExposedPorts ?? {}).includes(`${port}/tcp`), `port ${port} is not exposed`);
  check(Object.keys(config.Volumes ?? {}).includes("/data"), "/data is not a volume");
  check(config.Entrypoint[0]?.startsWith("/"), "the entrypoint is not in exec form (node must be PID 1)");
  check(config.Healthcheck?.Test[0] === "CMD", "no HEALTHCHECK in exec form (build with --format docker)");
  check(!config.Healthcheck.Test.some((a) => a.includes("curl")), "the HEALTHCHECK needs curl");
  check((config.StopSignal ?? "SIGTERM") === "SIGTERM", `the stop signal is ${config.StopSignal}`);
  return { uid, gid, port };
}

/** Every file of the application root's (uid 0) and written by root only; /data the runtime user's alone. */
async function checkFiles(mount: string, workdir: string, uid: number, gid: number): Promise<void> {
  const app = path.join(mount, workdir);
  let count = 0;
  for (const entry of await fs.readdir(app, { recursive: true, withFileTypes: true })) {
    const file = path.join(entry.parentPath, entry.name);
    const stat = await fs.lstat(file);
    count++;
    check(stat.uid === 0 && stat.gid === 0, `${path.relative(mount, file)} is owned by ${stat.uid}:${stat.gid}`);
    if (!stat.isSymbolicLink()) {
      check(
        (stat.mode & 0o022) === 0,
        `${path.relative(mount, file)} is writable by others (${stat.mode.toString(8)})`,
      );
    }
  }
  check(count > 1000, `only ${count} files under ${workdir}`);
  const data = await fs.stat(path.join(mount, "data"));
  check(data.uid === uid && data.gid === gid, `/data is owned by ${data.uid}:${data.gid}, not ${uid}:${gid}`);
  check((data.mode & 0o777) === 0o700, `/data has mode ${(data.mode & 0o777).toString(8)}, not 700`);
  for (const name of DEV_PACKAGES) {
    check(!(await exists(path.join(app, "node_modules", name))), `dev dependency ${name} is in the image`);
  }
  for (const name of NOT_SHIPPED) check(!(await exists(path.join(app, name))), `${name} is in the image`);
  check(await exists(path.join(app, "dashboard/dist/index.html")), "the dashboard's build is missing");
  // The template is built only with EMBEDDED_TEMPLATE=true: the entrypoint below then starts its embedded
  // database by initdb, as a new volume does.
  const cache = path.join(app, "node_modules/.cache/platform-batteries");
  const templates = await fs.readdir(cache).catch(() => []);
  check(!templates.some((t) => t.startsWith("pglite-")), "the embedded database's template is in the image");
}

async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** Runs `argv` inside the image as uid:gid, in the working directory, with the image's environment only. */
function inImage(mount: string, user: string, workdir: string, env: string[], argv: string[]): ChildProcess {
  return spawn("chroot", [`--userspec=${user}`, mount, "/usr/bin/env", "-i", "-C", workdir, ...env, ...argv], {
    env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin" },
    stdio: ["ignore", "pipe", "pipe"],
  });
}

async function finished(child: ChildProcess): Promise<{ code: number | null; stdout: string; stderr: string }> {
  let stdout = "";
  let stderr = "";
  child.stdout?.on("data", (d: Buffer) => (stdout += d.toString()));
  child.stderr?.on("data", (d: Buffer) => (stderr += d.toString()));
  const code = await new Promise<number | null>((resolve, reject) => {
    child.once("error", reject);
    child.once("exit", resolve);
  });
  return { code, stdout, stderr };
}

async function json(url: string, init: { method?: string; token?: string; body?: unknown } = {}): Promise<unknown> {
  const res = await fetch(url, {
    method: init.method ?? (init.body === undefined ? "GET" : "POST"),
    headers: {
      ...(init.token ? { authorization: `Bearer ${init.token}` } : {}),
      ...(init.body === undefined ? {} : { "content-type": "application/json" }),
    },
    body: init.body === undefined ? undefined : JSON.stringify(init.body),
  });
  const text = await res.text();
  check(res.ok, `${init.method ?? "POST"} ${new URL(url).pathname} answered ${res.status}: ${text}`);
  return JSON.parse(text) as unknown;
}

async function runEntrypoint(mount: string, config: ImageConfig, uid: number, gid: number): Promise<void> {
  const user = `${uid}:${gid}`;
  const scratch = await fs.mkdtemp(path.join(os.tmpdir(), "pb-image-run-"));
  const volume = path.join(scratch, "data");
  const tmp = path.join(scratch, "tmp");
  await fs.mkdir(volume, { mode: 0o700 });
  await fs.chown(volume, uid, gid);
  await fs.mkdir(tmp);
  await fs.chmod(tmp, 0o1777);
  const mounted: string[] = [];
  let server: ChildProcess | undefined;
  try {
    // A volume on /data (as the engine would make it: the image's /data, owned by the user) and a
    // writable /tmp (Node's compile cache), on top of the read-only image.
    for (const [from, to] of [
      [volume, "data"],
      [tmp, "tmp"],
    ]) {
      await run("mount", ["--bind", from, path.join(mount, to)]);
      mounted.unshift(path.join(mount, to));
    }
    const port = await freePort();
    const env = [...config.Env.filter((e) => !e.startsWith("PORT=")), `PORT=${port}`];
    const base = `http://127.0.0.1:${port}`;

    step(`entrypoint as ${user}: ${[...config.Entrypoint, ...config.Cmd].join(" ")}`);
    server = inImage(mount, user, config.WorkingDir, env, [...config.Entrypoint, ...config.Cmd]);
    const exited = finished(server);
    const listening = new Promise<void>((resolve, reject) => {
      let out = "";
      server?.stdout?.on("data", (d: Buffer) => {
        out += d.toString();
        if (out.includes('"platform batteries listening"')) resolve();
      });
      exited.then(
        (r) => reject(new Error(`the server exited (${r.code}) before listening:\n${r.stderr}${r.stdout}`)),
        reject,
      );
    });
    await listening;
    const ready = await fetch(`${base}/ready`);
    check(ready.status === 200, `/ready answered ${ready.status}: ${await ready.text()}`);

    step("the HEALTHCHECK command, in the image");
    const health = await finished(inImage(mount, user, config.WorkingDir, env, config.Healthcheck!.Test.slice(1)));
    check(health.code === 0, `the health check exited ${health.code}: ${health.stderr}`);

    step("the image's CLI makes an app and a service token; a put and a consume over /v1");
    const cli = async (...args: string[]) => {
      const r = await finished(
        inImage(mount, user, config.WorkingDir, env, [config.Entrypoint[0], "src/cli.ts", "--url", base, ...args]),
      );
      check(r.code === 0, `cli ${args.join(" ")} exited ${r.code}: ${r.stderr}`);
      return r.stdout.trim();
    };
    await cli("apps", "create", "image-check");
    const token = (await cli("tokens", "issue", "image-check")).split("\n").find((l) => l.startsWith("pbt_"));
    check(token !== undefined, "tokens issue printed no pbt_ token");
    const payload = { check: "image", n: 1 };
    const put = (await json(`${base}/v1/queues/jobs`, { token, body: { payload } })) as { id?: string };
    check(typeof put.id === "string", `the put answered ${JSON.stringify(put)}`);
    const consumed = (await json(`${base}/v1/queues/jobs/consume`, { token, body: {} })) as {
      message: { id: string; payload: unknown; receipt: string } | null;
    };
    check(
      consumed.message?.id === put.id && JSON.stringify(consumed.message.payload) === JSON.stringify(payload),
      `the consume answered ${JSON.stringify(consumed)}`,
    );
    const acked = (await json(`${base}/v1/queues/_ack`, { token, body: { receipt: consumed.message.receipt } })) as {
      acked: boolean;
    };
    check(acked.acked, "the ack was refused");

    step("SIGTERM");
    server.kill("SIGTERM");
    const stopped = await exited;
    server = undefined;
    check(stopped.code === 0, `the server exited ${stopped.code} on SIGTERM:\n${stopped.stderr}`);
    for (const line of stopped.stdout.trim().split("\n")) JSON.parse(line); // the log is JSON lines only
    check(stopped.stdout.includes('"shutting down"'), "the server did not log its shutdown");
    check(await exists(path.join(volume, "pg", "PG_VERSION")), "the embedded database was not made in /data");
  } finally {
    if (server && server.exitCode === null) server.kill("SIGKILL");
    for (const dir of mounted) await run("umount", ["--lazy", dir]).catch(() => undefined);
    await fs.rm(scratch, { recursive: true, force: true });
  }
}

try {
  check(process.getuid?.() === 0, "run as root (the check mounts the image and chroots into it)");
  await ensureBase();
  step(`podman build ${IMAGE}`);
  const buildStart = Date.now();
  const previous = await podman("image", "inspect", "--format", "{{.Id}}", IMAGE).catch(() => undefined);
  await build();
  // The image this build replaced (the build stage's layers stay: they are the next build's cache).
  const current = await podman("image", "inspect", "--format", "{{.Id}}", IMAGE);
  if (previous && previous !== current) await podman("rmi", previous).catch(() => undefined);
  const buildSeconds = (Date.now() - buildStart) / 1000;
  const { size, config } = await inspect(IMAGE);
  const { size: baseSize } = await inspect(BASE);
  step(`configuration: user ${config.User}, ${config.Env.filter((e) => !e.startsWith("PATH=")).join(" ")}`);
  const { uid, gid } = checkConfig(config);
  const mount = await podman("image", "mount", IMAGE);
  try {
    step("files");
    await checkFiles(mount, config.WorkingDir, uid, gid);
    await runEntrypoint(mount, config, uid, gid);
  } finally {
    await podman("image", "unmount", IMAGE).catch(() => undefined);
  }
  const mb = (n: number) => (n / 1e6).toFixed(0);
  step(
    `ok: ${IMAGE} ${mb(size)} MB (base ${mb(baseSize)} MB, the application ${mb(size - baseSize)} MB), ` +
      `built in ${buildSeconds.toFixed(0)} s`,
  );
} catch (failure) {
  process.stderr.write(`image check failed: ${failure instanceof Error ? failure.message : String(failure)}\n`);
  process.exitCode = 1;
}
