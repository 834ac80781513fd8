/**
 * The secrets facility's rules over REST and over Connect/gRPC: listing,
 * reading, link creation and its outstanding-link cap, the owner's SetSecret,
 * versions, the blueprint, the secret.set event, and the disabled facility.
 */
import { sql } from "kysely";
import { describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { SecretsService } from "../../gen/platform/secrets/v1/secrets_pb.js";
import { useTestServer, type TestApp } from "../support/harness.ts";
import { refuseInserts } from "../support/refuse-writes.ts";
import { tables } from "../support/tables.ts";

/** Links are built on PUBLIC_URL (here a proxy's address), not on the address the server listens on. */
const PUBLIC_URL = "https://secrets.example.test/base";

const t = useTestServer({ env: { PUBLIC_URL: PUBLIC_URL + "/" } });

async function appWith(names: string[]): Promise<TestApp> {
  const app = await t.createApp();
  await t.admin.declareSecrets({ appId: app.id, names });
  return app;
}

async function linkToken(app: TestApp, name: string): Promise<string> {
  const res = await t.request("POST", `/v1/secrets/${name}/link`, { token: app.token });
  expect(res.status).toBe(200);
  expect(res.body.url.startsWith(`${PUBLIC_URL}/secret-links/`)).toBe(true);
  return new URL(res.body.url).pathname.split("/").pop()!;
}

async function connectCode(promise: Promise<unknown>): Promise<Code> {
  try {
    await promise;
  } catch (err) {
    return ConnectError.from(err).code;
  }
  throw new Error("expected an error");
}

describe("GET /v1/secrets", () => {
  it("lists every declared secret with its status, never a value", async () => {
    const app = await appWith(["API_KEY", "DB_PASSWORD", "_private"]);
    const before = Date.now();
    await t.admin.setSecret({ appId: app.id, name: "DB_PASSWORD", value: "hunter2-value" });
    const res = await t.request("GET", "/v1/secrets", { token: app.token });
    expect(res.status).toBe(200);
    expect(JSON.stringify(res.body)).not.toContain("hunter2-value");
    expect(res.body.secrets).toHaveLength(3);
    const byName = Object.fromEntries(res.body.secrets.map((s: { name: string }) => [s.name, s]));
    expect(byName.API_KEY).toEqual({ name: "API_KEY", set: false, version: null, setAt: null });
    expect(byName._private).toEqual({ name: "_private", set: false, version: null, setAt: null });
    expect(byName.DB_PASSWORD).toMatchObject({ name: "DB_PASSWORD", set: true, version: 1 });
    expect(byName.DB_PASSWORD.setAt).toBeGreaterThanOrEqual(before - 5000);
    expect(Object.keys(byName.DB_PASSWORD).sort()).toEqual(["name", "set", "setAt", "version"]);
  });

  it("is empty for an app without a blueprint, and 401 without a token", async () => {
    const app = await t.createApp();
    expect((await t.request("GET", "/v1/secrets", { token: app.token })).body).toEqual({ secrets: [] });
    const res = await t.request("GET", "/v1/secrets");
    expect(res.status).toBe(401);
    expect(res.body.error.code).toBe("unauthenticated");
  });

  it("answers the same over gRPC", async () => {
    const app = await appWith(["A", "B"]);
    await t.admin.setSecret({ appId: app.id, name: "B", value: "b-value" });
    const res = await t.client(SecretsService, app.token, "grpc").listSecrets({});
    expect(res.secrets.map((s) => [s.name, s.set, s.version])).toEqual([
      ["A", false, undefined],
      ["B", true, 1n],
    ]);
    expect(res.secrets[0].setAt).toBeUndefined();
    expect(res.secrets[1].setAt).toBeDefined();
  });
});

describe("GET /v1/secrets/{name}", () => {
  it("returns the value, version and setAt; each set makes a new version", async () => {
    const app = await appWith(["API_KEY"]);
    const first = await t.admin.setSecret({ appId: app.id, name: "API_KEY", value: "first ✓ value" });
    expect(first.version).toBe(1n);
    let res = await t.request("GET", "/v1/secrets/API_KEY", { token: app.token });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      name: "API_KEY",
      value: "first ✓ value",
      version: 1,
      setAt: Number(first.setAt!.seconds) * 1000 + Math.floor(first.setAt!.nanos / 1e6),
    });
    const second = await t.admin.setSecret({ appId: app.id, name: "API_KEY", value: "second" });
    expect(second.version).toBe(2n);
    res = await t.request("GET", "/v1/secrets/API_KEY", { token: app.token });
    expect(res.body).toMatchObject({ name: "API_KEY", value: "second", version: 2 });
    expect(res.body.setAt).toBeGreaterThanOrEqual(first.setAt!.seconds ? Number(first.setAt!.seconds) * 1000 : 0);
  });

  it("400 for a bad name, 404 when undeclared, 409 when unset", async () => {
    const app = await appWith(["DECLARED"]);
    for (const bad of ["1abc", "has-dash", "a".repeat(129), "%C3%A9t%C3%A9", "a%20b"]) {
      const res = await t.request("GET", `/v1/secrets/${bad}`, { token: app.token });
      expect(res.status, bad).toBe(400);
      expect(res.body.error.code).toBe("invalid_argument");
      expect(res.body.error.message).toContain("name");
    }
    expect((await t.request("GET", `/v1/secrets/${"a".repeat(128)}`, { token: app.token })).status).toBe(404);
    const missing = await t.request("GET", "/v1/secrets/OTHER", { token: app.token });
    expect(missing.status).toBe(404);
    expect(missing.body.error.code).toBe("not_found");
    const unset = await t.request("GET", "/v1/secrets/DECLARED", { token: app.token });
    expect(unset.status).toBe(409);
    expect(unset.body.error.code).toBe("secret_not_set");
  });

  it("maps the same rules onto gRPC codes", async () => {
    const app = await appWith(["DECLARED"]);
    const client = t.client(SecretsService, app.token, "grpc");
    expect(await connectCode(client.getSecret({ name: "no-dash" }))).toBe(Code.InvalidArgument);
    expect(await connectCode(client.getSecret({ name: "OTHER" }))).toBe(Code.NotFound);
    expect(await connectCode(client.getSecret({ name: "DECLARED" }))).toBe(Code.FailedPrecondition);
    await t.admin.setSecret({ appId: app.id, name: "DECLARED", value: "v" });
    const res = await client.getSecret({ name: "DECLARED" });
    expect([res.name, res.value, res.version]).toEqual(["DECLARED", "v", 1n]);
  });

  it("never reads another app's secret", async () => {
    const a = await appWith(["SHARED_NAME"]);
    const b = await appWith(["SHARED_NAME"]);
    await t.admin.setSecret({ appId: a.id, name: "SHARED_NAME", value: "a-only" });
    const res = await t.request("GET", "/v1/secrets/SHARED_NAME", { token: b.token });
    expect(res.status).toBe(409);
  });
});

