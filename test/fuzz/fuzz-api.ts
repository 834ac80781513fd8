/**
 * The schema-driven fuzzer against the `/v1` API (`npm run fuzz`): Schemathesis (from PyPI, pinned with
 * its dependencies in requirements.txt, in a virtual environment under node_modules/.cache, made on first use) reads `/openapi.json` of a
 * live server and calls every `/v1` operation with the token of an app prepared as an operator would
 * (a sender, declared and set secrets, an event type, a queue with messages), checking that no answer is
 * a server error and that every status, content type and body is one the document declares; the
 * document's links chain calls (stateful phase). It ends non-zero on any failure, and prints its counts.
 *
 * FUZZ_MAX_EXAMPLES (default 30) bounds the examples per operation, FUZZ_MAX_SECONDS (default 180) the
 * whole run, FUZZ_SEED repeats a run, FUZZ_CHECKS replaces the checks; DATABASE_URL puts the server on
 * PostgreSQL (a database of its own), else the embedded one (docs/peer-suites.md).
 */
import { spawnSync, spawn } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import fsp from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { AdminService } from "../../gen/platform/admin/v1/admin_pb.js";
import { loadConfig } from "../../src/core/config.ts";
import { resolveDataDirSecrets } from "../../src/core/data-dir.ts";
import { createLogger } from "../../src/core/logger.ts";
import { createPlatformServer } from "../../src/platform-server.ts";
import { createScratchDatabase } from "../support/scratch-database.ts";

const root = path.resolve(import.meta.dirname, "../..");
// Schemathesis and everything it pulls in, pinned: Hypothesis floats within Schemathesis's range, and a
// new one drew differently (and met a Python parser bug) where the pinned one had passed.
const requirements = path.join(import.meta.dirname, "requirements.txt");
const pins = crypto.createHash("sha256").update(fs.readFileSync(requirements)).digest("hex").slice(0, 12);
const venv = path.join(root, `node_modules/.cache/schemathesis-${pins}`);
const maxExamples = process.env.FUZZ_MAX_EXAMPLES ?? "30";
const maxSeconds = process.env.FUZZ_MAX_SECONDS ?? "180";

function ensureSchemathesis(): string {
  const bin = path.join(venv, "bin/schemathesis");
  if (fs.existsSync(bin)) return bin;
  const run = (cmd: string, args: string[]) => {
    const r = spawnSync(cmd, args, { stdio: "inherit" });
    if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} failed`);
  };
  run("python3", ["-m", "venv", venv]);
  run(path.join(venv, "bin/pip"), ["install", "--quiet", "--disable-pip-version-check", "-r", requirements]);
  return bin;
}

const schemathesis = ensureSchemathesis();
const dataDir = await fsp.mkdtemp(path.join(os.tmpdir(), "pb-fuzz-"));
const database = process.env.DATABASE_URL
  ? await createScratchDatabase(process.env.DATABASE_URL, "pb_fuzz")
  : undefined;
const adminToken = "pba_fuzz_" + crypto.randomBytes(24).toString("base64url");
const { config } = await resolveDataDirSecrets(
  loadConfig({
    PORT: "0",
    HOST: "127.0.0.1",
    DATA_DIR: dataDir,
    ADMIN_TOKEN: adminToken,
    SECRETS_KEY: crypto.randomBytes(32).toString("base64"),
    LOG_LEVEL: process.env.FUZZ_LOG_LEVEL ?? "error",
    ...(database ? { DATABASE_URL: database.url } : {}),
  }),
);
const server = await createPlatformServer({ config, logger: createLogger(config.logLevel, process.stderr) });
const baseUrl = await server.listen();
let exitCode: number;
try {
  exitCode = await runSchemathesis(baseUrl, await prepareApp(baseUrl));
} finally {
  await server.close();
  await fsp.rm(dataDir, { recursive: true, force: true });
  await database?.drop();
}
process.exit(exitCode);

/** An app as an operator sets one up, so that operations can succeed (not only be refused); its token. */
async function prepareApp(url: string): Promise<string> {
  const auth: Interceptor = (next) => (req) => {
    req.header.set("authorization", `Bearer ${adminToken}`);
    return next(req);
  };
  const admin = createClient(
    AdminService,
    createConnectTransport({ baseUrl: url, httpVersion: "1.1", interceptors: [auth] }),
  );
  const { app } = await admin.createApp({ name: "fuzzed" });
  const appId = app!.id;
  await admin.updateApp({ appId, mailFrom: "fuzzed@apps.example.com" });
  await admin.declareSecrets({ appId, names: ["API_KEY", "OTHER_KEY"] });
  await admin.setSecret({ appId, name: "API_KEY", value: "sk_test_123" });
  const { token } = await admin.issueToken({ appId, label: "fuzzer" });
  const call = async (method: string, pathname: string, body?: unknown) => {
    const res = await fetch(url + pathname, {
      method,
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (!res.ok) throw new Error(`${method} ${pathname}: ${res.status} ${await res.text()}`);
  };
  await call("POST", "/v1/analytics/types", { name: "signup", properties: { plan: "string" } });
  await call("POST", "/v1/analytics/events", { events: [{ type: "signup", properties: { plan: "pro" } }] });
  for (let i = 0; i < 3; i++) await call("POST", "/v1/queues/jobs", { payload: { job: i } });
  await call("PUT", "/v1/queues/jobs/policy", { maxDeliveries: 3, deadLetterQueue: "jobs-failed" });
  return token;
}

async function runSchemathesis(url: string, token: string): Promise<number> {
  const args = [
    "run",
    `${url}/openapi.json`,
    "--url",
    url,
    "--header",
    `Authorization: Bearer ${token}`,
    "--include-path-regex",
    "^/v1/",
    "--checks",
    process.env.FUZZ_CHECKS ??
      "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,response_headers_conformance",
    "--phases",
    "examples,coverage,fuzzing,stateful",
    "--max-examples",
    maxExamples,
    "--max-time",
    maxSeconds,
    "--request-timeout",
    "30",
    "--workers",
    "2",
    "--seed",
    process.env.FUZZ_SEED ?? String(crypto.randomInt(1, 2 ** 31)),
    "--no-color",
  ];
  const child = spawn(schemathesis, args, { stdio: "inherit" });
  return await new Promise<number>((resolve) => child.on("exit", (code) => resolve(code ?? 1)));
}
