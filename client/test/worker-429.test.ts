/**
 * A worker whose handler meets a daily cap does not spin. The README's worker
 * sends a welcome mail per job; the app may send 3 mails a day and has 5 jobs.
 * Three handlers succeed; the other two get 429 `quota_exceeded` with
 * `retryAfter` (seconds to the next UTC midnight), and their messages go back
 * with that delay (capped by the message's lifetime) instead of at once under
 * the default policy (no retry delay), which ran the handler about 1,800 times
 * in 10 s. Over 10 s: at most 3 handler runs per message.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { startServer, type TestServer } from "../../test/support/harness.ts";
import { createClient } from "../src/index.ts";

let t: TestServer;
beforeAll(async () => {
  t = await startServer({ env: { MAIL_DOMAIN: "apps.example" } });
});
afterAll(() => t?.close());

it("a handler answered 429 with retryAfter gives its message back with that delay: <= 3 runs per message in 10 s", async () => {
  const a = await t.createApp();
  await t.admin.updateApp({ appId: a.id, limits: { mailPerDay: 3 } });
  const client = createClient({ baseUrl: t.url, token: a.token });
  for (let i = 0; i < 5; i++) await client.queues.put("signups", { to: `user${i}@example.com` });

  const runs = new Map<string, number>();
  const refused: number[] = [];
  const worker = client.queues.work<{ to: string }>(
    "signups",
    async (m) => {
      runs.set(m.id, (runs.get(m.id) ?? 0) + 1);
      await client.mail.send({ to: m.payload.to, subject: "Welcome", text: "Hello" });
    },
    { concurrency: 2, onError: (e) => refused.push((e as { status?: number }).status ?? 0) },
  );
  // The observation window of the report: 10 s of a worker against a spent cap.
  await new Promise((resolve) => setTimeout(resolve, 10_000));
  await worker.stop();
  await client.close();

  expect(runs.size).toBe(5);
  expect(Math.max(...runs.values())).toBeLessThanOrEqual(3);
  expect(refused.filter((s) => s === 429).length).toBe(2);
  const { mails } = await t.admin.listMail({ appId: a.id });
  expect(mails).toHaveLength(3);
  // The two refused jobs wait (delayed), not lost.
  const after = createClient({ baseUrl: t.url, token: a.token });
  const q = (await after.queues.list()).find((e) => e.name === "signups");
  await after.close();
  expect(q).toMatchObject({ depth: 2, inFlight: 0 });
}, 30_000);
