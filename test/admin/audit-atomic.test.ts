/**
 * Every audited operator change commits with its audit entry or not at all
 * (the audit log is never behind its changes): with the entry's insert made
 * to fail inside the change's transaction (a trigger on `audit_log` refusing one action's `ok`
 * entry), the RPC answers an error and the change is not there; without the
 * trigger, the change is made and recorded once. Over Connect against the real
 * server, on PGlite and PostgreSQL.
 */
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { ConnectError } from "@connectrpc/connect";
import { sql } from "kysely";
import { useTestServer, type TestApp } from "../support/harness.ts";
import { tables } from "../support/tables.ts";

const t = useTestServer();

async function failure(p: Promise<unknown>): Promise<ConnectError> {
  try {
    await p;
  } catch (err) {
    return ConnectError.from(err);
  }
  throw new Error("expected the call to fail");
}

beforeAll(async () => {
  await sql`
    CREATE FUNCTION test_refuse_audit() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF NEW.action = TG_ARGV[0] AND NEW.outcome = 'ok' THEN
        RAISE EXCEPTION 'audit entry refused by the test';
      END IF;
      RETURN NEW;
    END $$`.execute(t.server.deps.db);
});

/** From now until the test ends, the `ok` entry of `action` cannot be written. */
async function refuseAudit(action: string): Promise<void> {
  await sql`
    CREATE TRIGGER test_refuse_audit BEFORE INSERT ON audit_log
    FOR EACH ROW EXECUTE FUNCTION test_refuse_audit(${sql.lit(action)})`.execute(t.server.deps.db);
}

afterEach(async () => {
  await sql`DROP TRIGGER IF EXISTS test_refuse_audit ON audit_log`.execute(t.server.deps.db);
});

async function entries(appId: string, action: string): Promise<string[]> {
  const { entries } = await t.admin.listAuditEntries({ appId, action, pageSize: 100 });
  return entries.map((e) => e.outcome).reverse();
}

async function waiting(app: TestApp, queue: string): Promise<number> {
  return (await t.admin.peekMessages({ appId: app.id, queue, limit: 100 })).messages.length;
}

async function put(app: TestApp, queue: string): Promise<void> {
  const res = await t.request("POST", `/v1/queues/${queue}`, { token: app.token, body: { payload: { n: 1 } } });
  expect(res.status).toBe(200);
}

let deadSeq = 0;
async function deadLetter(app: TestApp, queue: string): Promise<void> {
  deadSeq++;
  await tables(t.server.deps.db)
    .insertInto("queue_dead_letters")
    .values({
      id: `00000000-0000-4000-8000-${String(deadSeq).padStart(12, "0")}`,
      app_id: app.id,
      queue,
      payload: "{}",
      enqueued_at: new Date(),
      deliveries: 3,
      expires_at: sql`now() + interval '1 day'`,
    } as never)
    .execute();
}

async function deadLetters(app: TestApp, queue: string): Promise<number> {
  return (await t.admin.listDeadLetters({ appId: app.id, queue, pageSize: 100 })).deadLetters.length;
}

