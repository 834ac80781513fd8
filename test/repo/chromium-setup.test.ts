import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { cleanEnv, nodeBinary } from "../support/service-process.ts";

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

  it("without Chromium, a browser test file fails with that one line and the other files still run", async () => {
    const failed = await run(
      nodeBinary,
      ["node_modules/vitest/vitest.mjs", "run", "test/secrets/link-page.browser.test.ts", "test/core/batcher.test.ts"],
      { env: cleanEnv({ CHROMIUM_PATH: "/nonexistent/chromium", NO_COLOR: "1" }), maxBuffer: 16 * 1024 * 1024 },
    ).catch((e: { code: number; stdout: string; stderr: string }) => e);
    expect(failed).toMatchObject({ code: 1 });
    const output = failed.stdout + (failed as { stderr: string }).stderr;
    expect(output).toContain("The browser tests need Chromium at /nonexistent/chromium");
    expect(output).toMatch(/Test Files\s+1 failed \| 1 passed \(2\)/);
  }, 120_000);

  it("the system Chromium is there for the browser tests once the set-up ran", async () => {
    const script =
      'import("./test/support/chromium.ts").then(async (m) => { const b = await m.launchChromium(); console.log(b.version()); await b.close(); })';
    const { stdout } = await run(nodeBinary, ["-e", script], { env: cleanEnv({}) });
    expect(stdout).toMatch(/^\d+\.\d+/);
  });
});
