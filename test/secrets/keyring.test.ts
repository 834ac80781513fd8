/**
 * Sealing (AES-256-GCM bound to app, name and version) and key rotation:
 * with the new key as SECRETS_KEY and the old one in SECRETS_OLD_KEYS every
 * value stays readable, `rotateSecretsKey` re-seals them all under the new
 * key, after which the old key is no longer needed.
 */
import { spawnSync } from "node:child_process";
import crypto from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../../src/core/config.ts";
import { openDatabase } from "../../src/core/database/index.ts";
import { createKeyring, keyIdOf, keyringFromConfig, UnknownKeyError } from "../../src/secrets/keyring.ts";
import { rotateSecretsKey } from "../../src/secrets/rotate-key.ts";
import {
  createTestDatabase,
  startServer,
  type TestApp,
  type TestDatabase,
  type TestServer,
} from "../support/harness.ts";
import { tables } from "../support/tables.ts";

const newKey = () => crypto.randomBytes(32);

describe("createKeyring", () => {
  const context = { appId: "3f1c1b9e-0000-4000-8000-000000000001", name: "API_KEY", version: 3 };

  it("opens what it sealed, under the current or an old key", () => {
    const oldKey = newKey();
    const sealedOld = createKeyring(oldKey).seal("value ✓", context);
    expect(sealedOld.keyId).toBe(keyIdOf(oldKey));
    const ring = createKeyring(newKey(), [oldKey]);
    expect(ring.open(sealedOld, context)).toBe("value ✓");
    const sealedNew = ring.seal("value ✓", context);
    expect(sealedNew.keyId).toBe(ring.currentKeyId);
    expect(sealedNew.sealed.equals(ring.seal("value ✓", context).sealed)).toBe(false);
    expect(ring.open(sealedNew, context)).toBe("value ✓");
  });

  it("refuses a value moved to another app, name or version, or tampered with", () => {
    const ring = createKeyring(newKey());
    const sealed = ring.seal("value", context);
    expect(() => ring.open(sealed, { ...context, appId: "3f1c1b9e-0000-4000-8000-000000000002" })).toThrow();
    expect(() => ring.open(sealed, { ...context, name: "OTHER" })).toThrow();
    expect(() => ring.open(sealed, { ...context, version: 2 })).toThrow();
    const tampered = Buffer.from(sealed.sealed);
    tampered[tampered.length - 1] ^= 1;
    expect(() => ring.open({ ...sealed, sealed: tampered }, context)).toThrow();
  });

  it("names the missing key id of a value it cannot open", () => {
    const sealed = createKeyring(newKey()).seal("value", context);
    expect(() => createKeyring(newKey()).open(sealed, context)).toThrow(UnknownKeyError);
  });
});

describe("SECRETS_OLD_KEYS", () => {
  it("is a comma-separated list of base64 32-byte keys, refused by name otherwise", () => {
    const [a, b] = [newKey(), newKey()];
    const config = loadConfig({ SECRETS_OLD_KEYS: ` ${a.toString("base64")}, ${b.toString("base64")} ` });
    expect(config.secretsOldKeys.map((k) => k.toString("hex"))).toEqual([a.toString("hex"), b.toString("hex")]);
    expect(loadConfig({}).secretsOldKeys).toEqual([]);
    expect(() => loadConfig({ SECRETS_OLD_KEYS: "c2hvcnQ=" })).toThrow(ConfigError);
    expect(() => loadConfig({ SECRETS_OLD_KEYS: "c2hvcnQ=" })).toThrow(/SECRETS_OLD_KEYS/);
  });
});

