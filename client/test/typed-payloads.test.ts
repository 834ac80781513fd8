/**
 * `queues.put<P>` takes any JSON-compatible `P`, interfaces included (they
 * have no index signature, so `JsonValue` refused them), and meets
 * `work<P>`: checked by the type checker (`npm run typecheck` compiles this
 * file; every `@ts-expect-error` must be an error) and by a round trip
 * through the real service.
 */
import { afterAll, beforeAll, describe, expect, expectTypeOf, it } from "vitest";
import { startServer, type TestServer } from "../../test/support/harness.ts";
import { createClient, type PlatformClient, type QueueMessage } from "../src/index.ts";

interface SignupJob {
  email: string;
  name: string;
  plan?: "free" | "pro";
  tags: string[];
  meta: { source: string; attempt: number; ok: boolean; parent: string | null };
}

let t: TestServer;
let client: PlatformClient;

beforeAll(async () => {
  t = await startServer();
  const app = await t.createApp();
  client = createClient({ baseUrl: t.url, token: app.token });
});
afterAll(async () => {
  await client?.close();
  await t?.close();
});

/** Never called: only compiled. */
function typeChecks(c: PlatformClient, job: SignupJob) {
  void c.queues.put("signups", job);
  void c.queues.put<SignupJob>("signups", job);
  void c.queues.put("q", 1);
  void c.queues.put("q", "text");
  void c.queues.put("q", null);
  void c.queues.put("q", [1, "a", { b: true }]);
  void c.queues.putBatch<SignupJob>("signups", [{ payload: job, dedupKey: job.email }]);
  // @ts-expect-error a function does not survive JSON
  void c.queues.put("q", { run: () => 1 });
  // @ts-expect-error a bigint cannot be serialized
  void c.queues.put("q", { n: 1n });
  // @ts-expect-error a Date arrives as a string, not a Date
  void c.queues.put<{ at: Date }>("q", { at: new Date() });
  // @ts-expect-error the payload must be the type asked for
  void c.queues.put<SignupJob>("signups", { email: "a@example.com" });
  c.queues.work<SignupJob>("signups", (m) => {
    expectTypeOf(m).toEqualTypeOf<QueueMessage<SignupJob>>();
    expectTypeOf(m.payload.meta.attempt).toEqualTypeOf<number>();
  });
}

describe("typed payloads", () => {
  it("an interface-typed payload goes in with put<P> and comes out of work<P> unchanged", async () => {
    expect(typeof typeChecks).toBe("function");
    const job: SignupJob = {
      email: "ada@example.com",
      name: "Ada",
      tags: ["beta"],
      meta: { source: "web", attempt: 1, ok: true, parent: null },
    };
    const put = await client.queues.put("signups", job);
    const got = await new Promise<QueueMessage<SignupJob>>((resolve) => {
      const worker = client.queues.work<SignupJob>("signups", (m) => {
        resolve(m);
        void worker.stop();
      });
    });
    expect(got.id).toBe(put.id);
    expect(got.payload).toEqual(job);
  });
});
