/**
 * Retries against the real service: a read issued while the service
 * restarts (down for longer than an embedded restart, about 11 s) succeeds
 * with the default retry budget; a mail send or a tracked batch whose answer
 * was lost is retried under the same Idempotency-Key and done once. (The
 * client's error codes are tied to the server's by test/core/error-codes.test.ts.)
 */
import net from "node:net";
import { afterAll, describe, expect, it } from "vitest";
import { createTestDatabase, startServer, type TestDatabase, type TestServer } from "../../test/support/harness.ts";
import { sql } from "kysely";
import { RUN_LOCK_SECONDS } from "../../src/core/http/idempotency.ts";
import { tables } from "../../test/support/tables.ts";
import { createClient, type RetryInfo } from "../src/index.ts";
import { urlOf } from "./support.ts";

const cleanup: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const c of cleanup.reverse()) await c();
});

/** A port that was free a moment ago (the restarted server must come back on the same one). */
async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((resolve) => s.listen(0, "127.0.0.1", resolve));
  const { port } = s.address() as net.AddressInfo;
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return port;
}

/** A fetch that performs the request, then loses the first answer to `path` (as a dropped connection would). */
function losingFirstAnswer(path: string, keys: string[]): typeof fetch {
  let lost = false;
  return async (input, init) => {
    const res = await fetch(input, init);
    if (urlOf(input).endsWith(path)) {
      keys.push(new Headers(init?.headers).get("idempotency-key") ?? "");
      if (!lost) {
        lost = true;
        await res.text();
        throw new TypeError("fetch failed", { cause: { code: "ECONNRESET" } });
      }
    }
    return res;
  };
}

describe("retries", () => {
  it("a read outlasts a restart of the service longer than 11 s with the default budget", async () => {
    const database: TestDatabase = await createTestDatabase();
    cleanup.push(() => database.drop());
    const port = await freePort();
    const env = { PORT: String(port) };
    let server: TestServer = await startServer({ database, env });
    cleanup.push(() => server.close());
    const app = await server.createApp();
    const retries: RetryInfo[] = [];
    let restarted: Promise<void> | undefined;
    const c = createClient({
      baseUrl: server.url,
      token: app.token,
      retry: {
        onRetry: (info) => {
          retries.push(info);
          // The service comes back once the client has waited out more than an embedded restart.
          const waited = retries.reduce((sum, r) => sum + r.delayMs, 0);
          if (waited >= 11_500 && !restarted) restarted = startServer({ database, env }).then((s) => void (server = s));
        },
      },
    });
    await server.close();
    const started = Date.now();
    const queues = await c.queues.list();
    expect(Array.isArray(queues)).toBe(true);
    expect(Date.now() - started).toBeGreaterThanOrEqual(11_500);
    expect(retries.every((r) => r.error.code === "unavailable")).toBe(true);
    await restarted;
    await c.close();
  }, 90_000);
});

describe("idempotent retries", () => {
  it("a mail send whose answer was lost is retried under the same key and sent once", async () => {
    const t = await startServer({ env: { MAIL_DOMAIN: "apps.example" } });
    cleanup.push(() => t.close());
    const app = await t.createApp();
    const keys: string[] = [];
    const c = createClient({ baseUrl: t.url, token: app.token, fetch: losingFirstAnswer("/v1/mail/send", keys) });
    const res = await c.mail.send({ to: "ada@example.com", subject: "Hi", text: "Hello" });
    expect(res.sent).toBe(true);
    expect(keys).toHaveLength(2);
    expect(keys[0]).not.toBe("");
    expect(keys[1]).toBe(keys[0]);
    expect((await t.admin.listMail({ appId: app.id })).mails).toHaveLength(1);
    // A second logical send gets a new key: it is a new mail.
    await c.mail.send({ to: "ada@example.com", subject: "Hi", text: "Hello" });
    expect(keys[2]).not.toBe(keys[0]);
    expect((await t.admin.listMail({ appId: app.id })).mails).toHaveLength(2);
    await c.close();
  });

  it("a tracked batch whose answer was lost is retried under the same key and stored once", async () => {
    const t = await startServer();
    cleanup.push(() => t.close());
    const app = await t.createApp();
    const setup = createClient({ baseUrl: t.url, token: app.token });
    await setup.analytics.registerType({ name: "click" });
    const keys: string[] = [];
    const c = createClient({
      baseUrl: t.url,
      token: app.token,
      fetch: losingFirstAnswer("/v1/analytics/events", keys),
      analytics: { flushIntervalMs: 3_600_000 },
    });
    for (let i = 0; i < 40; i++) c.analytics.track("click");
    expect(await c.analytics.flush()).toEqual({ recorded: 40, dropped: 0 });
    expect(keys).toHaveLength(2);
    expect(keys[1]).toBe(keys[0]);
    const { total } = await setup.analytics.query({ type: "click", since: Date.now() - 3_600_000 });
    expect(total).toBe(40);
    await Promise.all([c.close(), setup.close()]);
  });
});

