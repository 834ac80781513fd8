/**
 * The systemd unit (`deploy/systemd/platform-batteries.service`): checked by
 * `systemd-analyze verify` (it must say nothing: an unknown or misspelt
 * directive is only a warning there), its exposure scored by `systemd-analyze
 * security --offline`, and its start command, key files and state directory
 * compared with what the server reads. The unit is verified as installed in
 * this checkout (its /opt/platform-batteries replaced by the repository, so
 * the Node it starts exists). Skipped, saying why, only where systemd-analyze
 * is missing (`.ci/run` installs it).
 */
import { execFile } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";

const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, "../..");
const UNIT = path.join(root, "deploy/systemd/platform-batteries.service");
const ANALYZE = ["/usr/bin/systemd-analyze", "/bin/systemd-analyze"].find((p) => fs.existsSync(p));
const INSTALLED = "/opt/platform-batteries";

const text = fs.readFileSync(UNIT, "utf8");
/** Every `Key=value` of the [Service] section, in order (keys may repeat). */
const service = text
  .slice(text.indexOf("[Service]"), text.indexOf("[Install]"))
  .split("\n")
  .filter((line) => /^[A-Za-z]+=/.test(line))
  .map((line) => [line.slice(0, line.indexOf("=")), line.slice(line.indexOf("=") + 1)] as const);
const values = (key: string) => service.filter(([k]) => k === key).map(([, v]) => v);
const environment = new Map(
  values("Environment")
    .flatMap((v) => v.split(" "))
    .map((pair) => [pair.slice(0, pair.indexOf("=")), pair.slice(pair.indexOf("=") + 1)]),
);

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "pb-systemd-"));
afterAll(() => fs.rmSync(scratch, { recursive: true, force: true }));

/** The unit as installed in this checkout, under `name`, with `edit` applied. */
function installedCopy(name: string, edit: (unit: string) => string = (u) => u): string {
  const file = path.join(scratch, name);
  fs.writeFileSync(file, edit(text.replaceAll(INSTALLED, root)));
  return file;
}

async function analyze(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return run(ANALYZE!, args).then(
    ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
    (err: { code: number; stdout: string; stderr: string }) => err,
  );
}

describe.skipIf(!ANALYZE)(
  `deploy/systemd/platform-batteries.service${ANALYZE ? "" : " (skipped: systemd-analyze is not installed)"}`,
  () => {
    it("passes systemd-analyze verify without a word, which speaks up about a misspelt directive", async () => {
      const verified = await analyze("verify", installedCopy("platform-batteries.service"));
      expect(verified).toMatchObject({ code: 0, stderr: "" });

      const misspelt = await analyze(
        "verify",
        installedCopy("misspelt.service", (u) => u.replace("NoNewPrivileges=yes", "NoNewPrivilege=yes")),
      );
      expect(misspelt.stderr).toContain("Unknown key 'NoNewPrivilege'");
    });

    it("is hardened: systemd-analyze security rates its exposure 2 or lower (of 10)", async () => {
      const rated = await analyze("security", "--offline=yes", "--threshold=20", installedCopy("score.service"));
      const exposure = Number(/Overall exposure level for \S+: ([\d.]+)/.exec(rated.stdout)?.[1]);
      expect(rated.code, rated.stdout + rated.stderr).toBe(0);
      expect(exposure).toBeLessThanOrEqual(2);
      for (const [key, value] of [
        ["NoNewPrivileges", "yes"],
        ["ProtectSystem", "strict"],
        ["ProtectHome", "yes"],
        ["PrivateTmp", "yes"],
        ["DynamicUser", "yes"],
        ["CapabilityBoundingSet", ""],
      ]) {
        expect(values(key), key).toEqual([value]);
      }
    });
  },
);

describe("deploy/systemd/platform-batteries.service, against the server", () => {
  it("starts the server as the image does, and stops it within the drain's 30 s", () => {
    const containerfile = fs.readFileSync(path.join(root, "Containerfile"), "utf8");
    const entrypoint = JSON.parse(/^ENTRYPOINT (\[.*\])$/m.exec(containerfile)![1]) as string[];
    const cmd = JSON.parse(/^CMD (\[.*\])$/m.exec(containerfile)![1]) as string[];
    const [workdir] = values("WorkingDirectory");
    const command = [...entrypoint, ...cmd].join(" ").replace("/app/", `${workdir}/`);
    expect(values("ExecStart")).toEqual([command]);
    expect(Number.parseInt(values("TimeoutStopSec")[0], 10)).toBeGreaterThan(30);
    expect(values("KillSignal")).toEqual(["SIGTERM"]);
  });

  it("hands the key files over as credentials, and keeps DATA_DIR in its state directory", () => {
    const credentials = new Map(values("LoadCredential").map((v) => v.split(":") as [string, string]));
    for (const variable of ["SECRETS_KEY_FILE", "ADMIN_TOKEN_FILE"]) {
      const name = /^%d\/(.+)$/.exec(environment.get(variable) ?? "")?.[1];
      expect(name, variable).toBeDefined();
      expect(credentials.get(name!), variable).toMatch(/^\/etc\/platform-batteries\//);
    }
    expect(environment.has("SECRETS_KEY") || environment.has("ADMIN_TOKEN")).toBe(false);
    expect(environment.get("DATA_DIR")).toBe(`%S/${values("StateDirectory")[0]}`);
    expect(values("StateDirectoryMode")).toEqual(["0700"]);
  });
});
