/**
 * What a failover looks like to one instance, without building one (the real
 * one is test/core/failover.test.ts): its connections terminated by an
 * administrator (57P01), then every new connection read-only (writes refused
 * with 25006, as on a standby not promoted yet). Writes are answered 503
 * `unavailable` with Retry-After over REST and Connect, never 500, and not
 * logged as unexpected; `/ready` says `read-only` while a `SELECT 1` would
 * answer; once the database takes writes again, the read-only connections
 * are discarded (not handed out again) and writes succeed.
 */
import pg from "pg";
import { afterAll, beforeAll, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { QueueService } from "../../gen/platform/queues/v1/queues_pb.js";
import { startServer, type TestServer, describeOnPostgres } from "../support/harness.ts";

describeOnPostgres("a read-only database", "PGlite is never read-only", () => {
  let t: TestServer;
  const lines: string[] = [];
  let admin: pg.Client;
  let name = "";
  beforeAll(async () => {
    t = await startServer({ logLines: lines });
    name = new URL(t.database.url!).pathname.slice(1);
    admin = new pg.Client({ connectionString: process.env.DATABASE_URL });
    await admin.connect();
  });
  afterAll(async () => {
    await admin?.query(`ALTER DATABASE ${name} RESET default_transaction_read_only`).catch(() => {});
    await admin?.end();
    await t?.close();
    await t?.database.drop();
  });

  it("answers writes 503 (never 500), says read-only in /ready, and discards those connections once it is writable", async () => {
    const app = await t.createApp();
    const put = () => t.request("POST", "/v1/queues/jobs", { token: app.token, body: { payload: { n: 1 } } });
    expect((await put()).status).toBe(200);

    await admin.query(`ALTER DATABASE ${name} SET default_transaction_read_only = on`);
    await admin.query(
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
      [name],
    );
    const refused = await Promise.all(Array.from({ length: 30 }, put));
    for (const res of refused) {
      expect(res.status).toBe(503);
      expect(res.body.error.code).toBe("unavailable");
      expect(res.headers.get("retry-after")).toMatch(/^\d+$/);
    }
    const connectPut = await t
      .client(QueueService, app.token)
      .putMessage({ queue: "jobs", payload: { kind: { case: "numberValue", value: 1 } } })
      .then(
        () => undefined,
        (err: unknown) => ConnectError.from(err),
      );
    expect(connectPut?.code).toBe(Code.Unavailable);
    // Reads still answer on a read-only server, so only a check of writability tells.
    expect((await t.request("GET", "/v1/queues", { token: app.token })).status).toBe(200);
    const ready = await t.request("GET", "/ready");
    expect(ready.status).toBe(503);
    expect(ready.body.checks.database).toBe("read-only");

    // One warning for the outage (the terminated connections, then the read-only ones), not one per request.
    const warned = () =>
      lines.filter((l) => (JSON.parse(l) as { msg: string }).msg.startsWith("database unreachable")).length;
    expect(warned()).toBe(1);

    await admin.query(`ALTER DATABASE ${name} RESET default_transaction_read_only`);
    // The pool's connections made while read-only stay read-only for their life: each is refused once
    // more, then discarded, so writes succeed again within the pool's size, never on a reused one.
    let attempts = 0;
    for (;;) {
      attempts++;
      const res = await put();
      if (res.status === 200) break;
      expect(res.status).toBe(503);
      expect(attempts).toBeLessThanOrEqual(30);
    }
    // A write answered within a second of the outage's start proves nothing (health.ts, OUTAGE_SETTLE_MS):
    // the outage is over with the first one after that, so write until it is said.
    const reachableAgain = () => lines.some((l) => l.includes('"msg":"database reachable again"'));
    for (const until = Date.now() + 10_000; !reachableAgain() && Date.now() < until;) await put();
    let readyAgain = await t.request("GET", "/ready");
    for (let i = 0; i < 30 && readyAgain.status !== 200; i++) readyAgain = await t.request("GET", "/ready");
    expect(readyAgain.status).toBe(200);

    const logged = lines.map((l) => JSON.parse(l) as { level: number; msg: string });
    expect(logged.filter((l) => l.level >= 50)).toEqual([]);
    expect(logged.filter((l) => l.msg === "database reachable again").length).toBeGreaterThanOrEqual(1);
  });
});
