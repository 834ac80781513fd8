/**
 * A schedule's ticks exactly once through `kill -9` (docs/queues.md "Schedules"): three service processes on
 * one PostgreSQL database race for a 1-second schedule; twice, the process that has put the most ticks so far
 * is killed with SIGKILL, mid-transaction or not. Every tick from the first run to `endAt` still gives one
 * message: a killed claim rolls back with its put, and another process puts that tick. PostgreSQL only: PGlite
 * is one process's database.
 */
import { createClient } from "@connectrpc/connect";
import { afterAll, expect, it } from "vitest";
import { AdminService } from "../../gen/platform/admin/v1/admin_pb.js";
import { createTestDatabase, transportFor, type TestDatabase, describeOnPostgres } from "../support/harness.ts";
import { cleanEnv, startServiceProcess, type ServiceProcess } from "../support/service-process.ts";

const processes: ServiceProcess[] = [];
let database: TestDatabase | undefined;

afterAll(async () => {
  for (const p of processes) {
    if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill("SIGTERM");
    await p.exited;
  }
  await database?.drop();
});

/** The ticks a process has put, from its `/metrics`; -1 once it is gone. */
async function ticksOf(p: ServiceProcess): Promise<number> {
  if (p.child.signalCode !== null || p.child.exitCode !== null) return -1;
  const text = await (await fetch(`${p.url}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith('queue_schedule_ticks_total{outcome="put"}'));
  return line ? Number(line.split(" ").pop()) : 0;
}

describeOnPostgres("kill -9 of ticking instances", "PGlite is one process's database", () => {
  it("three processes, two killed with SIGKILL while ticking: every tick exactly once", async () => {
    database = await createTestDatabase();
    const env = cleanEnv({
      PORT: "0",
      DATA_DIR: database.dataDir,
      ADMIN_TOKEN: database.adminToken,
      SECRETS_KEY: database.secretsKey,
      DATABASE_URL: database.url!,
    });
    for (let i = 0; i < 3; i++) processes.push(await startServiceProcess(env));
    const admin = createClient(AdminService, transportFor(processes[0].url, "connect", database.adminToken));
    const { app } = await admin.createApp({ name: "ticking" });
    const { token } = await admin.issueToken({ appId: app!.id });
    const headers = { authorization: `Bearer ${token}`, "content-type": "application/json" };
    const survivor = processes[2];
    const call = async (method: string, path: string, body?: unknown) => {
      const res = await fetch(`${survivor.url}${path}`, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      return { status: res.status, body: (await res.json()) as Record<string, unknown> };
    };

    const endAt = Date.now() + 12_000;
    const put = await call("PUT", "/v1/queues/kill/schedules/s", { cron: "* * * * * *", payload: "t", endAt });
    expect(put.status, JSON.stringify(put.body)).toBe(200);
    const expected = Math.floor(endAt / 1000) - (put.body.nextRunAt as number) / 1000 + 1;

    const ids = new Set<string>();
    let total = 0;
    const consumeSome = async () => {
      const res = await call("POST", "/v1/queues/kill/consume", { waitSeconds: 2, max: 10 });
      expect(res.status).toBe(200);
      for (const m of res.body.messages as { id: string; receipt: string }[]) {
        ids.add(m.id);
        total++;
        await call("POST", "/v1/queues/kill/ack", { receipt: m.receipt });
      }
    };
    // Kill the busiest ticker after 2 and after 5 ticks were received (never the survivor, which serves the test).
    for (const after of [2, 5]) {
      while (total < after) await consumeSome();
      const counts = await Promise.all(processes.slice(0, 2).map(ticksOf));
      const victim = processes[counts[0] >= counts[1] ? 0 : 1];
      victim.child.kill("SIGKILL");
      expect(await victim.exited).toBe("SIGKILL");
    }
    const deadline = Date.now() + 60_000;
    while (total < expected && Date.now() < deadline) await consumeSome();
    // Once the schedule has ended nothing more comes.
    for (;;) {
      const list = await call("GET", "/v1/queues/kill/schedules");
      const s = (list.body.schedules as { nextRunAt: number | null; fired: number; missed: number }[])[0];
      if (s.nextRunAt === null) {
        expect(s).toMatchObject({ fired: expected, missed: 0 });
        break;
      }
      expect(Date.now()).toBeLessThan(deadline);
      await consumeSome();
    }
    await consumeSome();
    expect(total).toBe(expected);
    expect(ids.size).toBe(expected);
  }, 120_000);
});
