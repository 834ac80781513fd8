/**
 * The command line for the operator RPCs, run as a real child process
 * against the real server: tokens list, usage history, analytics types and
 * query, queues list/peek/purge, dead-letters list/replay/purge, secrets
 * list/link, mail get.
 */
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cleanEnv, nodeBinary } from "../support/service-process.ts";
import { sql } from "kysely";
import { startServer, type TestServer, type TestApp } from "../support/harness.ts";
import { tables } from "../support/tables.ts";

const run = promisify(execFile);
let t: TestServer;
let app: TestApp;
const cli = async (...args: string[]) => {
  const { stdout } = await run(nodeBinary, ["src/cli.ts", ...args], {
    env: cleanEnv({ PLATFORM_ADMIN_URL: t.url, ADMIN_TOKEN: t.adminToken, DATA_DIR: t.database.dataDir }),
  });
  return stdout;
};
const cliJson = async (...args: string[]) => JSON.parse(await cli(...args));

beforeAll(async () => {
  t = await startServer();
  app = await t.createApp("cli-ops");
});
afterAll(() => t?.close());

describe("the operator commands", () => {
  it("tokens list and usage history", async () => {
    const tokens = await cliJson("tokens", "list", "cli-ops");
    expect(tokens.tokens).toHaveLength(1);
    expect(tokens.tokens[0]).toHaveProperty("createdAt");
    const history = await cliJson("usage", "history", "cli-ops", "--days", "7");
    expect(history.days).toHaveLength(7);
    expect(history.days.at(-1).day).toBe(new Date().toISOString().slice(0, 10));
  });

  it("analytics types and query", async () => {
    await t.request("POST", "/v1/analytics/types", {
      token: app.token,
      body: { name: "visit", properties: { page: "string" } },
    });
    await t.request("POST", "/v1/analytics/events", {
      token: app.token,
      body: {
        events: [
          { type: "visit", properties: { page: "home" } },
          { type: "visit", properties: { page: "home" } },
        ],
      },
    });
    expect((await cliJson("analytics", "types", "cli-ops")).types.map((x: { name: string }) => x.name)).toEqual([
      "visit",
    ]);
    const since = new Date(Date.now() - 86_400_000).toISOString();
    const result = await cliJson(
      "analytics",
      "query",
      "cli-ops",
      "visit",
      "--since",
      since,
      "--interval",
      "hour",
      "--group-by",
      "page",
    );
    expect(result.total).toBe(2);
    expect(result.buckets[0].group).toBe("home");
  });

  it("queues list, peek and purge", async () => {
    await t.request("POST", "/v1/queues/work", { token: app.token, body: { payload: { job: 7 } } });
    expect((await cliJson("queues", "list", "cli-ops")).queues[0]).toMatchObject({ name: "work", depth: 1 });
    const peek = await cliJson("queues", "peek", "cli-ops", "work");
    expect(peek.messages[0].payload).toEqual({ job: 7 });
    // Without a terminal to ask on, a purge needs --yes, and does nothing without it.
    const refused = await cli("queues", "purge", "cli-ops", "work").then(
      () => undefined,
      (e: { code: number; stderr: string }) => e,
    );
    expect([refused?.code, refused?.stderr]).toEqual([
      2,
      expect.stringContaining("queues purge: not confirmed (type the queue's name, or pass --yes)"),
    ]);
    expect((await cliJson("queues", "list", "cli-ops")).queues[0]).toMatchObject({ name: "work", depth: 1 });
    expect(await cli("queues", "purge", "cli-ops", "work", "--yes")).toBe("purged 1 message(s)\n");
  });

  it("queues put, activity, and peek pages", async () => {
    for (const n of [1, 2, 3]) {
      const put = await cliJson("queues", "put", "cli-ops", "paged", JSON.stringify({ n }));
      expect(put.id).toMatch(/^[0-9a-f-]{36}$/);
    }
    const activity = await cliJson("queues", "activity", "cli-ops", "paged");
    expect(activity.hours).toHaveLength(24);
    expect(activity.hours.reduce((sum: number, h: { puts?: string }) => sum + Number(h.puts ?? 0), 0)).toBe(3);
    const first = await cliJson("queues", "peek", "cli-ops", "paged", "--limit", "2");
    expect(first.messages.map((m: { payload: unknown }) => m.payload)).toEqual([{ n: 1 }, { n: 2 }]);
    const rest = await cliJson("queues", "peek", "cli-ops", "paged", "--limit", "2", "--page", first.nextPageToken);
    expect(rest.messages.map((m: { payload: unknown }) => m.payload)).toEqual([{ n: 3 }]);
    await expect(cli("queues", "put", "cli-ops", "paged", "{oops")).rejects.toMatchObject({
      stderr: expect.stringContaining("JSON: not valid JSON"),
    });
  });

  it("queues put --group-key: the group's next waits behind its head; queues message shows the group", async () => {
    const first = await cliJson("queues", "put", "cli-ops", "grouped", '{"n":1}', "--group-key", "order-9");
    const second = await cliJson("queues", "put", "cli-ops", "grouped", '{"n":2}', "--group-key", "order-9");
    const got = await t.request("POST", "/v1/queues/grouped/consume", {
      token: app.token,
      body: { waitSeconds: 0, max: 10 },
    });
    expect(got.body.messages.map((m: { id: string }) => m.id)).toEqual([first.id]);
    const status = await cliJson("queues", "message", "cli-ops", "grouped", second.id);
    expect(status.message).toMatchObject({ status: "waiting", groupKey: "order-9" });
    await expect(cli("queues", "put", "cli-ops", "grouped", "1", "--group-key", "")).rejects.toMatchObject({
      stderr: expect.stringContaining("groupKey"),
    });
  });

  it("dead-letters list, replay and purge; the maxDeliveries limit (and a rate limit beside it)", async () => {
    await cli("apps", "set", "cli-ops", "--limit", "maxDeliveries=1", "--limit", "requestsPerSecond=900");
    expect((await t.admin.getApp({ appId: app.id })).app!.limits).toMatchObject({
      maxDeliveries: 1,
      requestsPerSecond: 900,
    });
    for (const job of [1, 2])
      await t.request("POST", "/v1/queues/dq", { token: app.token, body: { payload: { job } } });
    for (let i = 0; i < 2; i++)
      expect(
        (await t.request("POST", "/v1/queues/dq/consume", { token: app.token, body: { waitSeconds: 0 } })).body.message,
      ).not.toBeNull();
    // The leases lapse (without waiting for them), and the next consume moves both to the dead letters.
    await sql`UPDATE queue_messages SET visible_at = now() - interval '1 millisecond' WHERE app_id = ${app.id} AND queue = 'dq'`.execute(
      tables(t.server.deps.db),
    );
    expect(
      (await t.request("POST", "/v1/queues/dq/consume", { token: app.token, body: { waitSeconds: 0 } })).body.message,
    ).toBeNull();
    expect(
      (await cliJson("queues", "list", "cli-ops")).queues.find((q: { name: string }) => q.name === "dq"),
    ).toMatchObject({ depth: 0, deadLetters: 2 });
    const first = await cliJson("dead-letters", "list", "cli-ops", "dq", "--limit", "1");
    expect(first.deadLetters).toHaveLength(1);
    expect(first.deadLetters[0]).toMatchObject({ deliveries: 1, sizeBytes: 9 });
    const second = await cliJson(
      "dead-letters",
      "list",
      "cli-ops",
      "dq",
      "--limit",
      "1",
      "--page",
      first.nextPageToken,
    );
    expect(second.nextPageToken).toBe("");
    expect(await cli("dead-letters", "replay", "cli-ops", "dq", first.deadLetters[0].id)).toBe(
      "replayed 1 dead letter(s)\n",
    );
    const usage = await cli("dead-letters", "purge", "cli-ops", "dq").then(
      () => undefined,
      (e: { code: number; stderr: string }) => e,
    );
    expect(usage?.code).toBe(2);
    expect(usage?.stderr).toContain("give --all or one or more dead letter ids");
    const unconfirmed = await cli("dead-letters", "purge", "cli-ops", "dq", "--all").then(
      () => undefined,
      (e: { code: number; stderr: string }) => e,
    );
    expect(unconfirmed?.code).toBe(2);
    expect(unconfirmed?.stderr).toContain("dead-letters purge: not confirmed");
    expect(
      (await cliJson("queues", "list", "cli-ops")).queues.find((q: { name: string }) => q.name === "dq"),
    ).toMatchObject({ deadLetters: 1 });
    expect(await cli("dead-letters", "purge", "cli-ops", "dq", "--all", "--yes")).toBe("purged 1 dead letter(s)\n");
    expect(
      (await cliJson("queues", "list", "cli-ops")).queues.find((q: { name: string }) => q.name === "dq"),
    ).toMatchObject({ depth: 1, deadLetters: 0 });
    await t.admin.updateApp({ appId: app.id, limits: { maxDeliveries: 0 } });
  });

  it("secrets list and link, never a value", async () => {
    await t.admin.declareSecrets({ appId: app.id, names: ["TOKEN_A"] });
    await t.admin.setSecret({ appId: app.id, name: "TOKEN_A", value: "value-never-printed" });
    const out = await cli("secrets", "list", "cli-ops");
    expect(JSON.parse(out).secrets[0]).toMatchObject({ name: "TOKEN_A", set: true, version: 1 });
    expect(out).not.toContain("value-never-printed");
    expect((await cliJson("secrets", "link", "cli-ops", "TOKEN_A")).url).toMatch(/\/secret-links\//);
  });

  it("mail get", async () => {
    await t.admin.updateApp({ appId: app.id, mailFrom: "ops@example.com" });
    await t.request("POST", "/v1/mail/send", {
      token: app.token,
      body: { to: "bo@example.org", subject: "Report", text: "All good." },
    });
    const { mails } = await t.admin.listMail({ appId: app.id });
    const got = await cliJson("mail", "get", "cli-ops", mails[0].id);
    expect(got.mail).toMatchObject({ subject: "Report", text: "All good.", id: mails[0].id });
  });
});