describe("an audited change and its entry commit together", () => {
  it("queue.purge", async () => {
    const app = await t.createApp();
    await put(app, "jobs");
    await refuseAudit("queue.purge");
    const err = await failure(t.admin.purgeQueue({ appId: app.id, queue: "jobs" }));
    expect(err.rawMessage).not.toMatch(/refused by the test/);
    expect(await waiting(app, "jobs")).toBe(1);
    expect(await entries(app.id, "queue.purge")).toEqual(["failed"]);

    await sql`DROP TRIGGER test_refuse_audit ON audit_log`.execute(t.server.deps.db);
    expect((await t.admin.purgeQueue({ appId: app.id, queue: "jobs" })).purged).toBe(1n);
    expect(await waiting(app, "jobs")).toBe(0);
    expect(await entries(app.id, "queue.purge")).toEqual(["failed", "ok"]);
  });

  it("dead_letters.purge", async () => {
    const app = await t.createApp();
    await deadLetter(app, "jobs");
    await refuseAudit("dead_letters.purge");
    await failure(t.admin.purgeDeadLetters({ appId: app.id, queue: "jobs", all: true }));
    expect(await deadLetters(app, "jobs")).toBe(1);
    expect(await entries(app.id, "dead_letters.purge")).toEqual(["failed"]);

    await sql`DROP TRIGGER test_refuse_audit ON audit_log`.execute(t.server.deps.db);
    expect((await t.admin.purgeDeadLetters({ appId: app.id, queue: "jobs", all: true })).purged).toBe(1n);
    expect(await deadLetters(app, "jobs")).toBe(0);
    expect(await entries(app.id, "dead_letters.purge")).toEqual(["failed", "ok"]);
  });

  it("dead_letters.replay, all and by id", async () => {
    const app = await t.createApp();
    await deadLetter(app, "jobs");
    await deadLetter(app, "jobs");
    const ids = (await t.admin.listDeadLetters({ appId: app.id, queue: "jobs", pageSize: 100 })).deadLetters.map(
      (d) => d.id,
    );
    await refuseAudit("dead_letters.replay");
    await failure(t.admin.replayDeadLetters({ appId: app.id, queue: "jobs", all: true }));
    await failure(t.admin.replayDeadLetters({ appId: app.id, queue: "jobs", ids: [ids[0]] }));
    expect(await deadLetters(app, "jobs")).toBe(2);
    expect(await waiting(app, "jobs")).toBe(0);
    expect(await entries(app.id, "dead_letters.replay")).toEqual(["failed", "failed"]);

    await sql`DROP TRIGGER test_refuse_audit ON audit_log`.execute(t.server.deps.db);
    expect((await t.admin.replayDeadLetters({ appId: app.id, queue: "jobs", ids: [ids[0]] })).replayed).toBe(1n);
    expect((await t.admin.replayDeadLetters({ appId: app.id, queue: "jobs", all: true })).replayed).toBe(1n);
    expect(await deadLetters(app, "jobs")).toBe(0);
    expect(await waiting(app, "jobs")).toBe(2);
    expect(await entries(app.id, "dead_letters.replay")).toEqual(["failed", "failed", "ok", "ok"]);
  });

  it("event.publish", async () => {
    const app = await t.createApp();
    await refuseAudit("event.publish");
    await failure(t.admin.publishEvent({ appId: app.id, kind: "deploy.done" }));
    expect(await waiting(app, "_events")).toBe(0);
    expect(await entries(app.id, "event.publish")).toEqual(["failed"]);

    await sql`DROP TRIGGER test_refuse_audit ON audit_log`.execute(t.server.deps.db);
    await t.admin.publishEvent({ appId: app.id, kind: "deploy.done" });
    expect(await waiting(app, "_events")).toBe(1);
    expect(await entries(app.id, "event.publish")).toEqual(["failed", "ok"]);
  });

  it("queue.put (PutTestMessage)", async () => {
    const app = await t.createApp();
    const payload = { kind: { case: "numberValue" as const, value: 7 } };
    await refuseAudit("queue.put");
    await failure(t.admin.putTestMessage({ appId: app.id, queue: "jobs", payload }));
    expect(await waiting(app, "jobs")).toBe(0);
    expect(await entries(app.id, "queue.put")).toEqual(["failed"]);

    await sql`DROP TRIGGER test_refuse_audit ON audit_log`.execute(t.server.deps.db);
    const { id } = await t.admin.putTestMessage({ appId: app.id, queue: "jobs", payload });
    const { messages } = await t.admin.peekMessages({ appId: app.id, queue: "jobs", limit: 10 });
    expect(messages.map((m) => [m.id, m.payload])).toEqual([[id, "7"]]);
    expect(await entries(app.id, "queue.put")).toEqual(["failed", "ok"]);
  });

  it("secret.link", async () => {
    const app = await t.createApp();
    await t.admin.addSecretNames({ appId: app.id, names: ["KEY"] });
    await refuseAudit("secret.link");
    await failure(t.admin.createSecretLink({ appId: app.id, name: "KEY" }));
    expect((await t.admin.listSecretLinks({ appId: app.id })).links).toEqual([]);
    expect(await entries(app.id, "secret.link")).toEqual(["failed"]);

    await sql`DROP TRIGGER test_refuse_audit ON audit_log`.execute(t.server.deps.db);
    const link = await t.admin.createSecretLink({ appId: app.id, name: "KEY" });
    expect(link.name).toBe("KEY");
    expect((await t.admin.listSecretLinks({ appId: app.id })).links.map((l) => l.name)).toEqual(["KEY"]);
    expect((await fetch(`${t.url}${new URL(link.url).pathname}`)).status).toBe(200);
    expect(await entries(app.id, "secret.link")).toEqual(["failed", "ok"]);
  });
});
