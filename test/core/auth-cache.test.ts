import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AdminService, AppStatus } from "../../gen/platform/admin/v1/admin_pb.js";
import { createAuthenticator, generateServiceToken, hashToken } from "../../src/core/auth.ts";
import { MetaService } from "../../gen/platform/meta/v1/meta_pb.js";
import { InferenceService } from "../../gen/platform/inference/v1/inference_pb.js";
import { backend, startInstances, useMigratedDatabase, type Instances, type TestServer } from "../support/harness.ts";
import { tables } from "../support/tables.ts";

const generate = InferenceService.method.generate;

// The two blocks of one authenticator over the database share one migrated database; each app is its own.
const database = useMigratedDatabase();

/** A running app named `name` and one service token of it. */
async function appWithToken(name: string) {
  const app = await tables(database.db)
    .insertInto("apps")
    .values({ name, status: "running", mail_from: "", limits: "{}" })
    .returning("id")
    .executeTakeFirstOrThrow();
  const token = generateServiceToken();
  await tables(database.db)
    .insertInto("app_tokens")
    .values({ app_id: app.id, token_hash: hashToken(token), label: "" })
    .execute();
  return { id: app.id, token };
}

describe("createAuthenticator: remembered tokens", () => {
  it("serves a found token from memory until its lifetime ends, and never an unknown one", async () => {
    let now = 1_000;
    const auth = createAuthenticator({ db: database.db, adminToken: "x".repeat(40), cacheMs: 500, clock: () => now });
    const app = await appWithToken("mem-a");
    expect((await auth.authenticate(`Bearer ${app.token}`, generate)).kind).toBe("app");
    await tables(database.db).updateTable("apps").set({ status: "stopped" }).where("id", "=", app.id).execute();
    // Remembered (no invalidation was called): still running for this instance.
    expect((await auth.authenticate(`Bearer ${app.token}`, generate)).kind).toBe("app");
    now += 501;
    await expect(auth.authenticate(`Bearer ${app.token}`, generate)).rejects.toMatchObject({ code: "app_stopped" });
    await expect(auth.authenticate("Bearer pbt_unknown", generate)).rejects.toMatchObject({ code: "unauthenticated" });
  });

  it("looks a token in use up again in its last half-life, in the background, so its requests never wait for it", async () => {
    let now = 1_000;
    let lookups = 0;
    const auth = createAuthenticator({
      db: database.db,
      adminToken: "x".repeat(40),
      cacheMs: 500,
      clock: () => now,
      onTokenLookedUp: () => lookups++,
    });
    const app = await appWithToken("mem-refresh");
    expect((await auth.authenticate(`Bearer ${app.token}`, generate)).kind).toBe("app");
    expect(lookups).toBe(1);
    await tables(database.db).updateTable("apps").set({ status: "stopped" }).where("id", "=", app.id).execute();
    // In its first half-life: served from memory, not looked up.
    now += 200;
    expect((await auth.authenticate(`Bearer ${app.token}`, generate)).kind).toBe("app");
    expect(lookups).toBe(1);
    // In its last half-life: still served from memory (this request does not wait for the database), and
    // looked up again beside it; the next request gets what that lookup read.
    now += 100;
    expect((await auth.authenticate(`Bearer ${app.token}`, generate)).kind).toBe("app");
    await expect.poll(() => lookups).toBe(2);
    await expect(auth.authenticate(`Bearer ${app.token}`, generate)).rejects.toMatchObject({ code: "app_stopped" });
    // A refresh that finds the token gone forgets it at once, within the old entry's lifetime.
    await tables(database.db).deleteFrom("app_tokens").where("app_id", "=", app.id).execute();
    now += 300;
    await expect(auth.authenticate(`Bearer ${app.token}`, generate)).rejects.toMatchObject({ code: "app_stopped" });
    await expect
      .poll(() => auth.authenticate(`Bearer ${app.token}`, generate).catch((err: { code: string }) => err.code))
      .toBe("unauthenticated");
    expect(lookups).toBe(2);
  });

  it("invalidate() forgets at once", async () => {
    const auth = createAuthenticator({ db: database.db, adminToken: "x".repeat(40), cacheMs: 60_000 });
    const app = await appWithToken("mem-b");
    expect((await auth.authenticate(`Bearer ${app.token}`, generate)).kind).toBe("app");
    await tables(database.db).deleteFrom("app_tokens").where("app_id", "=", app.id).execute();
    auth.invalidate();
    await expect(auth.authenticate(`Bearer ${app.token}`, generate)).rejects.toMatchObject({ code: "unauthenticated" });
    expect((await auth.authenticate(undefined, MetaService.method.getHealth)).kind).toBe("public");
  });
});

