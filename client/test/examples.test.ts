/**
 * The runnable examples, started as child processes against the real
 * service, importing the built package by its name (as an app would): the
 * worker handles the jobs the test puts (mail sent, jobs acked, events
 * counted) and exits cleanly on SIGTERM; the tracker's events, flushed on
 * SIGTERM, are counted by a query.
 */
import { spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startServer, type TestApp, type TestServer } from "../../test/support/harness.ts";
import { createClient } from "../src/index.ts";

const clientDir = path.resolve(import.meta.dirname, "..");

let t: TestServer;

beforeAll(async () => {
  if (!fs.existsSync(path.join(clientDir, "dist/index.js")))
    throw new Error("the client package is not built: run npm run build:client");
  t = await startServer();
});
afterAll(() => t?.close());

interface Example {
  child: ChildProcess;
  /** JSON lines printed on stdout so far. */
  lines: Record<string, unknown>[];
  /** Resolves with the first line (present or future) that `match` accepts. */
  line(match: (l: Record<string, unknown>) => boolean): Promise<Record<string, unknown>>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stderr(): string;
}

function startExample(name: string, app: TestApp, env: Record<string, string> = {}): Example {
  const child = spawn(process.execPath, [path.join(clientDir, "examples", name)], {
    cwd: clientDir,
    env: { PATH: process.env.PATH, PLATFORM_ANALYTICS_URL: t.url, PLATFORM_SERVICE_TOKEN: app.token, ...env },
    stdio: ["pipe", "pipe", "pipe"],
  });
  const lines: Record<string, unknown>[] = [];
  const waiters = new Set<() => void>();
  let out = "";
  let err = "";
  child.stderr.on("data", (d: Buffer) => (err += d.toString()));
  child.stdout.on("data", (d: Buffer) => {
    out += d.toString();
    const parts = out.split("\n");
    out = parts.pop()!;
    for (const p of parts) if (p.trim()) lines.push(JSON.parse(p) as Record<string, unknown>);
    for (const w of [...waiters]) w();
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once("exit", (code, signal) => {
      for (const w of [...waiters]) w();
      resolve({ code, signal });
    }),
  );
  return {
    child,
    lines,
    exited,
    stderr: () => err,
    line(match) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const found = lines.find(match);
          if (found) {
            waiters.delete(check);
            resolve(found);
          } else if (child.exitCode !== null || child.signalCode !== null) {
            waiters.delete(check);
            reject(new Error(`${name} exited without the expected line; stderr: ${err}`));
          }
        };
        waiters.add(check);
        check();
      });
    },
  };
}

describe("examples/worker.ts", () => {
  it("handles the jobs put on its queue, mails, counts, acks, and stops cleanly on SIGTERM", async () => {
    const app = await t.createApp();
    await t.admin.updateApp({ appId: app.id, mailFrom: "welcome@apps.example" });
    const worker = startExample("worker.ts", app, { QUEUE: "signups", CONCURRENCY: "3" });
    await worker.line((l) => l.ready === "signups");
    const c = createClient({ baseUrl: t.url, token: app.token });
    const names = ["Ada", "Grace", "Edsger", "Barbara", "Donald"];
    const ids = [];
    for (const name of names)
      ids.push((await c.queues.put("signups", { email: `${name.toLowerCase()}@example.com`, name })).id);
    for (const id of ids) await worker.line((l) => l.handled === id);

    worker.child.kill("SIGTERM");
    expect(await worker.exited).toEqual({ code: 0, signal: null });
    expect(worker.lines.at(-1)).toEqual({ stopped: "signups" });
    expect(worker.stderr()).toBe("");

    const { mails } = await t.admin.listMail({ appId: app.id });
    expect(mails.map((m) => m.to).sort()).toEqual(names.map((n) => `${n.toLowerCase()}@example.com`).sort());
    expect(mails.every((m) => m.from === "welcome@apps.example" && m.text.length > 0)).toBe(true);
    const entry = (await c.queues.list()).find((q) => q.name === "signups");
    expect([entry?.depth ?? 0, entry?.inFlight ?? 0]).toEqual([0, 0]);
    // Tracked events were flushed on the way out.
    const counted = await c.analytics.query({ type: "welcome.sent", since: Date.now() - 3_600_000, interval: "hour" });
    expect(counted.total).toBe(names.length);
  });
});

describe("examples/tracker.ts", () => {
  it("tracks a page view per stdin line and flushes them on SIGTERM", async () => {
    const app = await t.createApp();
    const tracker = startExample("tracker.ts", app);
    await tracker.line((l) => l.ready === true);
    const paths = ["/", "/pricing", "/docs", "/pricing"];
    tracker.child.stdin!.write(paths.join("\n") + "\n");
    await tracker.line((l) => tracker.lines.filter((x) => "tracked" in x).length === paths.length && "tracked" in l);
    // Not sent yet (2 s interval, 100 per batch): SIGTERM makes the client flush.
    expect(tracker.lines.some((l) => "sent" in l)).toBe(false);
    tracker.child.kill("SIGTERM");
    expect(await tracker.exited).toEqual({ code: 0, signal: null });
    expect(tracker.lines.filter((l) => "sent" in l)).toEqual([{ sent: 4, remainingToday: 100000 - 4 }]);
    const c = createClient({ baseUrl: t.url, token: app.token });
    const q = await c.analytics.query({
      type: "page.view",
      since: Date.now() - 3_600_000,
      interval: "hour",
      groupBy: "path",
    });
    expect(q.total).toBe(4);
    expect(q.buckets.map((b) => [b.group, b.count])).toEqual([
      ["/", 1],
      ["/docs", 1],
      ["/pricing", 2],
    ]);
  });
});