describe("the facility disabled for an app", () => {
  it("answers 501 not_configured over REST and Unimplemented over gRPC", async () => {
    const app = await appWith(["API_KEY"]);
    await t.admin.setSecret({ appId: app.id, name: "API_KEY", value: "v" });
    const token = await linkToken(app, "API_KEY");
    await t.admin.updateApp({ appId: app.id, secretsEnabled: false });
    for (const [method, path] of [
      ["GET", "/v1/secrets/API_KEY"],
      ["GET", "/v1/secrets"],
      ["POST", "/v1/secrets/API_KEY/link"],
    ] as const) {
      const res = await t.request(method, path, { token: app.token });
      expect(res.status, path).toBe(501);
      expect(res.body.error.code).toBe("not_configured");
    }
    expect(await connectCode(t.client(SecretsService, app.token, "grpc").getSecret({ name: "API_KEY" }))).toBe(
      Code.Unimplemented,
    );
    // A link of a disabled app sets nothing.
    expect((await t.request("PUT", `/secret-links/${token}`, { body: { value: "x" } })).status).toBe(404);
    await t.admin.updateApp({ appId: app.id, secretsEnabled: true });
    expect((await t.request("GET", "/v1/secrets/API_KEY", { token: app.token })).body.value).toBe("v");
  });
});

describe("a stopped app", () => {
  it("gets 403 app_stopped on every secrets operation", async () => {
    const app = await appWith(["API_KEY"]);
    await app.stop();
    for (const [method, path] of [
      ["GET", "/v1/secrets"],
      ["GET", "/v1/secrets/API_KEY"],
      ["POST", "/v1/secrets/API_KEY/link"],
    ] as const) {
      const res = await t.request(method, path, { token: app.token });
      expect(res.status, path).toBe(403);
      expect(res.body.error.code).toBe("app_stopped");
    }
    expect(await connectCode(t.client(SecretsService, app.token, "grpc").listSecrets({}))).toBe(Code.PermissionDenied);
  });
});