describe("authenticateNow: the caller without waiting, only when authenticate would find the same", () => {
  it("decides a remembered token at once, and leaves everything else to authenticate", async () => {
    let now = 1_000;
    const adminToken = "x".repeat(40);
    const auth = createAuthenticator({ db: database.db, adminToken, cacheMs: 500, clock: () => now });
    const { id, token } = await appWithToken("now-a");
    const listModels = InferenceService.method.listModels;
    // Public services need no token; the admin service and unknown or malformed tokens are never decided here.
    expect(auth.authenticateNow!(undefined, MetaService.method.getHealth)).toEqual({ kind: "public" });
    expect(auth.authenticateNow!(`Bearer ${adminToken}`, AdminService.method.listApps)).toBeUndefined();
    expect(auth.authenticateNow!("Bearer pbt_unknown", generate)).toBeUndefined();
    expect(auth.authenticateNow!("Basic abc", generate)).toBeUndefined();
    // Not looked up yet: undefined; once authenticate found it, the same principal at once.
    expect(auth.authenticateNow!(`Bearer ${token}`, generate)).toBeUndefined();
    const found = await auth.authenticate(`Bearer ${token}`, generate);
    expect(auth.authenticateNow!(`Bearer ${token}`, generate)).toEqual(found);
    // Past the memory's lifetime, or after an invalidation: authenticate's to decide again.
    now += 501;
    expect(auth.authenticateNow!(`Bearer ${token}`, generate)).toBeUndefined();
    await tables(database.db).updateTable("apps").set({ status: "stopped" }).where("id", "=", id).execute();
    auth.invalidate();
    await expect(auth.authenticate(`Bearer ${token}`, generate)).rejects.toMatchObject({ code: "app_stopped" });
    // A stopped app: its open reads are decided at once, anything else is authenticate's refusal.
    expect(auth.authenticateNow!(`Bearer ${token}`, listModels)).toMatchObject({ kind: "app" });
    expect(auth.authenticateNow!(`Bearer ${token}`, generate)).toBeUndefined();
    auth.invalidate();
    expect(auth.authenticateNow!(`Bearer ${token}`, listModels)).toBeUndefined();
  });

  it("looks a token decided at once up again in its last half-life, as authenticate does", async () => {
    let now = 1_000;
    let lookups = 0;
    const auth = createAuthenticator({
      db: database.db,
      adminToken: "x".repeat(40),
      cacheMs: 500,
      clock: () => now,
      onTokenLookedUp: () => lookups++,
    });
    const { id, token } = await appWithToken("now-refresh");
    await auth.authenticate(`Bearer ${token}`, generate);
    expect(lookups).toBe(1);
    await tables(database.db).updateTable("apps").set({ status: "stopped" }).where("id", "=", id).execute();
    // Requests decided only at once (the hot path) keep the memory fresh: past half its lifetime, a lookup runs
    // beside them, and what it read (the app stopped) decides the next request, before the old entry would end.
    now += 300;
    expect(auth.authenticateNow!(`Bearer ${token}`, generate)).toMatchObject({ kind: "app" });
    await expect.poll(() => lookups).toBe(2);
    expect(auth.authenticateNow!(`Bearer ${token}`, generate)).toBeUndefined();
    await expect(auth.authenticate(`Bearer ${token}`, generate)).rejects.toMatchObject({ code: "app_stopped" });
  });
});

// On PGlite the two servers share the one in-process database; the trigger's NOTIFY reaches the other's listener.
describe(`remembered tokens across two instances (${backend})`, () => {
  let instances: Instances;
  let a: TestServer;
  let b: TestServer;
  beforeAll(async () => {
    instances = await startInstances(2);
    [a, b] = instances.servers as [TestServer, TestServer];
  });
  afterAll(() => instances?.close());

  it("stopping an app or revoking a token on one instance is honoured by the other within moments", async () => {
    const app = await a.createApp();
    const call = (t: TestServer, token = app.token) => t.request("GET", "/v1/queues", { token }).then((r) => r.status);
    expect(await call(b)).toBe(200); // b now remembers the token
    await a.admin.updateApp({ appId: app.id, status: AppStatus.STOPPED });
    expect(await call(a)).toBe(403); // at once on the instance that changed it
    await expect.poll(() => call(b), { timeout: 1500, interval: 5 }).toBe(403);

    await a.admin.updateApp({ appId: app.id, status: AppStatus.RUNNING });
    const { tokenId, token } = await a.admin.issueToken({ appId: app.id });
    expect(await call(b, token)).toBe(200);
    await a.admin.revokeToken({ tokenId });
    expect(await call(a, token)).toBe(401);
    await expect.poll(() => call(b, token), { timeout: 1500, interval: 5 }).toBe(401);
  });
});
