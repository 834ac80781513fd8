/**
 * Reservations of runs that die are given back: a daily allowance counts what
 * was really done. The service runs as a child process on this run's backend;
 * event batches and generates run concurrently and the process is killed
 * (`kill -9`) twice while they are in flight. After a restart, once the dead
 * runs' reservations expire and the housekeeping sweep gives them back, the
 * `events` counter equals the events stored, and the `fast_tokens` counter the
 * tokens of the generates answered, exactly. Each generate carries an
 * Idempotency-Key and one not answered (cut by a kill) is sent again with it
 * after the restart, as the client library does: a generate charged whose
 * answer was lost is then replayed, never run and charged again. Before
 * reservations had owners and expiries, every batch in flight at a kill
 * stayed counted until the UTC day ended.
 *
 * On PGlite the statements of the process run one at a time, so a kill
 * rarely finds a reservation between its statements; PostgreSQL shows it.
 */
import { createClient } from "@connectrpc/connect";
import { expect, it, vi } from "vitest";
import { AdminService } from "../../gen/platform/admin/v1/admin_pb.js";
import { RESERVATION_HOLD_SECONDS } from "../../src/core/quotas/index.ts";
import { transportFor } from "../support/harness.ts";
import { useCrashableService, type ServiceProcess } from "../support/service-process.ts";

const service = useCrashableService();

const BATCH = 50;

it("after kill -9 during event batches and generates: used == stored + spent, exactly", async () => {
  let server: ServiceProcess = await service.start();
  const adminOf = (s: ServiceProcess) =>
    createClient(AdminService, transportFor(s.url, "connect", service.database.adminToken));
  const { app } = await adminOf(server).createApp({ name: "reserving" });
  const { token } = await adminOf(server).issueToken({ appId: app!.id });
  const headers = { authorization: `Bearer ${token}`, "content-type": "application/json" };
  const post = (path: string, body: unknown, key?: string) =>
    fetch(`${server.url}${path}`, {
      method: "POST",
      headers: key ? { ...headers, "idempotency-key": key } : headers,
      body: JSON.stringify(body),
    });
  const generate = { model: "platform/fast", prompt: "Say something", maxTokens: 64 };
  /** Keys of generates sent whose answer did not come. */
  const unanswered = new Set<string>();
  expect((await post("/v1/analytics/types", { name: "click" })).status).toBe(200);

  /** Tokens of the generates answered 200. */
  let spent = 0;
  for (let round = 0; round < 2; round++) {
    let batches = 0;
    let enough!: () => void;
    const reached = new Promise<void>((resolve) => (enough = resolve));
    const events = Array.from({ length: 6 }, async () => {
      for (;;) {
        try {
          const res = await post("/v1/analytics/events", {
            events: Array.from({ length: BATCH }, () => ({ type: "click" })),
          });
          if (res.status !== 200) return;
          if (++batches === 30) enough();
        } catch {
          return; // the process is gone
        }
      }
    });
    const generates = Array.from({ length: 3 }, async (_, g) => {
      for (let i = 0; ; i++) {
        const key = `gen-${round}-${g}-${i}`;
        unanswered.add(key);
        try {
          const res = await post("/v1/inference/generate", generate, key);
          if (res.status !== 200) return;
          const { usage } = (await res.json()) as { usage: { inputTokens: number; outputTokens: number } };
          spent += usage.inputTokens + usage.outputTokens;
          unanswered.delete(key);
        } catch {
          return;
        }
      }
    });
    await reached;
    expect(await service.kill()).toBe("SIGKILL");
    await Promise.all([...events, ...generates]);
    server = await service.start();
  }
  expect(spent).toBeGreaterThan(0);
  // The generates cut by a kill, sent again with their keys: replayed if they were done, else done now.
  for (const key of unanswered) {
    let res = await post("/v1/inference/generate", generate, key);
    // The dead run still holds its key (409 idempotency_key_in_use) until its hold lapses: as the client, wait.
    while (res.status === 409) {
      await new Promise((resolve) => setTimeout(resolve, Number(res.headers.get("retry-after") ?? 1) * 1000));
      res = await post("/v1/inference/generate", generate, key);
    }
    expect(res.status).toBe(200);
    const { usage } = (await res.json()) as { usage: { inputTokens: number; outputTokens: number } };
    spent += usage.inputTokens + usage.outputTokens;
  }

  const stored = async () => {
    const res = await post("/v1/analytics/query", {
      type: "click",
      since: Date.now() - 3_600_000,
      until: Date.now() + 60_000,
      interval: "day",
    });
    return ((await res.json()) as { total: number }).total;
  };
  const usage = async () => {
    const u = await adminOf(server).getUsage({ appId: app!.id });
    return { events: Number(u.events!.used), fastTokens: Number(u.fastTokens!.used) };
  };
  // The dead runs' reservations expire (no renewal) and the sweep (every 5 s) gives them back.
  await vi.waitFor(async () => expect(await usage()).toEqual({ events: await stored(), fastTokens: spent }), {
    timeout: (RESERVATION_HOLD_SECONDS + 20) * 1000,
    interval: 500,
  });
  expect(await stored()).toBeGreaterThanOrEqual(60 * BATCH);
}, 180_000);
