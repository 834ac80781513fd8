/**
 * A worker whose handler meets a daily cap does not spin. The README's worker
 * sends a welcome mail per job; the app may send 3 mails a day and has 5 jobs.
 * Three handlers succeed; a handler that gets 429 `quota_exceeded` (with
 * `retryAfter`, the seconds to the next UTC midnight) gives its message back
 * with that delay and pauses the worker until the cap resets: it takes no more
 * messages (one it took meanwhile goes back with the pause's delay, unworked),
 * where it used to run the handler about 1,800 times in 10 s. So within 10 s
 * (and until the reset) no message runs more than once: the refused ones are
 * delayed past the reset, and nothing consumes the rest.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startServer, type TestServer } from "../../test/support/harness.ts";
import { createClient, PlatformError, type PlatformClient, type WorkerPause } from "../src/index.ts";
import { dailyCapOf } from "../src/worker.ts";

let t: TestServer;
beforeAll(async () => {
  t = await startServer({ env: { MAIL_DOMAIN: "apps.example" } });
});
afterAll(() => t?.close());

function nextUtcMidnight(): number {
  return new Date().setUTCHours(24, 0, 0, 0);
}

/** Resolves with the worker's first pause. */
function pauses() {
  let seen: (p: WorkerPause) => void = () => {};
  const first = new Promise<WorkerPause>((resolve) => (seen = resolve));
  return { first, onPause: (p: WorkerPause) => seen(p) };
}

async function sendWelcome(client: PlatformClient, to: string) {
  await client.mail.send({ to, subject: "Welcome", text: "Hello" });
}

describe("a handler that meets a daily cap", () => {
  it("pauses the worker until the reset: each message runs at most once, the refused ones wait past the reset", async () => {
    const a = await t.createApp();
    await t.admin.updateApp({ appId: a.id, limits: { mailPerDay: 3 } });
    const client = createClient({ baseUrl: t.url, token: a.token });
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await client.queues.put("signups", { to: `user${i}@example.com` })).id);

    const runs = new Map<string, number>();
    const refused: unknown[] = [];
    const paused = pauses();
    const worker = client.queues.work<{ to: string }>(
      "signups",
      async (m) => {
        runs.set(m.id, (runs.get(m.id) ?? 0) + 1);
        await sendWelcome(client, m.payload.to);
      },
      { concurrency: 2, onError: (e) => refused.push(e), onPause: paused.onPause },
    );

    const pause = await paused.first;
    expect(pause.allowance).toBe("mail");
    // The quota's Retry-After: the next UTC midnight (rounded up to a second by the service).
    expect(Math.abs(pause.until - nextUtcMidnight())).toBeLessThan(5_000);
    expect(worker.paused).toMatchObject({ allowance: "mail" });

    // Every message ends up acked (3: the mails sent) or given back past the reset, or never taken.
    const states = await vi.waitFor(
      async () => {
        const all = await Promise.all(ids.map((id) => client.queues.message("signups", id)));
        const open = all.filter((s) => s !== null);
        expect(open).toHaveLength(2);
        for (const s of open)
          expect(s.status === "delayed" || (s.status === "waiting" && s.deliveries === 0)).toBe(true);
        return open;
      },
      { timeout: 20_000, interval: 100 },
    );
    for (const s of states.filter((s) => s.status === "delayed")) {
      // Given back until the reset, or for the longest delay the service takes (12 h) when the reset is further.
      expect(s.visibleAt!).toBeGreaterThanOrEqual(Math.min(pause.until, Date.now() + 43_200_000) - 120_000);
      expect(s.deliveries).toBe(1);
      expect(s.failureReason).toContain("quota_exceeded");
    }
    expect(Math.max(...runs.values())).toBeLessThanOrEqual(1);
    expect(refused.every((e) => e instanceof PlatformError && e.code === "quota_exceeded")).toBe(true);
    expect((await t.admin.listMail({ appId: a.id })).mails).toHaveLength(3);

    // A second worker of the client that needs mail starts paused and takes nothing; resumed, it takes one
    // message, meets the cap, and pauses again.
    const other = await client.queues.put("digests", { to: "ops@example.com" });
    const otherRuns: string[] = [];
    const second = pauses();
    const digests = client.queues.work<{ to: string }>(
      "digests",
      async (m) => {
        otherRuns.push(m.id);
        await sendWelcome(client, m.payload.to);
      },
      { needs: ["mail"], onPause: second.onPause, onError: () => {} },
    );
    expect((await second.first).allowance).toBe("mail");
    expect(await client.queues.message("digests", other.id)).toMatchObject({ status: "waiting", deliveries: 0 });

    digests.resume();
    await vi.waitFor(async () =>
      expect(await client.queues.message("digests", other.id)).toMatchObject({ status: "delayed", deliveries: 1 }),
    );
    expect(otherRuns).toEqual([other.id]);
    expect(digests.paused).toMatchObject({ allowance: "mail" });

    await Promise.all([worker.stop(), digests.stop()]);
    await client.close();
  }, 60_000);
});

describe("dailyCapOf", () => {
  const now = Date.UTC(2026, 0, 1, 12, 0, 0);
  const secondsToMidnight = 12 * 3600;
  const error = (code: PlatformError["code"], retryAfter: number, details: string[] = []) =>
    new PlatformError({ status: 429, code, message: "refused", retryAfter, details });

  it("names the allowance of a quota_exceeded and its reset", () => {
    expect(dailyCapOf(error("quota_exceeded", secondsToMidnight, ["mail: 0 of 3 left today, 1 needed"]), now)).toEqual({
      allowance: "mail",
      until: now + secondsToMidnight * 1000,
    });
    expect(dailyCapOf(error("quota_exceeded", 60, ["fast_tokens: 10 of 200000 left today"]), now)?.allowance).toBe(
      "fast_tokens",
    );
  });

  it("takes any 429 whose Retry-After reaches the daily reset, and no short refusal", () => {
    expect(dailyCapOf(error("rate_limited", secondsToMidnight), now)).toEqual({
      allowance: "daily",
      until: now + secondsToMidnight * 1000,
    });
    expect(dailyCapOf(error("rate_limited", 1), now)).toBeUndefined();
    expect(dailyCapOf(error("queue_full", 5), now)).toBeUndefined();
    expect(dailyCapOf(new Error("boom"), now)).toBeUndefined();
  });
});
