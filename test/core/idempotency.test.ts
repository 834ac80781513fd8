/**
 * Idempotency keys (`Idempotency-Key`, see src/core/http/idempotency.ts): a
 * repeat gets the first answer without the work being done again or any
 * allowance spent, racing repeats run the work once, another request under
 * the key is refused, and keys outlive a restart but not their 24 hours.
 */
import crypto from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { create } from "@bufbuild/protobuf";
import { createContextValues, createHandlerContext } from "@connectrpc/connect";
import pino from "pino";
import { PutMessageRequestSchema, QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import { principalKey } from "../../src/core/auth.ts";
import { createIdempotencyStore } from "../../src/core/idempotency-store.ts";
import { createIdempotency } from "../../src/core/http/idempotency.ts";
import { createMetrics } from "../../src/core/metrics.ts";
import { ErrorDetailSchema } from "../../gen/platform/meta/v1/error_pb.js";
import {
  backend,
  createTestDatabase,
  startInstances,
  startServer,
  useTestServer,
  type Instances,
  type TestApp,
  type TestDatabase,
  type TestServer,
} from "../support/harness.ts";
import { usePgClients } from "../support/pg-clients.ts";
import { refuseWrites } from "../support/refuse-writes.ts";
import { tables } from "../support/tables.ts";

const DOMAIN = "mail.test.example";
const t = useTestServer({ env: { MAIL_DOMAIN: DOMAIN } });

const newKey = () => crypto.randomUUID();

function put(s: TestServer, app: TestApp, queue: string, body: unknown, key?: string) {
  return s.request("POST", `/v1/queues/${queue}`, {
    token: app.token,
    body,
    headers: key === undefined ? {} : { "idempotency-key": key },
  });
}

async function depth(s: TestServer, app: TestApp, queue: string): Promise<number> {
  const res = await s.request("GET", "/v1/queues", { token: app.token });
  return (res.body.queues as { name: string; depth: number }[]).find((q) => q.name === queue)?.depth ?? 0;
}

async function mailsOf(appId: string): Promise<number> {
  return (await t.admin.listMail({ appId })).mails.length;
}

async function keyRows(s: TestServer, appId: string): Promise<number> {
  const { rows } = await sql<{
    n: number;
  }>`SELECT count(*)::int AS n FROM idempotency_keys WHERE app_id = ${appId}`.execute(tables(s.server.deps.db));
  return rows[0].n;
}

describe("Idempotency-Key over REST", () => {
  it("answers a repeat with the first answer, marked replayed, and puts one message", async () => {
    const app = await t.createApp();
    const key = newKey();
    const first = await put(t, app, "jobs", { payload: { order: 1 } }, key);
    expect(first.status).toBe(200);
    expect(first.headers.get("idempotent-replayed")).toBeNull();
    const again = await put(t, app, "jobs", { payload: { order: 1 } }, key);
    expect(again.status).toBe(200);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(again.body).toEqual(first.body);
    expect(await depth(t, app, "jobs")).toBe(1);
    // Without a key nothing changes: every put is a new message.
    await put(t, app, "jobs", { payload: { order: 1 } });
    await put(t, app, "jobs", { payload: { order: 1 } });
    expect(await depth(t, app, "jobs")).toBe(3);
  });

  it("runs 20 racing repeats of a put once: one message, every other answer a replay or 409", async () => {
    const app = await t.createApp();
    const key = newKey();
    const answers = await Promise.all(Array.from({ length: 20 }, () => put(t, app, "race", { payload: 42 }, key)));
    expect(await depth(t, app, "race")).toBe(1);
    const ok = answers.filter((a) => a.status === 200);
    const busy = answers.filter((a) => a.status === 409);
    expect(ok.length + busy.length).toBe(20);
    expect(ok.length).toBeGreaterThanOrEqual(1);
    expect(new Set(ok.map((a) => a.body.id as string)).size).toBe(1);
    expect(ok.filter((a) => a.headers.get("idempotent-replayed") === null)).toHaveLength(1);
    for (const b of busy) {
      expect(b.body.error.code).toBe("idempotency_key_in_use");
      expect(b.headers.get("retry-after")).toBe("1");
    }
    const later = await put(t, app, "race", { payload: 42 }, key);
    expect([later.status, later.body.id, later.headers.get("idempotent-replayed")]).toEqual([
      200,
      ok[0].body.id,
      "true",
    ]);
  });

  it("sends one mail for 20 racing repeats of a send", async () => {
    const app = await t.createApp();
    const key = newKey();
    const body = { to: "reader@example.com", subject: "Receipt", text: "Thanks" };
    const answers = await Promise.all(
      Array.from({ length: 20 }, () =>
        t.request("POST", "/v1/mail/send", { token: app.token, body, headers: { "idempotency-key": key } }),
      ),
    );
    expect(answers.every((a) => a.status === 200 || a.status === 409)).toBe(true);
    expect(await mailsOf(app.id)).toBe(1);
    expect(Number((await t.admin.getUsage({ appId: app.id })).mail!.used)).toBe(1);
  });

  it("spends no allowance on a replay: two sends with one key under a cap of 1 both answer 200, one mail", async () => {
    const app = await t.createApp();
    await t.admin.updateApp({ appId: app.id, limits: { mailPerDay: 1 } });
    const key = newKey();
    const body = { to: "reader@example.com", subject: "Once", text: "x" };
    const send = (k: string) =>
      t.request("POST", "/v1/mail/send", { token: app.token, body, headers: { "idempotency-key": k } });
    const first = await send(key);
    const second = await send(key);
    expect([first.status, second.status]).toEqual([200, 200]);
    expect(second.body).toEqual(first.body);
    expect(second.headers.get("idempotent-replayed")).toBe("true");
    expect(await mailsOf(app.id)).toBe(1);
    // A new key is a new send: the cap is spent.
    const other = await send(newKey());
    expect([other.status, other.body.error.code]).toEqual([429, "quota_exceeded"]);
  });

  it("refuses the key for another request (422), on another path too, and keeps the first answer", async () => {
    const app = await t.createApp();
    const key = newKey();
    const first = await put(t, app, "jobs", { payload: 1 }, key);
    for (const [queue, body] of [
      ["jobs", { payload: 2 }],
      ["jobs", { payload: 1, delaySeconds: 5 }],
      ["other", { payload: 1 }],
    ] as const) {
      const res = await put(t, app, queue, body, key);
      expect(res.status, JSON.stringify(body)).toBe(422);
      expect(res.body.error.code).toBe("idempotency_key_reused");
      expect(res.body.error.message).toMatch(/^Idempotency-Key: /);
    }
    const mail = await t.request("POST", "/v1/mail/send", {
      token: app.token,
      body: { to: "a@example.com", subject: "s", text: "t" },
      headers: { "idempotency-key": key },
    });
    expect([mail.status, mail.body.error.code]).toEqual([422, "idempotency_key_reused"]);
    expect(await mailsOf(app.id)).toBe(0);
    expect((await put(t, app, "jobs", { payload: 1 }, key)).body).toEqual(first.body);
    expect(await depth(t, app, "jobs")).toBe(1);
    expect(await depth(t, app, "other")).toBe(0);
  });

  it("tells apart payloads that differ only in a lone surrogate: another request (422), one message put", async () => {
    // Their protobuf binary encoding (UTF-8) made each of these U+FFFD: one fingerprint, the 2nd and 3rd replayed.
    const app = await t.createApp();
    const key = newKey();
    const first = await put(t, app, "idem", { payload: "\ud800" }, key);
    expect([first.status, first.headers.get("idempotent-replayed")]).toEqual([200, null]);
    for (const payload of ["\udbff", "\ufffd"]) {
      const res = await put(t, app, "idem", { payload }, key);
      expect([res.status, res.body.error?.code], JSON.stringify(payload)).toEqual([422, "idempotency_key_reused"]);
    }
    const consumed = await t.request("POST", "/v1/queues/idem/consume", {
      token: app.token,
      body: { waitSeconds: 0, max: 10 },
    });
    expect(consumed.status).toBe(200);
    expect((consumed.body.messages as { id: string; payload: unknown }[]).map((m) => [m.id, m.payload])).toEqual([
      [first.body.id, "\ud800"],
    ]);
  });

  it("replays the same JSON object with its keys in another order; an array in another order is another request", async () => {
    const app = await t.createApp();
    const key = newKey();
    const first = await put(t, app, "idem", { payload: { a: 1, b: { c: [1, { d: 2, e: 3 }], f: null } } }, key);
    expect(first.status).toBe(200);
    const again = await put(t, app, "idem", { payload: { b: { f: null, c: [1, { e: 3, d: 2 }] }, a: 1 } }, key);
    expect([again.status, again.headers.get("idempotent-replayed"), again.body.id]).toEqual([
      200,
      "true",
      first.body.id,
    ]);
    const swapped = await put(t, app, "idem", { payload: { a: 1, b: { c: [{ d: 2, e: 3 }, 1], f: null } } }, key);
    expect([swapped.status, swapped.body.error?.code]).toEqual([422, "idempotency_key_reused"]);
    expect(await depth(t, app, "idem")).toBe(1);
  });

  it("keys are per app", async () => {
    const a = await t.createApp();
    const b = await t.createApp();
    const key = newKey();
    const one = await put(t, a, "jobs", { payload: 1 }, key);
    const two = await put(t, b, "jobs", { payload: 1 }, key);
    expect([one.status, two.status]).toEqual([200, 200]);
    expect(two.headers.get("idempotent-replayed")).toBeNull();
    expect(two.body.id).not.toBe(one.body.id);
  });

  it("keeps no error answer: a refused request leaves the key free", async () => {
    const app = await t.createApp();
    const key = newKey();
    const refused = await put(t, app, "_events", { payload: 1 }, key);
    expect(refused.status).toBe(403);
    const invalid = await put(t, app, "jobs", { payload: 1, ttlSeconds: 0 }, key);
    expect(invalid.status).toBe(400);
    const ok = await put(t, app, "jobs", { payload: 1 }, key);
    expect([ok.status, ok.headers.get("idempotent-replayed")]).toEqual([200, null]);
    expect(await depth(t, app, "jobs")).toBe(1);
  });

  it("refuses a malformed key with a 400 naming the header", async () => {
    const app = await t.createApp();
    for (const key of ["k".repeat(256), "caf\u00e9"]) {
      const res = await put(t, app, "jobs", { payload: 1 }, key);
      expect(res.status).toBe(400);
      expect(res.body.error).toMatchObject({
        code: "invalid_argument",
        message: "Idempotency-Key: must be 1 to 255 printable ASCII characters",
      });
    }
    expect((await put(t, app, "jobs", { payload: 1 }, "k".repeat(255))).status).toBe(200);
    expect(await depth(t, app, "jobs")).toBe(1);
  });

  it("replays a secret link without making a second one", async () => {
    const app = await t.createApp();
    await t.admin.declareSecrets({ appId: app.id, names: ["API_KEY"] });
    const key = newKey();
    const link = () =>
      t.request("POST", "/v1/secrets/API_KEY/link", { token: app.token, headers: { "idempotency-key": key } });
    const first = await link();
    const again = await link();
    expect([first.status, again.status]).toEqual([200, 200]);
    expect(again.body).toEqual(first.body);
    expect((await t.admin.listSecrets({ appId: app.id })).secrets).toHaveLength(1);
    // Neither the key nor the link's token is readable in the database.
    const linkToken = new URL(first.body.url as string).pathname.split("/").pop()!;
    expect(linkToken.length).toBeGreaterThan(16);
    const { rows } = await sql<{
      key: string;
      response: Uint8Array;
    }>`SELECT key, response FROM idempotency_keys WHERE app_id = ${app.id}`.execute(tables(t.server.deps.db));
    expect(rows).toHaveLength(1);
    expect(rows[0].key).toBe(crypto.createHash("sha256").update(key).digest("hex"));
    const raw = Buffer.from(rows[0].response);
    expect(raw.includes(key)).toBe(false);
    expect(raw.includes(linkToken)).toBe(false);
    // Nor can whoever reads the database and guesses the key open it: a server-side secret is mixed in.
    const byKeyAlone = Buffer.from(
      crypto.hkdfSync("sha256", key, Buffer.alloc(0), "platform-batteries idempotent answer", 32),
    );
    const decipher = crypto.createDecipheriv("aes-256-gcm", byKeyAlone, raw.subarray(0, 12));
    decipher.setAuthTag(raw.subarray(12, 28));
    expect(() => Buffer.concat([decipher.update(raw.subarray(28)), decipher.final()])).toThrow();
  });

  it("replays a batch of analytics events without storing or counting them twice", async () => {
    const app = await t.createApp();
    expect(
      (await t.request("POST", "/v1/analytics/types", { token: app.token, body: { name: "signup" } })).status,
    ).toBe(200);
    const key = newKey();
    const log = () =>
      t.request("POST", "/v1/analytics/events", {
        token: app.token,
        body: { events: [{ type: "signup" }, { type: "signup" }] },
        headers: { "idempotency-key": key },
      });
    const first = await log();
    const again = await log();
    expect([first.status, again.status, again.headers.get("idempotent-replayed")]).toEqual([200, 200, "true"]);
    expect(again.body).toEqual(first.body);
    expect(Number((await t.admin.getUsage({ appId: app.id })).events!.used)).toBe(2);
  });

  it("replays a generate and an embed without charging tokens twice", async () => {
    const app = await t.createApp();
    const used = async () => {
      const u = await t.admin.getUsage({ appId: app.id });
      return [Number(u.fastTokens!.used), Number(u.embedTokens!.used)];
    };
    for (const [path, body] of [
      ["/v1/inference/generate", { prompt: "hello there", maxTokens: 16 }],
      ["/v1/inference/embed", { input: "hello there" }],
    ] as const) {
      const key = newKey();
      const call = () => t.request("POST", path, { token: app.token, body, headers: { "idempotency-key": key } });
      const first = await call();
      expect(first.status, JSON.stringify(first.body)).toBe(200);
      const charged = await used();
      const again = await call();
      expect([again.status, again.headers.get("idempotent-replayed")]).toEqual([200, "true"]);
      expect(again.body).toEqual(first.body);
      expect(await used()).toEqual(charged);
    }
    expect((await used()).every((n) => n > 0)).toBe(true);
  });

  it("answers 409 while a run holds the key, and lets a repeat take over the key of a run that died", async () => {
    const app = await t.createApp();
    const key = newKey();
    const first = await put(t, app, "jobs", { payload: 1 }, key);
    const db = tables(t.server.deps.db);
    // The row as a run left it that had claimed the key and not finished (its process is gone).
    const running = (lockedFor: string) =>
      sql`UPDATE idempotency_keys SET state = 'running', response = NULL, status = NULL,
            locked_until = now() + ${lockedFor}::interval WHERE app_id = ${app.id}`.execute(db);
    await running("1 hour");
    const busy = await put(t, app, "jobs", { payload: 1 }, key);
    expect([busy.status, busy.body.error.code, busy.headers.get("retry-after")]).toEqual([
      409,
      "idempotency_key_in_use",
      "1",
    ]);
    // Another request under the key is still refused as such.
    expect((await put(t, app, "jobs", { payload: 2 }, key)).status).toBe(422);
    await running("-1 second");
    const retaken = await put(t, app, "jobs", { payload: 1 }, key);
    expect([retaken.status, retaken.headers.get("idempotent-replayed")]).toEqual([200, null]);
    expect(retaken.body.id).not.toBe(first.body.id);
    expect((await put(t, app, "jobs", { payload: 1 }, key)).body.id).toBe(retaken.body.id);
  });

  it("a live run keeps its key past the hold's length: a repeat is told 409 and never runs the work beside it", async () => {
    // A run of the service's own Idempotency, with a hold of 1 s instead of 300 s (a generate slower than the
    // hold was taken over by its repeat, run twice and charged twice).
    const idempotency = createIdempotency({
      store: createIdempotencyStore(t.server.deps.db),
      logger: pino({ level: "silent" }),
      metrics: createMetrics(),
      lockSeconds: 1,
      answerSecrets: [crypto.randomBytes(32)],
    });
    const app = await t.createApp();
    const record = await t.server.deps.apps.get(app.id);
    const key = newKey();
    const context = () => {
      const values = createContextValues().set(principalKey, { kind: "app", app: record, tokenId: "t" });
      return createHandlerContext({
        service: QueueService,
        method: QueueService.method.putMessage,
        protocolName: "connect",
        requestMethod: "POST",
        url: "http://localhost/",
        requestHeader: { "idempotency-key": key },
        contextValues: values,
      });
    };
    const req = create(PutMessageRequestSchema, { queue: "slow" });
    let finishFirst!: () => void;
    const runs: string[] = [];
    const first = idempotency.run(QueueService.method.putMessage, req, context(), async () => {
      runs.push("first");
      await new Promise<void>((resolve) => (finishFirst = resolve));
      return { id: "first-answer", queue: "slow" };
    });
    // Until the database's clock is past the first hold's end, with the run still going.
    const db = tables(t.server.deps.db);
    await vi.waitFor(
      async () => {
        const { rows } = await sql<{ lapsed: boolean; held: boolean }>`
          SELECT created_at + interval '1.5 s' < now() AS lapsed, locked_until > now() AS held
          FROM idempotency_keys WHERE app_id = ${app.id}`.execute(db);
        expect(rows).toEqual([{ lapsed: true, held: true }]);
      },
      { timeout: 10_000, interval: 50 },
    );
    const repeat = await idempotency
      .run(QueueService.method.putMessage, req, context(), async () => {
        runs.push("repeat");
        return { id: "second-answer", queue: "slow" };
      })
      .catch((e: unknown) => e);
    expect((repeat as { code?: string }).code).toBe("idempotency_key_in_use");
    finishFirst();
    expect(await first).toMatchObject({ id: "first-answer" });
    const replay = await idempotency.run(QueueService.method.putMessage, req, context(), async () => {
      runs.push("replay");
      return { id: "third-answer", queue: "slow" };
    });
    expect([replay.id, runs]).toEqual(["first-answer", ["first"]]);
  });

  it("forgets a key after 24 hours: the request runs again, and housekeeping deletes the row", async () => {
    const app = await t.createApp();
    const key = newKey();
    const first = await put(t, app, "jobs", { payload: 1 }, key);
    const db = tables(t.server.deps.db);
    const age = () =>
      sql`UPDATE idempotency_keys SET expires_at = now() - interval '1 second' WHERE app_id = ${app.id}`.execute(db);
    await age();
    const again = await put(t, app, "jobs", { payload: 1 }, key);
    expect([again.status, again.headers.get("idempotent-replayed")]).toEqual([200, null]);
    expect(again.body.id).not.toBe(first.body.id);
    expect(await depth(t, app, "jobs")).toBe(2);
    expect((await put(t, app, "jobs", { payload: 1 }, key)).body.id).toBe(again.body.id);
    await age();
    expect(await keyRows(t, app.id)).toBe(1);
    const swept = await t.server.housekeeping.runAll();
    expect(swept["idempotency key expiry"]).toBeGreaterThanOrEqual(1);
    expect(await keyRows(t, app.id)).toBe(0);
  });
});

describe("Idempotency-Key: an answer stored with the work it answers", () => {
  async function links(appId: string): Promise<number> {
    const { rows } = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM secret_links WHERE app_id = ${appId}`.execute(tables(t.server.deps.db));
    return rows[0].n;
  }

  /**
   * The RPCs whose work is one transaction of the platform database (events: with the SQL store; mail:
   * with the outbox, whose row is the message):
   * each request, and how much of its work there is (messages, links).
   */
  const works: {
    what: string;
    prepare?: (app: TestApp) => Promise<unknown>;
    send: (app: TestApp, key: string) => ReturnType<TestServer["request"]>;
    count: (app: TestApp) => Promise<number>;
  }[] = [
    {
      what: "a put",
      send: (app, key) => put(t, app, "jobs", { payload: { order: 1 } }, key),
      count: (app) => depth(t, app, "jobs"),
    },
    {
      what: "a put with a dedup key",
      send: (app, key) => put(t, app, "jobs", { payload: { order: 1 }, dedupKey: "order-1" }, key),
      count: (app) => depth(t, app, "jobs"),
    },
    {
      what: "a batch put",
      send: (app, key) =>
        t.request("POST", "/v1/queues/jobs/batch", {
          token: app.token,
          body: { messages: [{ payload: 1 }, { payload: 2 }] },
          headers: { "idempotency-key": key },
        }),
      count: async (app) => (await depth(t, app, "jobs")) / 2,
    },
    {
      what: "a batch of analytics events",
      prepare: (app) =>
        t.request("POST", "/v1/analytics/types", { token: app.token, body: { name: "visit" } }).then((r) => {
          expect(r.status).toBe(200);
        }),
      send: (app, key) =>
        t.request("POST", "/v1/analytics/events", {
          token: app.token,
          body: { events: [{ type: "visit" }, { type: "visit" }] },
          headers: { "idempotency-key": key },
        }),
      count: async (app) => {
        const { rows } = await sql<{ n: number }>`
          SELECT count(*)::int AS n FROM analytics_events WHERE app_id = ${app.id}`.execute(tables(t.server.deps.db));
        return rows[0].n / 2;
      },
    },
    {
      what: "a mail to the outbox",
      send: (app, key) =>
        t.request("POST", "/v1/mail/send", {
          token: app.token,
          body: { to: "reader@example.com", subject: "Receipt", text: "Thanks" },
          headers: { "idempotency-key": key },
        }),
      count: (app) => mailsOf(app.id),
    },
    {
      what: "a secret link",
      prepare: (app) => t.admin.declareSecrets({ appId: app.id, names: ["API_KEY"] }),
      send: (app, key) =>
        t.request("POST", "/v1/secrets/API_KEY/link", { token: app.token, headers: { "idempotency-key": key } }),
      count: (app) => links(app.id),
    },
  ];

  for (const work of works) {
    it(`${work.what}: when its answer cannot be stored, the work is not done either, and the retry does it once`, async () => {
      const app = await t.createApp();
      await work.prepare?.(app);
      const key = newKey();
      const db = tables(t.server.deps.db);
      // Storing the answer fails, as it would if the process died right after the work.
      const allow = await refuseWrites(t.server.deps.db, "idempotency_keys", "UPDATE", "NEW.state = 'done'");
      let failed: Awaited<ReturnType<typeof work.send>>;
      try {
        failed = await work.send(app, key);
      } finally {
        await allow();
      }
      expect(failed.status).toBeGreaterThanOrEqual(500);
      expect(await work.count(app)).toBe(0);
      // Even once a held key's lock lapses, the retry finds no work done and does it once.
      await sql`UPDATE idempotency_keys SET locked_until = now() - interval '1 second' WHERE app_id = ${app.id}`.execute(
        db,
      );
      const done = await work.send(app, key);
      expect([done.status, done.headers.get("idempotent-replayed")]).toEqual([200, null]);
      const again = await work.send(app, key);
      expect([again.status, again.headers.get("idempotent-replayed")]).toEqual([200, "true"]);
      expect(again.body).toEqual(done.body);
      expect(await work.count(app)).toBe(1);
    });
  }
});

describe.skipIf(backend !== "postgres")(
  `Idempotency-Key: a run that lost its key (${backend === "postgres" ? "PostgreSQL" : "skipped: needs a PostgreSQL server (DATABASE_URL); holding a put on a lock takes a second connection, and PGlite has one"})`,
  () => {
    /** `locker` holds the queue's put lock in its transaction; `observer` reads and changes the keys outside it. */
    const clients = usePgClients(t, 2);
    const [locker, observer] = [() => clients[0], () => clients[1]];

    const waitingOnLocks = async () =>
      (
        await observer().query<{ n: number }>(
          "SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
        )
      ).rows[0].n;
    const attemptOf = async (appId: string) =>
      (await observer().query<{ attempt: string }>("SELECT attempt FROM idempotency_keys WHERE app_id = $1", [appId]))
        .rows[0]?.attempt;
    const until = async (what: string, done: () => Promise<boolean>) => {
      const deadline = Date.now() + 10_000;
      while (!(await done())) {
        if (Date.now() > deadline) throw new Error(`not seen within 10 s: ${what}`);
        await new Promise((resolve) => setImmediate(resolve));
      }
    };

    it("rolls its put back when a repeat took the key over after its lock lapsed: one message, the repeat's", async () => {
      const app = await t.createApp();
      const key = newKey();
      // The queue's put lock, held here, stops the first run before its insert.
      await locker().query("BEGIN");
      // (A keyed put takes the serialised path, under this lock, to store its answer with the message.)
      await locker().query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", [`queue:${app.id}:jobs`]);
      const first = put(t, app, "jobs", { payload: 1 }, key);
      await until("the first put waiting on the queue's lock", async () => (await waitingOnLocks()) === 1);
      const firstAttempt = await attemptOf(app.id);
      expect(firstAttempt).toBeDefined();
      // The first run is taken for dead: its lock lapses and a repeat takes the key over.
      await observer().query(
        "UPDATE idempotency_keys SET locked_until = now() - interval '1 second' WHERE app_id = $1",
        [app.id],
      );
      const repeat = put(t, app, "jobs", { payload: 1 }, key);
      await until(
        "the repeat owning the key and waiting on the lock",
        async () => (await attemptOf(app.id)) !== firstAttempt && (await waitingOnLocks()) === 2,
      );
      await locker().query("COMMIT");
      const [lost, won] = await Promise.all([first, repeat]);
      expect([lost.status, lost.body.error?.code]).toEqual([409, "idempotency_key_in_use"]);
      expect(won.status).toBe(200);
      expect(await depth(t, app, "jobs")).toBe(1);
      const replay = await put(t, app, "jobs", { payload: 1 }, key);
      expect([replay.status, replay.headers.get("idempotent-replayed"), replay.body.id]).toEqual([
        200,
        "true",
        won.body.id,
      ]);
    });
  },
);

describe("Idempotency-Key over Connect and gRPC", () => {
  it("is honoured as metadata, and shared with REST for the same request", async () => {
    const app = await t.createApp();
    const key = newKey();
    const headers = { "idempotency-key": key };
    const rest = await put(t, app, "jobs", { payload: { order: 7 } }, key);
    for (const protocol of ["connect", "grpc"] as const) {
      const c = t.client(QueueService, app.token, protocol);
      let replayed: string | null = null;
      const res = await c.putMessage(
        {
          queue: "jobs",
          payload: {
            kind: { case: "structValue", value: { fields: { order: { kind: { case: "numberValue", value: 7 } } } } },
          },
        },
        { headers, onHeader: (h) => void (replayed = h.get("idempotent-replayed")) },
      );
      expect(res.id).toBe(rest.body.id);
      expect(replayed).toBe("true");
      const err = await c
        .putMessage({ queue: "jobs", payload: { kind: { case: "numberValue", value: 8 } } }, { headers })
        .catch((e: unknown) => ConnectError.from(e));
      expect(err).toBeInstanceOf(ConnectError);
      expect((err as ConnectError).code).toBe(Code.InvalidArgument);
      expect((err as ConnectError).findDetails(ErrorDetailSchema)[0]?.code).toBe("idempotency_key_reused");
    }
    expect(await depth(t, app, "jobs")).toBe(1);
  });

  it("answers a request with no JSON form (a NaN payload) with the RPC's own error, and keeps the key free", async () => {
    const app = await t.createApp();
    const c = t.client(QueueService, app.token, "grpc");
    const headers = { "idempotency-key": newKey() };
    const err = await c
      .putMessage({ queue: "idem", payload: { kind: { case: "numberValue", value: Number.NaN } } }, { headers })
      .catch((e: unknown) => ConnectError.from(e));
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.InvalidArgument);
    expect((err as ConnectError).findDetails(ErrorDetailSchema)[0]?.code).toBe("invalid_argument");
    const ok = await c.putMessage({ queue: "idem", payload: { kind: { case: "numberValue", value: 1 } } }, { headers });
    expect(ok.id).toBeTruthy();
    expect(await depth(t, app, "idem")).toBe(1);
  });

  it("runs 20 racing gRPC repeats once; the losers are Aborted idempotency_key_in_use", async () => {
    const app = await t.createApp();
    const c = t.client(QueueService, app.token, "grpc");
    const headers = { "idempotency-key": newKey() };
    const results = await Promise.all(
      Array.from({ length: 20 }, () =>
        c.putMessage({ queue: "race", payload: { kind: { case: "numberValue", value: 1 } } }, { headers }).then(
          (r) => r.id,
          (e: unknown) => ConnectError.from(e),
        ),
      ),
    );
    const ids = results.filter((r): r is string => typeof r === "string");
    const errors = results.filter((r): r is ConnectError => r instanceof ConnectError);
    expect(new Set(ids).size).toBe(1);
    for (const e of errors) {
      expect(e.code).toBe(Code.Aborted);
      expect(e.findDetails(ErrorDetailSchema)[0]?.code).toBe("idempotency_key_in_use");
    }
    expect(await depth(t, app, "race")).toBe(1);
  });
});

describe("Idempotency-Key across two instances on one database", () => {
  let pair: Instances;
  beforeAll(async () => {
    pair = await startInstances(2, { env: { MAIL_DOMAIN: DOMAIN } });
  });
  afterAll(() => pair.close());

  it("runs 20 repeats racing over both instances once: one message, one mail", async () => {
    const [one, two] = pair.servers as [TestServer, TestServer];
    const app = await one.createApp();
    const putKey = newKey();
    const puts = await Promise.all(
      Array.from({ length: 20 }, (_, i) => put(i % 2 ? two : one, app, "race", { payload: "x" }, putKey)),
    );
    expect(puts.every((a) => a.status === 200 || a.status === 409)).toBe(true);
    expect(new Set(puts.filter((a) => a.status === 200).map((a) => a.body.id as string)).size).toBe(1);
    expect(await depth(one, app, "race")).toBe(1);

    const mailKey = newKey();
    const sends = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        (i % 2 ? two : one).request("POST", "/v1/mail/send", {
          token: app.token,
          body: { to: "reader@example.com", subject: "Once", text: "x" },
          headers: { "idempotency-key": mailKey },
        }),
      ),
    );
    expect(sends.every((a) => a.status === 200 || a.status === 409)).toBe(true);
    expect((await one.admin.listMail({ appId: app.id })).mails).toHaveLength(1);
  });
});

describe("Idempotency-Key across a restart", () => {
  let database: TestDatabase;
  beforeAll(async () => {
    database = await createTestDatabase();
  });
  afterAll(() => database.drop());

  it("replays the first answer from a server started after the first one stopped", async () => {
    const first = await startServer({ database });
    const app = await first.createApp();
    const key = newKey();
    const answer = await put(first, app, "jobs", { payload: "once" }, key);
    expect(answer.status).toBe(200);
    await first.close();

    const second = await startServer({ database });
    try {
      const again = await put(second, app, "jobs", { payload: "once" }, key);
      expect([again.status, again.headers.get("idempotent-replayed")]).toEqual([200, "true"]);
      expect(again.body).toEqual(answer.body);
      expect(await depth(second, app, "jobs")).toBe(1);
    } finally {
      await second.close();
    }
  });
});
