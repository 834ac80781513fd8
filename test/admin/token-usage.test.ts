/**
 * The coarse last-use mark of service tokens on a real database: the first
 * use writes it, uses within the interval write nothing, a use after the
 * interval writes again; and requests through the server mark only the
 * token that was used.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import pino from "pino";
import { createTokenUsageRecorder } from "../../src/admin/token-usage.ts";
import { createAppStore, type AppTables } from "../../src/core/apps/app-store.ts";
import { startServer, type TestServer } from "../support/harness.ts";

let t: TestServer;
beforeAll(async () => {
  t = await startServer();
});
afterAll(() => t?.close());

const tables = () => t.server.deps.db.withTables<AppTables>();
const lastUsed = async (tokenId: string) =>
  (await tables().selectFrom("app_tokens").select("last_used_at").where("id", "=", tokenId).executeTakeFirstOrThrow())
    .last_used_at;

describe("createTokenUsageRecorder", () => {
  it("writes at most once per interval per token", async () => {
    const app = await t.createApp();
    const { tokenId } = await t.admin.issueToken({ appId: app.id });
    let now = 1_000_000;
    const db = tables();
    const record = createTokenUsageRecorder(
      createAppStore(t.server.deps.db),
      pino({ level: "silent" }),
      60_000,
      () => now,
    );
    record(tokenId);
    await expect.poll(() => lastUsed(tokenId)).not.toBeNull();

    // Within the interval: nothing is sent (the mark stays the same, even after the database row is reset).
    await db.updateTable("app_tokens").set({ last_used_at: null }).where("id", "=", tokenId).execute();
    now += 59_000;
    record(tokenId);
    record(tokenId);
    // A write for another token goes out at once (the throttle is per token); once it landed, a write
    // for the first token would have too.
    const other = await t.admin.issueToken({ appId: app.id });
    record(other.tokenId);
    await expect.poll(() => lastUsed(other.tokenId)).not.toBeNull();
    expect(await lastUsed(tokenId)).toBeNull();

    // After the interval: written again.
    now += 2_000;
    record(tokenId);
    await expect.poll(() => lastUsed(tokenId)).not.toBeNull();
  });

  it("marks the token a request used, through the server", async () => {
    const app = await t.createApp();
    const unused = await t.admin.issueToken({ appId: app.id, label: "unused" });
    expect((await t.request("GET", "/v1/queues", { token: app.token })).status).toBe(200);
    const { tokens } = await t.admin.listTokens({ appId: app.id });
    await expect
      .poll(async () =>
        (await t.admin.listTokens({ appId: app.id })).tokens.filter((x) => x.lastUsedAt).map((x) => x.id),
      )
      .toEqual(tokens.filter((x) => x.id !== unused.tokenId).map((x) => x.id));
  });
});
