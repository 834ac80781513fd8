/**
 * Values, link tokens and service tokens never reach the log: the real
 * server process (`src/main.ts`) at LOG_LEVEL=trace goes through the whole
 * secrets flow, and its output is searched afterwards.
 */
import { spawn, type ChildProcess } from "node:child_process";
import crypto from "node:crypto";
import { once } from "node:events";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient } from "@connectrpc/connect";
import { AdminService } from "../../gen/platform/admin/v1/admin_pb.js";
import { SecretsService } from "../../gen/platform/secrets/v1/secrets_pb.js";
import { createTestDatabase, transportFor, type TestDatabase } from "../support/harness.ts";

let database: TestDatabase;
let child: ChildProcess;
let output = "";
let url: string;
const adminToken = "pba_log_test_" + crypto.randomBytes(24).toString("base64url");

beforeAll(async () => {
  database = await createTestDatabase();
  child = spawn(process.execPath, ["src/main.ts"], {
    env: {
      PATH: process.env.PATH,
      PORT: "0",
      HOST: "127.0.0.1",
      DATA_DIR: database.dataDir,
      ...(database.url ? { DATABASE_URL: database.url } : {}),
      ADMIN_TOKEN: adminToken,
      SECRETS_KEY: crypto.randomBytes(32).toString("base64"),
      LOG_LEVEL: "trace",
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  url = await new Promise<string>((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      output += chunk.toString("utf8");
      // The line of a server ready to serve (an earlier one says where it listens while its database opens).
      const match = /"url":"(http:\/\/127\.0\.0\.1:\d+)"[^\n]*"msg":"platform batteries listening"/.exec(output);
      if (match) resolve(match[1]);
    };
    child.stdout!.on("data", onData);
    child.stderr!.on("data", onData);
    child.once("exit", (code) => reject(new Error(`server exited with ${code}: ${output}`)));
  });
});

afterAll(async () => {
  if (child && child.exitCode === null) {
    child.kill("SIGTERM");
    await once(child, "exit");
  }
  await database?.drop();
});

describe("the server's log", () => {
  it("shows requests to the link page by route, and no value or token", async () => {
    const admin = createClient(AdminService, transportFor(url, "connect", adminToken));
    const { app } = await admin.createApp({ name: "log-test" });
    const { token: serviceToken } = await admin.issueToken({ appId: app!.id });
    await admin.declareSecrets({ appId: app!.id, names: ["API_KEY", "OTHER"] });
    const ownerValue = "owner-value-" + crypto.randomBytes(8).toString("hex");
    const formValue = "form-value-" + crypto.randomBytes(8).toString("hex");
    const putValue = "put-value-" + crypto.randomBytes(8).toString("hex");
    await admin.setSecret({ appId: app!.id, name: "API_KEY", value: ownerValue });
    // Refused values are not logged either.
    await admin.setSecret({ appId: app!.id, name: "NOT_DECLARED", value: ownerValue }).catch(() => {});

    const secrets = createClient(SecretsService, transportFor(url, "grpc", serviceToken));
    const links: string[] = [];
    for (const name of ["API_KEY", "OTHER"]) {
      const link = await secrets.createSecretLink({ name });
      links.push(new URL(link.url).pathname.split("/").pop()!);
    }
    const page = await fetch(`${url}/secret-links/${links[0]}`).then((r) => r.text());
    const csrf = /name="csrf" value="([^"]+)"/.exec(page)![1];
    const posted = await fetch(`${url}/secret-links/${links[0]}`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ csrf, value: formValue }),
    });
    expect(posted.status).toBe(200);
    const put = await fetch(`${url}/secret-links/${links[1]}`, {
      method: "PUT",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ value: putValue }),
    });
    expect(put.status).toBe(200);
    expect(
      (
        await fetch(`${url}/secret-links/${links[1]}`, {
          method: "PUT",
          headers: { "content-type": "application/json" },
          body: "{oops",
        })
      ).status,
    ).toBe(400);
    expect((await secrets.getSecret({ name: "API_KEY" })).value).toBe(formValue);
    const rest = await fetch(`${url}/v1/secrets/OTHER`, { headers: { authorization: `Bearer ${serviceToken}` } }).then(
      (r) => r.json(),
    );
    expect(rest.value).toBe(putValue);

    child.kill("SIGTERM");
    await once(child, "exit");
    expect(output).toContain('"route":"/secret-links/:token"');
    expect(output).toContain('"route":"/v1/secrets/:name"');
    for (const secret of [ownerValue, formValue, putValue, serviceToken, adminToken, ...links]) {
      expect(output).not.toContain(secret);
    }
  });
});
