import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { once } from "node:events";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cleanEnv, startWithNpm } from "../support/service-process.ts";

let dataDir: string;
beforeAll(async () => {
  dataDir = await fs.mkdtemp(path.join(os.tmpdir(), "pb-npm-start-"));
});
afterAll(() => fs.rm(dataDir, { recursive: true, force: true }));

describe("npm start (package.json)", () => {
  it("SIGTERM to the npm process stops the server itself, leaving nothing running", async () => {
    const started = await startWithNpm(cleanEnv({ DATA_DIR: dataDir, PORT: "0" }));
    expect((await fetch(`${started.url}/health`)).status).toBe(200);
    // The server's stdout is a pipe shared by npm and the node process it started: it closes only when
    // both have exited, so a server orphaned by npm keeps it open and this await never resolves.
    const stdoutClosed = once(started.child.stdout!, "close");
    started.child.kill("SIGTERM");
    await stdoutClosed;
    expect(started.stdout()).toContain('"signal":"SIGTERM"');
    await expect(fetch(`${started.url}/health`)).rejects.toThrow();
  });
});
