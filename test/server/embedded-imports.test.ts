/**
 * The embedded default loads nothing its configuration does not use: no AWS
 * SDK (SES, Bedrock), no MongoDB driver, and the API reference page's module
 * only when `/docs` is first asked for (docs/configuration.md "What the embedded default costs").
 * A fresh process starts the server with no configuration and lists the
 * CommonJS modules it loaded (the packages in question are all CommonJS or
 * load some).
 */
import { execFile } from "node:child_process";
import fs from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { nodeBinary } from "../support/service-process.ts";

const root = path.resolve(import.meta.dirname, "../..");

const script = `
import { createRequire } from "node:module";
import { loadConfig } from "./src/core/config.ts";
import { createLogger } from "./src/core/logger.ts";
import { resolveDataDirSecrets } from "./src/core/data-dir.ts";
import { createPlatformServer } from "./src/platform-server.ts";
const require = createRequire(import.meta.url);
const heavy = () => [...new Set(Object.keys(require.cache).map((f) => /node_modules\\/(mongodb|@aws-sdk\\/[^/]+|@scalar\\/[^/]+)\\//.exec(f)?.[1]).filter(Boolean))].sort();
const { config } = await resolveDataDirSecrets(loadConfig({ DATA_DIR: process.env.DATA_DIR, PORT: "0" }));
const server = await createPlatformServer({ config, logger: createLogger("warn") });
const url = await server.listen();
const ready = await fetch(url + "/ready");
const atStart = heavy();
const docs = await fetch(url + "/docs/");
const afterDocs = heavy();
await server.close();
process.stdout.write(JSON.stringify({ ready: ready.status, docs: docs.status, atStart, afterDocs }));
`;

describe("the embedded default's imports", () => {
  it("loads neither the AWS SDK nor the MongoDB driver, and the reference page's module only at /docs", async () => {
    const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), "pb-imports-"));
    try {
      const { stdout } = await promisify(execFile)(nodeBinary, ["--input-type=module", "-e", script], {
        cwd: root,
        env: { PATH: process.env.PATH, HOME: process.env.HOME, DATA_DIR: dataDir },
      });
      const result = JSON.parse(stdout) as { ready: number; docs: number; atStart: string[]; afterDocs: string[] };
      expect(result.ready).toBe(200);
      expect(result.atStart).toEqual([]);
      expect(result.docs).toBe(200);
      expect(result.afterDocs).toContain("@scalar/fastify-api-reference");
      expect(result.afterDocs.filter((p) => p === "mongodb" || p.startsWith("@aws-sdk/"))).toEqual([]);
    } finally {
      await fs.rm(dataDir, { recursive: true, force: true });
    }
  }, 120_000);
});
