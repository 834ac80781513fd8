import { describe, expect, it } from "vitest";
import { Code } from "@connectrpc/connect";
import { AdminService, AppStatus } from "../../gen/platform/admin/v1/admin_pb.js";
import { ErrorDetailSchema } from "../../gen/platform/meta/v1/error_pb.js";
import { DEFAULT_LIMITS } from "../../src/core/apps/apps.ts";
import { useTestServer, connectError } from "../support/harness.ts";
import { tables } from "../support/tables.ts";

const t = useTestServer({ env: { MAIL_DOMAIN: "apps.example.net" } });

describe("AdminService apps", () => {
  it("CreateApp: running, both facilities on, default limits, sender from MAIL_DOMAIN", async () => {
    const { app } = await t.admin.createApp({ name: "shop" });
    expect(app).toMatchObject({
      name: "shop",
      status: AppStatus.RUNNING,
      mailFrom: "shop@apps.example.net",
      analyticsEnabled: true,
      secretsEnabled: true,
      declaredSecrets: [],
      limits: { ...DEFAULT_LIMITS },
    });
    expect(app!.id).toMatch(/^[0-9a-f-]{36}$/);
    expect(app!.createdAt).toBeDefined();
  });

  it("CreateApp: refuses bad and duplicate names with InvalidArgument and our code", async () => {
    for (const name of ["", "Shop", "1abc", "a".repeat(64), "a b"]) {
      const err = await connectError(t.admin.createApp({ name }));
      expect(err.code, name).toBe(Code.InvalidArgument);
      expect(err.findDetails(ErrorDetailSchema)[0]?.code).toBe("invalid_argument");
      expect(err.rawMessage).toMatch(/^name: /);
    }
    await t.admin.createApp({ name: "dup" });
    const err = await connectError(t.admin.createApp({ name: "dup" }));
    expect(err.code).toBe(Code.InvalidArgument);
    expect(err.rawMessage).toContain("exists already");
  });

  it("CreateApp: concurrent creates of one name make exactly one app", async () => {
    const results = await Promise.allSettled(Array.from({ length: 10 }, () => t.admin.createApp({ name: "race" })));
    expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(1);
  });

  it("CreateApp refuses a name shaped like an app id: apps are found by id or name, and it would name another app", async () => {
    const { app: other } = await t.admin.createApp({ name: "holder" });
    // A lowercase UUID starting with a letter matches the name pattern.
    const shaped = `a${other!.id.slice(1)}`;
    const err = await connectError(t.admin.createApp({ name: shaped }));
    expect(err.code).toBe(Code.InvalidArgument);
    expect(err.rawMessage).toBe("name: must not have the shape of an app id (a UUID)");
    expect((await t.admin.listApps({})).apps.map((a) => a.name)).not.toContain(shaped);
  });

  it("GetApp and ListApps: by id or by name; unknown is NotFound", async () => {
    const { app } = await t.admin.createApp({ name: "lookup" });
    expect((await t.admin.getApp({ appId: app!.id })).app?.name).toBe("lookup");
    expect((await t.admin.getApp({ appId: "lookup" })).app?.id).toBe(app!.id);
    expect((await connectError(t.admin.getApp({ appId: "00000000-0000-0000-0000-000000000000" }))).code).toBe(
      Code.NotFound,
    );
    expect((await connectError(t.admin.getApp({ appId: "" }))).code).toBe(Code.InvalidArgument);
    const { apps } = await t.admin.listApps({});
    expect(apps.map((a) => a.name)).toContain("lookup");
  });

  it("UpdateApp: changes only the fields given; limits merge", async () => {
    const { app } = await t.admin.createApp({ name: "upd" });
    const id = app!.id;
    await t.admin.updateApp({ appId: id, limits: { eventsPerDay: 5 } });
    const { app: after } = await t.admin.updateApp({
      appId: id,
      limits: { mailPerDay: 7 },
      analyticsEnabled: false,
      mailFrom: "",
    });
    expect(after).toMatchObject({
      status: AppStatus.RUNNING,
      analyticsEnabled: false,
      secretsEnabled: true,
      mailFrom: "",
      limits: { ...DEFAULT_LIMITS, eventsPerDay: 5, mailPerDay: 7 },
    });
    const { app: stopped } = await t.admin.updateApp({ appId: id, status: AppStatus.STOPPED });
    expect(stopped?.status).toBe(AppStatus.STOPPED);
    expect(stopped?.limits?.eventsPerDay).toBe(5);
  });

  it("UpdateApp: refuses bad values naming the field", async () => {
    const { app } = await t.admin.createApp({ name: "upd-bad" });
    const cases: [Parameters<typeof t.admin.updateApp>[0], RegExp][] = [
      [{ appId: app!.id, limits: { leaseSeconds: 0 } }, /^limits\.leaseSeconds: /],
      [{ appId: app!.id, limits: { eventsPerDay: -1 } }, /^limits\.eventsPerDay: /],
      [{ appId: app!.id, mailFrom: "not an address" }, /^mail_from: /],
      [{ appId: app!.id, status: AppStatus.UNSPECIFIED }, /^status: /],
    ];
    for (const [req, message] of cases) {
      const err = await connectError(t.admin.updateApp(req));
      expect(err.code).toBe(Code.InvalidArgument);
      expect(err.rawMessage).toMatch(message);
    }
  });

  it("DeleteApp: the app and its tokens are gone", async () => {
    const app = await t.createApp("gone");
    await t.admin.deleteApp({ appId: app.id });
    expect((await connectError(t.admin.getApp({ appId: app.id }))).code).toBe(Code.NotFound);
    expect((await t.request("GET", "/v1/inference/models", { token: app.token })).status).toBe(401);
    const rows = await tables(t.server.deps.db)
      .selectFrom("app_tokens")
      .select("id")
      .where("app_id", "=", app.id)
      .execute();
    expect(rows).toHaveLength(0);
  });
});

