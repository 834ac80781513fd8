/**
 * The AdminService RPCs behind the operator dashboard, over Connect against
 * the real server: tokens with a coarse last use, the daily usage history,
 * the analytics query the app would run, queue peek and purge, secrets'
 * status without values, one-time links, one mail; and that a service token
 * is refused for all of them.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code } from "@connectrpc/connect";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { toJsonString } from "@bufbuild/protobuf";
import { AdminService, MailStatus } from "../../gen/platform/admin/v1/admin_pb.js";
import { ListSecretsResponseSchema } from "../../gen/platform/admin/v1/admin_pb.js";
import { Interval } from "../../gen/platform/analytics/v1/analytics_pb.js";
import { startServer, type TestServer, connectError } from "../support/harness.ts";

let t: TestServer;
beforeAll(async () => {
  t = await startServer();
});
afterAll(() => t?.close());

describe("ListTokens", () => {
  it("lists label and creation, and marks the last use once the token was used", async () => {
    const app = await t.createApp();
    const { tokenId } = await t.admin.issueToken({ appId: app.id, label: "ci" });
    let { tokens } = await t.admin.listTokens({ appId: app.id });
    expect(tokens).toHaveLength(2);
    const ci = tokens.find((x) => x.id === tokenId)!;
    expect(ci.label).toBe("ci");
    expect(ci.lastUsedAt).toBeUndefined();
    expect(timestampDate(ci.createdAt!).getTime()).toBeGreaterThan(Date.now() - 60_000);

    const before = Date.now();
    expect((await t.request("GET", "/v1/queues", { token: app.token })).status).toBe(200);
    // The mark is written after the answer (not awaited by the request): poll the admin API for it.
    await expect
      .poll(
        async () => (await t.admin.listTokens({ appId: app.id })).tokens.find((x) => x.id !== tokenId)?.lastUsedAt,
        { timeout: 5000, interval: 50 },
      )
      .toBeDefined();
    ({ tokens } = await t.admin.listTokens({ appId: app.id }));
    const used = tokens.find((x) => x.id !== tokenId)!;
    expect(timestampDate(used.lastUsedAt!).getTime()).toBeGreaterThanOrEqual(before - 1000);
    expect(tokens.find((x) => x.id === tokenId)!.lastUsedAt).toBeUndefined();
  });

  it("refuses an unknown app and a missing app id", async () => {
    expect((await connectError(t.admin.listTokens({ appId: "no-such-app" }))).code).toBe(Code.NotFound);
    expect((await connectError(t.admin.listTokens({ appId: "" }))).rawMessage).toBe("app_id: is required");
  });
});

describe("GetUsageHistory and ListApps' usage", () => {
  it("has one row per day, oldest first, today's use last, and ListApps shows today's use", async () => {
    const app = await t.createApp();
    await t.request("POST", "/v1/analytics/types", { token: app.token, body: { name: "signup" } });
    const logged = await t.request("POST", "/v1/analytics/events", {
      token: app.token,
      body: { events: [{ type: "signup" }, { type: "signup" }] },
    });
    expect(logged.status).toBe(200);
    const { days, limits } = await t.admin.getUsageHistory({ appId: app.id });
    expect(days).toHaveLength(30);
    expect(days.at(-1)!.day).toBe(new Date().toISOString().slice(0, 10));
    expect(days.at(-1)!.events).toBe(2n);
    expect(days[0].day < days[1].day).toBe(true);
    expect(days.slice(0, -1).every((d) => d.events === 0n)).toBe(true);
    expect(limits?.eventsPerDay).toBeGreaterThan(0);
    expect((await t.admin.getUsageHistory({ appId: app.id, days: 1 })).days).toHaveLength(1);
    expect((await connectError(t.admin.getUsageHistory({ appId: app.id, days: 0 }))).rawMessage).toBe(
      "days: must be from 1 to 366",
    );

    const list = await t.admin.listApps({});
    const today = list.usageToday.find((u) => u.appId === app.id);
    expect(today?.events).toMatchObject({ used: 2n, cap: BigInt(limits!.eventsPerDay!) });
  });
});

describe("ListEventTypes and QueryAnalytics", () => {
  it("answers what the app's own query answers", async () => {
    const app = await t.createApp();
    await t.request("POST", "/v1/analytics/types", {
      token: app.token,
      body: { name: "click", properties: { plan: "string" } },
    });
    const at = Date.now() - 3600_000;
    await t.request("POST", "/v1/analytics/events", {
      token: app.token,
      body: {
        events: [
          { type: "click", at, properties: { plan: "pro" } },
          { type: "click", at, properties: { plan: "free" } },
          { type: "click", at, properties: { plan: "pro" } },
        ],
      },
    });
    const types = await t.admin.listEventTypes({ appId: app.id });
    expect(types.types.map((x) => x.name)).toEqual(["click"]);
    const since = Date.now() - 86_400_000;
    const admin = await t.admin.queryAnalytics({
      appId: app.id,
      type: "click",
      since: timestampFromDate(new Date(since)),
      interval: Interval.DAY,
      groupBy: "plan",
    });
    const own = await t.request("POST", "/v1/analytics/query", {
      token: app.token,
      body: { type: "click", since, interval: "day", groupBy: "plan" },
    });
    expect(Number(admin.total)).toBe(3);
    expect(own.body.total).toBe(3);
    const groups = Object.fromEntries(admin.buckets.map((b) => [b.group, Number(b.count)]));
    expect(groups).toEqual(
      Object.fromEntries(own.body.buckets.map((b: { group: string; count: number }) => [b.group, b.count])),
    );
    expect(groups).toEqual({ pro: 2, free: 1 });
    // The app's own validation, message and all.
    const err = await connectError(
      t.admin.queryAnalytics({
        appId: app.id,
        type: "click",
        since: timestampFromDate(new Date(since)),
        interval: Interval.DAY,
        groupBy: "nope",
      }),
    );
    expect(err.code).toBe(Code.InvalidArgument);
    expect(err.rawMessage).toMatch(/groupBy/);
  });
});

describe("ListQueues, PeekMessages, PurgeQueue", () => {
  it("peeks without leasing, cuts long payloads, and purges one queue of one app only", async () => {
    const app = await t.createApp();
    const other = await t.createApp();
    for (const payload of [{ n: 1 }, { n: 2 }, { big: "x".repeat(10_000) }]) {
      expect((await t.request("POST", "/v1/queues/jobs", { token: app.token, body: { payload } })).status).toBe(200);
    }
    await t.request("POST", "/v1/queues/jobs", { token: other.token, body: { payload: { other: true } } });

    const queues = await t.admin.listQueues({ appId: app.id });
    expect(queues.queues.map((q) => [q.name, Number(q.depth), Number(q.inFlight)])).toEqual([["jobs", 3, 0]]);

    const peek = await t.admin.peekMessages({ appId: app.id, queue: "jobs" });
    expect(peek.messages).toHaveLength(3);
    expect(JSON.parse(peek.messages[0].payload)).toEqual({ n: 1 });
    expect(peek.messages[0].deliveries).toBe(0);
    expect(peek.messages[2].truncated).toBe(true);
    expect(peek.messages[2].payload).toHaveLength(4096);
    expect(Number(peek.messages[2].sizeBytes)).toBeGreaterThan(10_000);
    // Not leased: the depth is unchanged and a consumer still gets the first message.
    expect(Number((await t.admin.listQueues({ appId: app.id })).queues[0].depth)).toBe(3);
    const consumed = await t.request("POST", "/v1/queues/jobs/consume", { token: app.token, body: { waitSeconds: 0 } });
    expect(consumed.body.payload ?? consumed.body.message?.payload).toEqual({ n: 1 });

    expect((await connectError(t.admin.peekMessages({ appId: app.id, queue: "Bad Name" }))).code).toBe(
      Code.InvalidArgument,
    );
    expect((await connectError(t.admin.peekMessages({ appId: app.id, queue: "jobs", limit: 0 }))).rawMessage).toBe(
      "limit: must be from 1 to 100",
    );

    const purged = await t.admin.purgeQueue({ appId: app.id, queue: "jobs" });
    expect(Number(purged.purged)).toBe(3);
    expect((await t.admin.listQueues({ appId: app.id })).queues).toEqual([]);
    expect(Number((await t.admin.listQueues({ appId: other.id })).queues[0].depth)).toBe(1);
  });
});

describe("ListSecrets and CreateSecretLink", () => {
  it("shows names, set/unset and versions, never a value; a link sets the secret", async () => {
    const app = await t.createApp();
    await t.admin.declareSecrets({ appId: app.id, names: ["API_KEY", "DB_URL"] });
    const value = "super-secret-value-" + Date.now();
    await t.admin.setSecret({ appId: app.id, name: "API_KEY", value });
    const list = await t.admin.listSecrets({ appId: app.id });
    expect(list.secrets.map((s) => [s.name, s.set, s.version])).toEqual([
      ["API_KEY", true, 1n],
      ["DB_URL", false, undefined],
    ]);
    expect(toJsonString(ListSecretsResponseSchema, list)).not.toContain(value);

    const link = await t.admin.createSecretLink({ appId: app.id, name: "DB_URL" });
    expect(link.url).toMatch(/\/secret-links\/[A-Za-z0-9_-]{20,}$/);
    expect(timestampDate(link.expiresAt!).getTime()).toBeGreaterThan(Date.now());
    expect((await connectError(t.admin.createSecretLink({ appId: app.id, name: "NOT_DECLARED" }))).code).toBe(
      Code.NotFound,
    );
  });
});

describe("GetMail", () => {
  it("reads one mail of the app's log by the id ListMail gives, and no other app's", async () => {
    const app = await t.createApp();
    const other = await t.createApp();
    await t.admin.updateApp({ appId: app.id, mailFrom: "hello@example.com" });
    const sent = await t.request("POST", "/v1/mail/send", {
      token: app.token,
      body: { to: "ann@example.org", subject: "Welcome", text: "Hi Ann" },
    });
    expect(sent.status).toBe(200);
    const { mails } = await t.admin.listMail({ appId: app.id });
    expect(mails).toHaveLength(1);
    expect(mails[0].id).toMatch(/^\d+$/);
    const { mail } = await t.admin.getMail({ appId: app.id, id: mails[0].id });
    expect(mail).toMatchObject({
      subject: "Welcome",
      text: "Hi Ann",
      to: "ann@example.org",
      from: "hello@example.com",
      status: MailStatus.STORED,
    });
    expect((await connectError(t.admin.getMail({ appId: other.id, id: mails[0].id }))).code).toBe(Code.NotFound);
    expect((await connectError(t.admin.getMail({ appId: app.id, id: "abc" }))).rawMessage).toBe(
      "id: must be a mail id from ListMail",
    );
  });
});

describe("the new RPCs and a service token", () => {
  it("refuses every one of them with Unauthenticated", async () => {
    const app = await t.createApp();
    const asApp = t.client(AdminService, app.token);
    const calls: Promise<unknown>[] = [
      asApp.listTokens({ appId: app.id }),
      asApp.getUsageHistory({ appId: app.id }),
      asApp.listEventTypes({ appId: app.id }),
      asApp.queryAnalytics({ appId: app.id, type: "x" }),
      asApp.listQueues({ appId: app.id }),
      asApp.peekMessages({ appId: app.id, queue: "jobs" }),
      asApp.purgeQueue({ appId: app.id, queue: "jobs" }),
      asApp.listSecrets({ appId: app.id }),
      asApp.createSecretLink({ appId: app.id, name: "X" }),
      asApp.getMail({ appId: app.id, id: "1" }),
    ];
    for (const call of calls) expect((await connectError(call)).code).toBe(Code.Unauthenticated);
  });
});