describe("POST /v1/secrets/{name}/link", () => {
  it("creates a link under PUBLIC_URL that changes nothing else", async () => {
    const app = await appWith(["API_KEY"]);
    const before = Date.now();
    const res = await t.request("POST", "/v1/secrets/API_KEY/link", { token: app.token });
    expect(res.status).toBe(200);
    expect(Object.keys(res.body).sort()).toEqual(["expiresAt", "name", "url"]);
    expect(res.body.name).toBe("API_KEY");
    expect(res.body.url).toMatch(/^https:\/\/secrets\.example\.test\/base\/secret-links\/[A-Za-z0-9_-]{43}$/);
    // The default lifetime: 24 h.
    expect(res.body.expiresAt).toBeGreaterThanOrEqual(before + 24 * 3600_000 - 5000);
    expect(res.body.expiresAt).toBeLessThanOrEqual(Date.now() + 24 * 3600_000 + 5000);
    const listed = await t.request("GET", "/v1/secrets", { token: app.token });
    expect(listed.body.secrets).toEqual([{ name: "API_KEY", set: false, version: null, setAt: null }]);
  });

  it("400 for a bad name and 404 when undeclared, over REST and gRPC", async () => {
    const app = await appWith(["API_KEY"]);
    const bad = await t.request("POST", "/v1/secrets/9lives/link", { token: app.token });
    expect(bad.status).toBe(400);
    const missing = await t.request("POST", "/v1/secrets/NOPE/link", { token: app.token });
    expect(missing.status).toBe(404);
    expect(missing.body.error.code).toBe("not_found");
    const client = t.client(SecretsService, app.token, "grpc");
    expect(await connectCode(client.createSecretLink({ name: "9lives" }))).toBe(Code.InvalidArgument);
    expect(await connectCode(client.createSecretLink({ name: "NOPE" }))).toBe(Code.NotFound);
    const res = await client.createSecretLink({ name: "API_KEY" });
    expect(res.url).toContain("/secret-links/");
    expect(res.expiresAt).toBeDefined();
  });

  it("honours the app's link lifetime", async () => {
    const app = await appWith(["API_KEY"]);
    await t.admin.updateApp({ appId: app.id, limits: { linkTtlSeconds: 600 } });
    const res = await t.request("POST", "/v1/secrets/API_KEY/link", { token: app.token });
    expect(res.body.expiresAt).toBeLessThanOrEqual(Date.now() + 600_000 + 5000);
    expect(res.body.expiresAt).toBeGreaterThan(Date.now() + 590_000 - 5000);
  });

  it("429 too_many_links with Retry-After past the outstanding maximum, exact under concurrency", async () => {
    const app = await appWith(["A", "B"]);
    await t.admin.updateApp({ appId: app.id, limits: { maxOutstandingLinks: 4 } });
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        t.request("POST", `/v1/secrets/${i % 2 ? "A" : "B"}/link`, { token: app.token }),
      ),
    );
    const statuses = results.map((r) => r.status);
    expect(statuses.filter((s) => s === 200)).toHaveLength(4);
    expect(statuses.filter((s) => s === 429)).toHaveLength(16);
    const refused = results.find((r) => r.status === 429)!;
    expect(refused.body.error.code).toBe("too_many_links");
    expect(Number(refused.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    // Using a link frees its place.
    const used = results.find((r) => r.status === 200)!;
    const token = new URL(used.body.url).pathname.split("/").pop();
    expect((await t.request("PUT", `/secret-links/${token}`, { body: { value: "v" } })).status).toBe(200);
    expect((await t.request("POST", "/v1/secrets/A/link", { token: app.token })).status).toBe(200);
    expect((await t.request("POST", "/v1/secrets/A/link", { token: app.token })).status).toBe(429);
    expect(await connectCode(t.client(SecretsService, app.token, "grpc").createSecretLink({ name: "A" }))).toBe(
      Code.ResourceExhausted,
    );
  });

  it("revoking a link that was already used says so, and the value it set stays; racing a use, one of the two wins", async () => {
    const app = await appWith(["KEY"]);
    const token = await linkToken(app, "KEY");
    const [link] = (await t.admin.listSecretLinks({ appId: app.id })).links;
    expect((await t.request("PUT", `/secret-links/${token}`, { body: { value: "from the owner" } })).status).toBe(200);
    const refused = await t.admin.revokeSecretLink({ appId: app.id, linkId: link.id }).catch((e: unknown) => e);
    expect(ConnectError.from(refused).code).toBe(Code.FailedPrecondition);
    expect(ConnectError.from(refused).rawMessage).toMatch(/already used: the value it set stays/);
    expect((await t.request("GET", "/v1/secrets/KEY", { token: app.token })).body.value).toBe("from the owner");
    // A use and a revoke at once: either the use set the value and the revoke is refused, or the revoke
    // won and the use finds no link. Never both "revoked" and a value set through the link.
    for (let i = 0; i < 10; i++) {
      const name = `RACE_${i}`;
      await t.admin.addSecretNames({ appId: app.id, names: [name] });
      const raceToken = await linkToken(app, name);
      const id = (await t.admin.listSecretLinks({ appId: app.id })).links.find((l) => l.name === name)!.id;
      const [use, revoke] = await Promise.all([
        t.request("PUT", `/secret-links/${raceToken}`, { body: { value: "v" } }),
        t.admin.revokeSecretLink({ appId: app.id, linkId: id }).then(
          () => "revoked",
          (e: unknown) => Code[ConnectError.from(e).code],
        ),
      ]);
      const read = await t.request("GET", `/v1/secrets/${name}`, { token: app.token });
      if (use.status === 200) expect([revoke, read.status]).toEqual(["FailedPrecondition", 200]);
      else expect([use.status, revoke, read.status]).toEqual([404, "revoked", 409]);
    }
  });

  it("counts only unexpired links as outstanding", async () => {
    const app = await appWith(["A"]);
    await t.admin.updateApp({ appId: app.id, limits: { maxOutstandingLinks: 1 } });
    await linkToken(app, "A");
    expect((await t.request("POST", "/v1/secrets/A/link", { token: app.token })).status).toBe(429);
    await tables(t.server.deps.db)
      .updateTable("secret_links")
      .set({ expires_at: new Date(Date.now() - 1000) })
      .where("app_id", "=", app.id)
      .execute();
    expect((await t.request("POST", "/v1/secrets/A/link", { token: app.token })).status).toBe(200);
  });
});