describe("a run that died holding its key", () => {
  it("is taken over within the client's default retry budget, so the retried call is done, not given up", async () => {
    const t = await startServer({ env: { MAIL_DOMAIN: "apps.example" } });
    cleanup.push(() => t.close());
    const app = await t.createApp();
    const db = tables(t.server.deps.db);
    let died: number | undefined;
    // The first send runs; then its process "dies": its work rolls back and its key stays claimed for the
    // full hold, as a kill -9 right after the claim leaves it; its client sees the connection drop.
    const dying: typeof fetch = async (input, init) => {
      const res = await fetch(input, init);
      if (died === undefined && urlOf(input).endsWith("/v1/mail/send")) {
        await res.text();
        await sql`UPDATE idempotency_keys SET state = 'running', response = NULL, status = NULL,
                    locked_until = now() + make_interval(secs => ${RUN_LOCK_SECONDS}) WHERE app_id = ${app.id}`.execute(
          db,
        );
        await sql`DELETE FROM mail_log WHERE app_id = ${app.id}`.execute(db);
        died = Date.now();
        throw new TypeError("fetch failed", { cause: { code: "ECONNRESET" } });
      }
      return res;
    };
    const retried: string[] = [];
    const c = createClient({
      baseUrl: t.url,
      token: app.token,
      fetch: dying,
      retry: { onRetry: (info) => void retried.push(info.error.code) },
    });
    const res = await c.mail.send({ to: "ada@example.com", subject: "Hi", text: "Hello" });
    expect(res.sent).toBe(true);
    // Told the key was in use until the dead run's hold lapsed, then the repeat ran it.
    expect(retried).toContain("idempotency_key_in_use");
    expect(Date.now() - died!).toBeGreaterThanOrEqual((RUN_LOCK_SECONDS - 1) * 1000);
    expect((await t.admin.listMail({ appId: app.id })).mails).toHaveLength(1);
    await c.close();
  }, 60_000);
});

describe("idempotent batch put", () => {
  it("a batch put with an idempotencyKey whose answer was lost is retried and stored once", async () => {
    const t = await startServer();
    cleanup.push(() => t.close());
    const app = await t.createApp();
    const keys: string[] = [];
    const c = createClient({
      baseUrl: t.url,
      token: app.token,
      fetch: losingFirstAnswer("/v1/queues/jobs/batch", keys),
    });
    const res = await c.queues.putBatch("jobs", [{ payload: 1 }, { payload: 2 }], { idempotencyKey: "import-7" });
    expect(res.messages).toHaveLength(2);
    expect(keys).toEqual(["import-7", "import-7"]);
    const q = (await c.queues.list()).find((e) => e.name === "jobs");
    expect(q?.depth).toBe(2);
    await c.close();
  });

  it("a secret link with an idempotencyKey whose answer was lost is retried and made once", async () => {
    const t = await startServer();
    cleanup.push(() => t.close());
    const app = await t.createApp();
    await t.admin.declareSecrets({ appId: app.id, names: ["API_KEY"] });
    const keys: string[] = [];
    const c = createClient({
      baseUrl: t.url,
      token: app.token,
      fetch: losingFirstAnswer("/v1/secrets/API_KEY/link", keys),
    });
    const link = await c.secrets.createLink("API_KEY", { idempotencyKey: "onboarding-api-key" });
    expect(link.url).toMatch(/\/secret-links\//);
    expect(keys).toEqual(["onboarding-api-key", "onboarding-api-key"]);
    expect((await t.admin.listSecretLinks({ appId: app.id })).links).toHaveLength(1);
    await c.close();
  });
});
