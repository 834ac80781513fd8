import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { cleanEnv, nodeBinary } from "./support/service-process.ts";

const run = promisify(execFile);

describe("ensureChromium (test/support/chromium.ts)", () => {
  it("a Chromium that is missing where the caller pointed refuses with one line saying what to install", async () => {
    const script = 'import("./test/support/chromium.ts").then((m) => m.ensureChromium())';
    const failed = await run(nodeBinary, ["-e", script], {
      env: cleanEnv({ CHROMIUM_PATH: "/nonexistent/chromium" }),
    }).catch((e: { code: number; stderr: string }) => e);
    expect(failed).toMatchObject({ code: 1 });
    expect((failed as { stderr: string }).stderr).toContain(
      "The browser tests need Chromium at /nonexistent/chromium: install it (Debian/Ubuntu: apt-get install chromium) or set CHROMIUM_PATH.",
    );
  });

  it("the system Chromium is there for the browser tests once the set-up ran", async () => {
    const script =
      'import("./test/support/chromium.ts").then(async (m) => { const b = await m.launchChromium(); console.log(b.version()); await b.close(); })';
    const { stdout } = await run(nodeBinary, ["-e", script], { env: cleanEnv({}) });
    expect(stdout).toMatch(/^\d+\.\d+/);
  });
});