describe("admin SetSecret and DeclareSecrets", () => {
  it("validates the name and the value, and needs a declared name", async () => {
    const app = await appWith(["API_KEY"]);
    expect(await connectCode(t.admin.setSecret({ appId: app.id, name: "bad-name", value: "v" }))).toBe(
      Code.InvalidArgument,
    );
    expect(await connectCode(t.admin.setSecret({ appId: app.id, name: "API_KEY", value: "" }))).toBe(
      Code.InvalidArgument,
    );
    expect(await connectCode(t.admin.setSecret({ appId: app.id, name: "API_KEY", value: "x".repeat(65_537) }))).toBe(
      Code.InvalidArgument,
    );
    expect(await connectCode(t.admin.setSecret({ appId: app.id, name: "UNDECLARED", value: "v" }))).toBe(Code.NotFound);
    const ok = await t.admin.setSecret({ appId: app.id, name: "API_KEY", value: "x".repeat(65_536) });
    expect(ok.version).toBe(1n);
    expect(ok.name).toBe("API_KEY");
  });

  it("dropping a name deletes its value and its outstanding links; keeping one keeps its value", async () => {
    const app = await appWith(["KEEP", "DROP"]);
    await t.admin.setSecret({ appId: app.id, name: "KEEP", value: "kept" });
    await t.admin.setSecret({ appId: app.id, name: "DROP", value: "dropped" });
    const dropLink = await linkToken(app, "DROP");
    const declared = await t.admin.declareSecrets({ appId: app.id, names: ["KEEP", "NEW"] });
    expect(declared.app!.declaredSecrets).toEqual(["KEEP", "NEW"]);
    expect((await t.request("GET", "/v1/secrets/DROP", { token: app.token })).status).toBe(404);
    expect((await t.request("GET", "/v1/secrets/KEEP", { token: app.token })).body).toMatchObject({
      value: "kept",
      version: 1,
    });
    expect((await t.request("GET", `/secret-links/${dropLink}`)).status).toBe(404);
    expect(
      await tables(t.server.deps.db).selectFrom("secret_links").selectAll().where("app_id", "=", app.id).execute(),
    ).toEqual([]);
    // Declaring the name again starts from scratch: unset, and the old link stays dead.
    await t.admin.declareSecrets({ appId: app.id, names: ["KEEP", "NEW", "DROP"] });
    expect((await t.request("GET", "/v1/secrets/DROP", { token: app.token })).status).toBe(409);
    expect((await t.request("PUT", `/secret-links/${dropLink}`, { body: { value: "again" } })).status).toBe(404);
  });

  it("a name dropped and declared again counts its versions on, so an app never sees a version it holds with another value", async () => {
    const app = await appWith(["API_KEY"]);
    const read = async () => (await t.request("GET", "/v1/secrets/API_KEY", { token: app.token })).body;
    await t.admin.setSecret({ appId: app.id, name: "API_KEY", value: "first" });
    await t.admin.setSecret({ appId: app.id, name: "API_KEY", value: "second" });
    expect(await read()).toMatchObject({ value: "second", version: 2 });
    // Dropped by a new blueprint, declared again, set: version 3 (it was 1 again, the app's cached "version 2"
    // would have matched a later set, and "version 1" the first).
    await t.admin.declareSecrets({ appId: app.id, names: [] });
    await t.admin.declareSecrets({ appId: app.id, names: ["API_KEY"] });
    await t.admin.setSecret({ appId: app.id, name: "API_KEY", value: "third" });
    expect(await read()).toMatchObject({ value: "third", version: 3 });
    // Removed by name (its value confirmed destroyed), added again, set through a link: version 4.
    expect(
      (await t.admin.removeSecretNames({ appId: app.id, names: ["API_KEY"], confirmDestroyValues: true })).app
        ?.declaredSecrets,
    ).toEqual([]);
    await t.admin.addSecretNames({ appId: app.id, names: ["API_KEY"] });
    const token = await linkToken(app, "API_KEY");
    expect((await t.request("PUT", `/secret-links/${token}`, { body: { value: "fourth" } })).status).toBe(200);
    expect(await read()).toMatchObject({ value: "fourth", version: 4 });
    // Another app's name of the same spelling keeps its own count.
    const other = await appWith(["API_KEY"]);
    await t.admin.setSecret({ appId: other.id, name: "API_KEY", value: "x" });
    expect((await t.request("GET", "/v1/secrets/API_KEY", { token: other.token })).body.version).toBe(1);
  });
});