describe("rotateSecretsKey", () => {
  let database: TestDatabase;
  const keyA = newKey().toString("base64");
  const keyB = newKey().toString("base64");
  const open: TestServer[] = [];
  const start = async (env: Record<string, string>) => {
    const server = await startServer({ database, env });
    open.push(server);
    return server;
  };
  const stop = async (server: TestServer) => {
    open.splice(open.indexOf(server), 1);
    await server.close();
  };

  beforeAll(async () => {
    database = await createTestDatabase();
  });
  afterAll(async () => {
    for (const server of open) await server.close();
    await database?.drop();
  });

  it("keeps every value readable through the rotation and after the old key is gone", async () => {
    // Under key A: values set by the owner and through a link, and an unset secret.
    let t = await start({ SECRETS_KEY: keyA });
    const apps: TestApp[] = [await t.createApp(), await t.createApp()];
    const expected = new Map<string, string>();
    for (const [i, app] of apps.entries()) {
      await t.admin.declareSecrets({ appId: app.id, names: ["ONE", "TWO", "UNSET"] });
      await t.admin.setSecret({ appId: app.id, name: "ONE", value: `one-${i}` });
      await t.admin.setSecret({ appId: app.id, name: "ONE", value: `one-${i}-v2` });
      const link = await t.request("POST", "/v1/secrets/TWO/link", { token: app.token });
      const path = new URL(link.body.url).pathname;
      expect((await t.request("PUT", path, { body: { value: `two-${i}` } })).status).toBe(200);
      expected.set(`${app.id}/ONE`, `one-${i}-v2`);
      expected.set(`${app.id}/TWO`, `two-${i}`);
    }
    const readAll = async (server: TestServer) => {
      const out = new Map<string, unknown>();
      for (const app of apps) {
        for (const name of ["ONE", "TWO", "UNSET"]) {
          const res = await server.request("GET", `/v1/secrets/${name}`, { token: app.token });
          if (res.status !== 409) out.set(`${app.id}/${name}`, res.status === 200 ? res.body.value : res.status);
        }
      }
      return out;
    };
    expect(await readAll(t)).toEqual(expected);
    const pendingLink = await t.request("POST", "/v1/secrets/UNSET/link", { token: apps[0].token });
    // A form made while key A was current, submitted after the switch to key B.
    const formLink = new URL((await t.request("POST", "/v1/secrets/UNSET/link", { token: apps[1].token })).body.url)
      .pathname;
    const formHtml = await fetch(t.url + formLink).then((r) => r.text());
    const csrf = /name="csrf" value="([^"]+)"/.exec(formHtml)![1];
    await stop(t);

    // Without key A the instance refuses to start (its values are sealed under A), and so does a rotation.
    await expect(start({ SECRETS_KEY: keyB })).rejects.toThrow(
      /^SECRETS_KEY: this database's secrets are sealed under key id /,
    );
    const direct = await openDatabase({ databaseUrl: database.url, dataDir: database.dataDir });
    try {
      await expect(rotateSecretsKey(direct.db, createKeyring(Buffer.from(keyB, "base64")))).rejects.toThrow(
        UnknownKeyError,
      );
    } finally {
      await direct.close();
    }

    // Key B current, key A old: everything readable; new sets go under B.
    t = await start({ SECRETS_KEY: keyB, SECRETS_OLD_KEYS: keyA });
    expect(await readAll(t)).toEqual(expected);
    const submitted = await fetch(t.url + formLink, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ csrf, value: "form-across-keys" }),
    });
    expect(submitted.status).toBe(200);
    expected.set(`${apps[1].id}/UNSET`, "form-across-keys");
    await t.admin.setSecret({ appId: apps[1].id, name: "ONE", value: "set-during-rotation" });
    expected.set(`${apps[1].id}/ONE`, "set-during-rotation");
    const keyring = keyringFromConfig(t.server.deps.config);
    expect(keyring.currentKeyId).toBe(keyIdOf(Buffer.from(keyB, "base64")));
    const report = await rotateSecretsKey(t.server.deps.db, keyring);
    expect(report).toEqual({ keyId: keyring.currentKeyId, reencrypted: 3, alreadyCurrent: 2 });
    expect(await rotateSecretsKey(t.server.deps.db, keyring)).toEqual({
      keyId: keyring.currentKeyId,
      reencrypted: 0,
      alreadyCurrent: 5,
    });
    const keyIds = await tables(t.server.deps.db)
      .selectFrom("secrets")
      .select("key_id")
      .distinct()
      .where("key_id", "is not", null)
      .execute();
    expect(keyIds.map((r) => r.key_id)).toEqual([keyring.currentKeyId]);
    expect(await readAll(t)).toEqual(expected);
    await stop(t);

    // Key A dropped: still every value, versions untouched; the pending link still works.
    t = await start({ SECRETS_KEY: keyB });
    expect(await readAll(t)).toEqual(expected);
    expect((await t.request("GET", "/v1/secrets/ONE", { token: apps[0].token })).body.version).toBe(2);
    const path = new URL(pendingLink.body.url).pathname;
    expect((await t.request("GET", path)).status).toBe(200);
    expect((await t.request("PUT", path, { body: { value: "after" } })).status).toBe(200);
    expect((await t.request("GET", "/v1/secrets/UNSET", { token: apps[0].token })).body.value).toBe("after");
    expected.set(`${apps[0].id}/UNSET`, "after");
    await stop(t);

    // Once more through the command line, with no server running: key B becomes old, key C current.
    const keyC = newKey().toString("base64");
    const cli = spawnSync(process.execPath, ["src/cli.ts", "secrets", "rotate-key"], {
      env: {
        PATH: process.env.PATH,
        DATA_DIR: database.dataDir,
        ...(database.url ? { DATABASE_URL: database.url } : {}),
        SECRETS_KEY: keyC,
        SECRETS_OLD_KEYS: `${keyA},${keyB}`,
      },
      encoding: "utf8",
    });
    expect(cli.stderr).not.toMatch(/one-|two-|after/);
    expect(cli.status, cli.stderr).toBe(0);
    expect(cli.stdout).toMatch(/re-encrypted 6 /);
    t = await start({ SECRETS_KEY: keyC });
    for (const [key, value] of expected) {
      const [appId, name] = key.split("/");
      const app = apps.find((a) => a.id === appId)!;
      expect((await t.request("GET", `/v1/secrets/${name}`, { token: app.token })).body.value).toBe(value);
    }
  });
});
