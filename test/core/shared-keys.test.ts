/**
 * Instances on one database share the secrets key and the admin token: a
 * start that disagrees is refused with one line naming the variable, and a
 * value sealed under a key an instance lacks is a 503, never a 500.
 */
import crypto from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { migrate, openDatabase } from "../../src/core/database/index.ts";
import { adoptAdminToken, verifySharedKeys } from "../../src/core/shared-keys/index.ts";
import { createKeyring } from "../../src/secrets/keyring.ts";
import { tables } from "../support/tables.ts";
import { ConfigError } from "../../src/core/config.ts";
import { createTestDatabase, startServer, type TestDatabase } from "../support/harness.ts";

let database: TestDatabase;
beforeAll(async () => {
  database = await createTestDatabase();
});
afterAll(() => database.drop());

const otherKey = () => crypto.randomBytes(32).toString("base64");
const otherToken = () => "pba_other_" + crypto.randomBytes(24).toString("base64url");

describe("verifySharedKeys (src/shared-keys.ts)", () => {
  it("refuses an instance with another SECRETS_KEY or ADMIN_TOKEN, and starts one that shares both", async () => {
    const first = await startServer({ database });
    const app = await first.createApp();
    await first.admin.declareSecrets({ appId: app.id, names: ["API_KEY"] });
    await first.admin.setSecret({ appId: app.id, name: "API_KEY", value: "shared-value" });
    await first.close();

    const wrongKey = await startServer({ database, env: { SECRETS_KEY: otherKey() } }).catch((e: unknown) => e);
    expect(wrongKey).toBeInstanceOf(ConfigError);
    expect((wrongKey as ConfigError).variable).toBe("SECRETS_KEY");
    expect((wrongKey as Error).message).toMatch(/every instance on one database must use the same SECRETS_KEY/);
    expect((wrongKey as Error).message).not.toContain(database.secretsKey);

    const wrongToken = await startServer({ database, env: { ADMIN_TOKEN: otherToken() } }).catch((e: unknown) => e);
    expect(wrongToken).toBeInstanceOf(ConfigError);
    expect((wrongToken as ConfigError).variable).toBe("ADMIN_TOKEN");

    const second = await startServer({ database });
    try {
      const read = await second.request("GET", "/v1/secrets/API_KEY", { token: app.token });
      expect(read).toMatchObject({ status: 200, body: { value: "shared-value", version: 1 } });
    } finally {
      await second.close();
    }
  });

  it("of two instances rotating at once from one recorded key to two different keys, one starts", async () => {
    const own = await createTestDatabase();
    const db = await openDatabase({ databaseUrl: own.url, dataDir: own.dataDir });
    try {
      await migrate(db.db);
      const adminToken = otherToken();
      const key = () => crypto.randomBytes(32);
      for (let trial = 0; trial < 10; trial++) {
        const recorded = key();
        await db.db.deleteFrom("platform_settings" as never).execute();
        await verifySharedKeys(db.db, { keyring: createKeyring(recorded), adminToken });
        // Both list the recorded key among their old keys, each with a new key of its own.
        const starts = await Promise.allSettled(
          [key(), key()].map((next) =>
            verifySharedKeys(db.db, { keyring: createKeyring(next, [recorded]), adminToken }),
          ),
        );
        expect(starts.map((s) => s.status).sort(), `trial ${trial}`).toEqual(["fulfilled", "rejected"]);
        const refused = starts.find((s): s is PromiseRejectedResult => s.status === "rejected")!.reason as ConfigError;
        expect(refused.variable).toBe("SECRETS_KEY");
      }
    } finally {
      await db.close();
      await own.drop();
    }
  });

  it("an intended new admin token is adopted through adoptAdminToken, after which the old one is refused", async () => {
    const newToken = otherToken();
    const direct = await openDatabase({ databaseUrl: database.url, dataDir: database.dataDir });
    try {
      await adoptAdminToken(direct.db, newToken);
    } finally {
      await direct.close();
    }
    const renewed = await startServer({ database, env: { ADMIN_TOKEN: newToken } });
    try {
      expect((await renewed.admin.listApps({})).apps.length).toBe(1);
    } finally {
      await renewed.close();
    }
    await expect(startServer({ database })).rejects.toThrow(
      /^ADMIN_TOKEN: another instance on this database uses a different admin token/,
    );
  });
});

describe("getSecret (src/secrets/secrets-facility.ts)", () => {
  it("a value sealed under a key this instance lacks is 503 unavailable with Retry-After, never a 500", async () => {
    const t = await startServer();
    try {
      const app = await t.createApp();
      await t.admin.declareSecrets({ appId: app.id, names: ["API_KEY"] });
      await t.admin.setSecret({ appId: app.id, name: "API_KEY", value: "v" });
      // As if another instance had sealed it under a key this one was never given.
      await tables(t.server.deps.db)
        .updateTable("secrets")
        .set({ key_id: "00000000deadbeef" })
        .where("app_id", "=", app.id)
        .execute();
      const res = await t.request("GET", "/v1/secrets/API_KEY", { token: app.token });
      expect(res.status).toBe(503);
      expect(res.headers.get("retry-after")).toBe("1");
      expect(res.body.error.code).toBe("unavailable");
      expect(res.body.error.message).toContain("API_KEY cannot be read right now");
    } finally {
      await t.close();
    }
  });
});
