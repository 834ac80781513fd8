/**
 * A put that got 200 is committed before the answer: it survives `kill -9`
 * of the server process. The server runs as a child process on the backend
 * of this run (a fresh PostgreSQL database, or PGlite in a fresh DATA_DIR).
 */
import { expect, it } from "vitest";
import { createClient } from "@connectrpc/connect";
import { AdminService } from "../../gen/platform/admin/v1/admin_pb.js";
import { transportFor } from "../support/harness.ts";
import { useCrashableService } from "../support/service-process.ts";

const service = useCrashableService();

it("puts answered 200 survive kill -9 of the server, and are consumed after a restart", async () => {
  let server = await service.start();
  const admin = createClient(AdminService, transportFor(server.url, "connect", service.database.adminToken));
  const { app } = await admin.createApp({ name: "durable" });
  const { token } = await admin.issueToken({ appId: app!.id });
  const headers = { authorization: `Bearer ${token}`, "content-type": "application/json" };

  // Concurrent puts; the process is killed while later ones may still be in flight.
  const answered = new Set<string>();
  let reached200!: () => void;
  const twoHundredAnswered = new Promise<void>((resolve) => (reached200 = resolve));
  const puts = Array.from({ length: 8 }, async (_, w) => {
    for (let i = 0; ; i++) {
      try {
        const res = await fetch(`${server.url}/v1/queues/jobs`, {
          method: "POST",
          headers,
          body: JSON.stringify({ payload: { w, i } }),
        });
        if (res.status !== 200) return;
        answered.add(((await res.json()) as { id: string }).id);
        if (answered.size === 200) reached200();
      } catch {
        return; // the server is gone
      }
    }
  });
  await twoHundredAnswered;
  expect(await service.kill()).toBe("SIGKILL");
  await Promise.all(puts);
  expect(answered.size).toBeGreaterThanOrEqual(200);

  server = await service.start();
  const got = new Set<string>();
  for (;;) {
    const res = await fetch(`${server.url}/v1/queues/jobs/consume`, {
      method: "POST",
      headers,
      body: JSON.stringify({ waitSeconds: 0 }),
    });
    const { message } = (await res.json()) as { message: { id: string } | null };
    if (!message) break;
    got.add(message.id);
  }
  const lost = [...answered].filter((id) => !got.has(id));
  expect(lost).toEqual([]);
}, 120_000);