describe("AdminService tokens, secrets, usage", () => {
  it("IssueToken shows a new token each time; RevokeToken of an unknown id is NotFound", async () => {
    const { app } = await t.admin.createApp({ name: "tok" });
    const a = await t.admin.issueToken({ appId: app!.id });
    const b = await t.admin.issueToken({ appId: app!.id, label: "ci" });
    expect(a.token).not.toBe(b.token);
    expect(a.tokenId).not.toBe(b.tokenId);
    expect((await connectError(t.admin.revokeToken({ tokenId: "00000000-0000-0000-0000-000000000000" }))).code).toBe(
      Code.NotFound,
    );
    expect((await connectError(t.admin.revokeToken({ tokenId: "nope" }))).code).toBe(Code.InvalidArgument);
  });

  it("DeclareSecrets: sets the blueprint's names; bad names are refused", async () => {
    const { app } = await t.admin.createApp({ name: "bp" });
    const res = await t.admin.declareSecrets({ appId: app!.id, names: ["STRIPE_KEY", "API_TOKEN", "STRIPE_KEY"] });
    expect(res.app?.declaredSecrets).toEqual(["API_TOKEN", "STRIPE_KEY"]);
    const dropped = await t.admin.declareSecrets({ appId: app!.id, names: ["API_TOKEN"] });
    expect(dropped.app?.declaredSecrets).toEqual(["API_TOKEN"]);
    const err = await connectError(t.admin.declareSecrets({ appId: app!.id, names: ["ok", "9bad"] }));
    expect(err.code).toBe(Code.InvalidArgument);
    expect(err.rawMessage).toMatch(/^names\[1\]: /);
  });

  it("GetUsage: today's use and caps per facility", async () => {
    const { app } = await t.admin.createApp({ name: "use" });
    await t.admin.updateApp({ appId: app!.id, limits: { mailPerDay: 3 } });
    const usage = await t.admin.getUsage({ appId: app!.id });
    expect(usage.day).toBe(new Date().toISOString().slice(0, 10));
    expect(usage.mail).toMatchObject({ used: 0n, cap: 3n });
    expect(usage.events).toMatchObject({ used: 0n, cap: BigInt(DEFAULT_LIMITS.eventsPerDay) });
    expect(usage.fastTokens?.cap).toBe(BigInt(DEFAULT_LIMITS.fastTokensPerDay));
    expect(usage.embedTokens?.cap).toBe(BigInt(DEFAULT_LIMITS.embedTokensPerDay));
  });

  it("PublishEvent: empty data means null; a Value with an unset nested kind is InvalidArgument", async () => {
    const app = await t.createApp();
    const { id } = await t.admin.publishEvent({ appId: app.id, kind: "deploy.done", data: {} as never });
    expect(id).toBeTruthy();
    const consumed = await t.request("POST", "/v1/queues/_events/consume", {
      token: app.token,
      body: { waitSeconds: 0 },
    });
    expect(consumed.body.message.payload).toMatchObject({ kind: "deploy.done", data: null });
    const err = await connectError(
      t.admin.publishEvent({
        appId: app.id,
        kind: "x",
        data: { kind: { case: "listValue", value: { values: [{} as never] } } } as never,
      }),
    );
    expect(err.code).toBe(Code.InvalidArgument);
    expect(err.rawMessage).toMatch(/^data: /);
    expect((await connectError(t.admin.publishEvent({ appId: app.id, kind: "Bad Kind" }))).code).toBe(
      Code.InvalidArgument,
    );
  });

  it("every RPC refuses a missing token, a service token and a wrong admin token", async () => {
    const app = await t.createApp();
    for (const token of [undefined, app.token, t.adminToken + "x"]) {
      const client = t.client(AdminService, token);
      expect((await connectError(client.listApps({}))).code).toBe(Code.Unauthenticated);
      expect((await connectError(client.createApp({ name: "nope" }))).code).toBe(Code.Unauthenticated);
    }
  });
});
