/**
 * A put that got 200 is committed before the answer: it survives `kill -9`
 * of the server process. The server runs as a child process on the backend
 * of this run (a fresh PostgreSQL database, or PGlite in a fresh DATA_DIR).
 */
import crypto from "node:crypto";
import { afterAll, beforeAll, expect, it } from "vitest";
import { createClient } from "@connectrpc/connect";
import { AdminService } from "../../gen/platform/admin/v1/admin_pb.js";
import { createTestDatabase, transportFor, type TestDatabase } from "../support/harness.ts";
import { freePort, startChildServer, type ChildServer } from "./support/child-server.ts";

let database: TestDatabase;
let server: ChildServer | undefined;
const adminToken = "pba_test_" + crypto.randomBytes(24).toString("base64url");

beforeAll(async () => {
  database = await createTestDatabase();
});
afterAll(async () => {
  await server?.stop();
  await database?.drop();
});

it("puts answered 200 survive kill -9 of the server, and are consumed after a restart", async () => {
  const port = await freePort();
  const env = {
    DATA_DIR: database.dataDir,
    ADMIN_TOKEN: adminToken,
    SECRETS_KEY: crypto.randomBytes(32).toString("base64"),
    ...(database.url ? { DATABASE_URL: database.url } : {}),
  };
  server = await startChildServer(env, port);
  const admin = createClient(AdminService, transportFor(server.url, "connect", adminToken));
  const { app } = await admin.createApp({ name: "durable" });
  const { token } = await admin.issueToken({ appId: app!.id });
  const headers = { authorization: `Bearer ${token}`, "content-type": "application/json" };

  // Concurrent puts; the process is killed while later ones may still be in flight.
  const answered = new Set<string>();
  const puts = Array.from({ length: 8 }, async (_, w) => {
    for (let i = 0; ; i++) {
      try {
        const res = await fetch(`${server!.url}/v1/queues/jobs`, { method: "POST", headers, body: JSON.stringify({ payload: { w, i } }) });
        if (res.status !== 200) return;
        answered.add(((await res.json()) as { id: string }).id);
      } catch {
        return; // the server is gone
      }
    }
  });
  while (answered.size < 200) await new Promise((r) => setTimeout(r, 5));
  await server.kill9();
  await Promise.all(puts);
  expect(answered.size).toBeGreaterThanOrEqual(200);

  server = await startChildServer(env, port);
  const got = new Set<string>();
  for (;;) {
    const res = await fetch(`${server.url}/v1/queues/jobs/consume`, { method: "POST", headers, body: JSON.stringify({ waitSeconds: 0 }) });
    const { message } = (await res.json()) as { message: { id: string } | null };
    if (!message) break;
    got.add(message.id);
  }
  const lost = [...answered].filter((id) => !got.has(id));
  expect(lost).toEqual([]);
}, 120_000);