describe("the secret.set event", () => {
  it("is put on the app's _events queue for owner sets and link sets", async () => {
    const app = await appWith(["API_KEY"]);
    await t.admin.setSecret({ appId: app.id, name: "API_KEY", value: "one" });
    const token = await linkToken(app, "API_KEY");
    expect((await t.request("PUT", `/secret-links/${token}`, { body: { value: "two" } })).status).toBe(200);
    const seen: unknown[] = [];
    for (let i = 0; i < 2; i++) {
      const res = await t.request("POST", "/v1/queues/_events/consume", { token: app.token, body: { waitSeconds: 5 } });
      expect(res.status).toBe(200);
      expect(res.body.message).not.toBeNull();
      const payload = res.body.message.payload;
      expect(payload.kind).toBe("secret.set");
      seen.push(payload.data);
      expect(JSON.stringify(res.body)).not.toMatch(/"(one|two)"/);
      await t.request("POST", "/v1/queues/_ack", { token: app.token, body: { receipt: res.body.message.receipt } });
    }
    expect(seen).toEqual([
      { name: "API_KEY", version: 1 },
      { name: "API_KEY", version: 2 },
    ]);
  });

  it("commits with the new version or not at all, for operator sets and link sets", async () => {
    const app = await appWith(["API_KEY"]);
    const db = t.server.deps.db;
    const state = async () => {
      const { rows } = await sql<{ version: number; queued: number; fed: number }>`
        SELECT (SELECT version FROM secrets WHERE app_id = ${app.id} AND name = 'API_KEY') AS version,
               (SELECT count(*)::int FROM queue_messages WHERE app_id = ${app.id} AND queue = '_events') AS queued,
               (SELECT count(*)::int FROM queue_event_feed WHERE app_id = ${app.id}) AS fed`.execute(db);
      return rows[0];
    };
    const token = await linkToken(app, "API_KEY");
    for (const table of ["queue_event_feed", "queue_messages"]) {
      const allow = await refuseInserts(db, table);
      try {
        expect(await connectCode(t.admin.setSecret({ appId: app.id, name: "API_KEY", value: "one" }))).toBe(
          Code.Internal,
        );
        const link = await t.request("PUT", `/secret-links/${token}`, { body: { value: "two" } });
        expect(link.status, table).toBeGreaterThanOrEqual(500);
        // Nothing stored, nothing announced, and the link is still unused.
        expect(await state()).toEqual({ version: null, queued: 0, fed: 0 });
      } finally {
        await allow();
      }
    }
    expect((await t.request("PUT", `/secret-links/${token}`, { body: { value: "two" } })).status).toBe(200);
    expect(await state()).toEqual({ version: 1, queued: 1, fed: 1 });
    await t.admin.setSecret({ appId: app.id, name: "API_KEY", value: "three" });
    expect(await state()).toEqual({ version: 2, queued: 2, fed: 2 });
  });
});
