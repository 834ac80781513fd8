/**
 * Named operators with roles and the audit log, over
 * Connect against the real server: the bootstrap ADMIN_TOKEN is the owner; a
 * viewer reads but the server refuses its writes (and records the attempt);
 * tokens are stored as hashes, shown once, revocable, with a last use; every
 * change is in the audit log with its operator, app, request id and outcome.
 */
import { describe, expect, it } from "vitest";
import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import { sql } from "kysely";
import { AdminService, AppStatus, OperatorRole } from "../../gen/platform/admin/v1/admin_pb.js";
import { hashToken } from "../../src/core/auth.ts";
import { backend, transportFor, useTestServer } from "../support/harness.ts";
import { usePgClients } from "../support/pg-clients.ts";
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

const clientOf = (token: string): Client<typeof AdminService> =>
  createClient(AdminService, transportFor(t.url, "connect", token));

async function newOperator(name: string, role: OperatorRole) {
  const res = await t.admin.createOperator({ name, role });
  return { id: res.operator!.id, tokenId: res.tokenId, token: res.token, client: clientOf(res.token) };
}

describe("operators", () => {
  it("ADMIN_TOKEN is the owner, an admin", async () => {
    const { operator } = await t.admin.whoAmI({});
    expect(operator).toMatchObject({ id: "owner", name: "owner", role: OperatorRole.ADMIN });
  });

  it("a new operator's token is shown once, stored only as its hash, and names its operator", async () => {
    const ada = await newOperator("ada", OperatorRole.ADMIN);
    expect(ada.token).toMatch(/^pbo_[A-Za-z0-9_-]{43}$/);
    const rows = await tables(t.server.deps.db).selectFrom("operator_tokens").selectAll().execute();
    expect(rows.map((r) => r.token_hash)).toContain(hashToken(ada.token));
    expect(JSON.stringify(rows)).not.toContain(ada.token);
    const { operator } = await ada.client.whoAmI({});
    expect(operator).toMatchObject({ id: ada.id, name: "ada", role: OperatorRole.ADMIN });
    // Used once: a last use, on the token and on the operator.
    await expect
      .poll(async () => (await t.admin.listOperatorTokens({ operatorId: ada.id })).tokens[0]?.lastUsedAt)
      .toBeDefined();
    const listed = (await t.admin.listOperators({})).operators.find((o) => o.id === ada.id);
    expect(listed?.lastUsedAt).toBeDefined();
  });

  it("lists the built-in owner first, and the audit log finds its entries by its id", async () => {
    await t.createApp("owned");
    const { operators } = await t.admin.listOperators({});
    expect(operators[0]).toMatchObject({ id: "owner", name: "owner", role: OperatorRole.ADMIN, disabled: false });
    expect(operators.filter((o) => o.id === "owner")).toHaveLength(1);
    const { entries } = await t.admin.listAuditEntries({ operatorId: operators[0].id, action: "app.create" });
    expect(entries.map((e) => e.appName)).toContain("owned");
    for (const e of entries) expect(e.operatorId).toBe("owner");
  });

  it("refuses a duplicate or bad name, a bad role, and changes to the built-in owner", async () => {
    await newOperator("dup", OperatorRole.VIEWER);
    expect((await failure(t.admin.createOperator({ name: "dup", role: OperatorRole.VIEWER }))).code).toBe(
      Code.InvalidArgument,
    );
    expect((await failure(t.admin.createOperator({ name: "", role: OperatorRole.VIEWER }))).code).toBe(
      Code.InvalidArgument,
    );
    const badRole = await failure(t.admin.createOperator({ name: "norole", role: OperatorRole.UNSPECIFIED }));
    expect(badRole.rawMessage).toMatch(/^role: /);
    expect((await failure(t.admin.deleteOperator({ operatorId: "owner" }))).code).toBe(Code.InvalidArgument);
  });

  it("a viewer reads, but every write is refused by the server with permission_denied and audited as denied", async () => {
    const app = await t.createApp("viewed");
    await t.admin.addSecretNames({ appId: app.id, names: ["TOKEN"] });
    const vera = await newOperator("vera", OperatorRole.VIEWER);
    expect((await vera.client.whoAmI({})).operator?.role).toBe(OperatorRole.VIEWER);
    expect((await vera.client.getApp({ appId: app.id })).app?.name).toBe("viewed");
    expect((await vera.client.listApps({})).apps.map((a) => a.name)).toContain("viewed");
    expect((await vera.client.listSecrets({ appId: app.id })).secrets.map((s) => s.name)).toEqual(["TOKEN"]);

    const writes: [string, () => Promise<unknown>][] = [
      ["app.update", () => vera.client.updateApp({ appId: app.id, status: AppStatus.STOPPED })],
      ["app.create", () => vera.client.createApp({ name: "by-viewer" })],
      ["token.issue", () => vera.client.issueToken({ appId: app.id })],
      ["secret.set", () => vera.client.setSecret({ appId: app.id, name: "TOKEN", value: "x" })],
      ["secret.link", () => vera.client.createSecretLink({ appId: app.id, name: "TOKEN" })],
      ["secrets.add", () => vera.client.addSecretNames({ appId: app.id, names: ["MORE"] })],
      ["operator.create", () => vera.client.createOperator({ name: "sneaky", role: OperatorRole.ADMIN })],
    ];
    for (const [action, call] of writes) {
      const err = await failure(call());
      expect(err.code, action).toBe(Code.PermissionDenied);
    }
    // Never a secret link, not even the list of outstanding ones.
    expect((await failure(vera.client.listSecretLinks({ appId: app.id }))).code).toBe(Code.PermissionDenied);
    // Nothing changed.
    const after = (await t.admin.getApp({ appId: app.id })).app!;
    expect(after.status).toBe(AppStatus.RUNNING);
    expect(after.declaredSecrets).toEqual(["TOKEN"]);
    expect((await t.admin.listOperators({})).operators.map((o) => o.name)).not.toContain("sneaky");

    const denied = await t.admin.listAuditEntries({ operatorId: vera.id, pageSize: 50 });
    expect(denied.entries.map((e) => e.action).sort()).toEqual(writes.map(([a]) => a).sort());
    for (const e of denied.entries) expect(e).toMatchObject({ operatorName: "vera", outcome: "denied" });
    // The attempts aimed at the app are in the app's own log, naming it.
    const onApp = await t.admin.listAuditEntries({ appId: app.id, operatorId: vera.id, pageSize: 50 });
    expect(onApp.entries.map((e) => e.action).sort()).toEqual(
      ["app.update", "token.issue", "secret.set", "secret.link", "secrets.add"].sort(),
    );
    for (const e of onApp.entries) expect(e).toMatchObject({ appId: app.id, appName: "viewed", outcome: "denied" });
  });

  it("records refused attempts with bad input as failed, saying what was asked", async () => {
    const ops = await newOperator("careless-cal", OperatorRole.ADMIN);
    const { app } = await ops.client.createApp({ name: "refusals" });
    const appId = app!.id;
    const attempts: [string, () => Promise<unknown>][] = [
      ["app.limits", () => ops.client.updateApp({ appId, limits: { mailPerDay: -1 } })],
      ["app.update", () => ops.client.updateApp({ appId, mailFrom: "not an address", analyticsEnabled: true })],
      ["app.update", () => ops.client.updateApp({ appId, expectedRevision: app!.revision + 7n })],
      ["secrets.declare", () => ops.client.declareSecrets({ appId, names: ["1x"] })],
      ["secrets.add", () => ops.client.addSecretNames({ appId, names: [] })],
      ["secrets.remove", () => ops.client.removeSecretNames({ appId, names: ["A"], expectedVersions: { B: 1 } })],
    ];
    for (const [action, call] of attempts) {
      const err = await failure(call());
      expect([Code.InvalidArgument, Code.Aborted], action).toContain(err.code);
    }
    const { entries } = await t.admin.listAuditEntries({ operatorId: ops.id, appId, pageSize: 50 });
    const failed = entries.filter((e) => e.outcome === "failed").reverse();
    expect(failed.map((e) => e.action)).toEqual(attempts.map(([a]) => a));
    expect(failed.map((e) => e.detail?.error)).toEqual([
      "invalid_argument",
      "invalid_argument",
      "conflict",
      "invalid_argument",
      "invalid_argument",
      "invalid_argument",
    ]);
    expect(failed[0].detail).toMatchObject({ limits: { mailPerDay: -1 } });
    expect(failed[3].detail).toMatchObject({ names: ["1x"] });
  });

  it("a revoked token and a disabled operator are refused at once; a role change applies at once", async () => {
    const op = await newOperator("rolling", OperatorRole.ADMIN);
    await op.client.whoAmI({});
    await t.admin.updateOperator({ operatorId: op.id, role: OperatorRole.VIEWER });
    expect((await failure(op.client.createApp({ name: "after-demotion" }))).code).toBe(Code.PermissionDenied);
    await t.admin.updateOperator({ operatorId: op.id, disabled: true });
    expect((await failure(op.client.whoAmI({}))).code).toBe(Code.Unauthenticated);
    await t.admin.updateOperator({ operatorId: op.id, disabled: false });
    expect((await op.client.whoAmI({})).operator?.name).toBe("rolling");

    const second = await t.admin.issueOperatorToken({ operatorId: op.id, label: "ci" });
    const ci = clientOf(second.token);
    expect((await ci.whoAmI({})).operator?.id).toBe(op.id);
    expect((await t.admin.listOperatorTokens({ operatorId: op.id })).tokens.map((x) => x.label).sort()).toEqual([
      "",
      "ci",
    ]);
    await t.admin.revokeOperatorToken({ tokenId: second.tokenId });
    expect((await failure(ci.whoAmI({}))).code).toBe(Code.Unauthenticated);
    expect((await op.client.whoAmI({})).operator?.id).toBe(op.id);

    await t.admin.deleteOperator({ operatorId: op.id });
    expect((await failure(op.client.whoAmI({}))).code).toBe(Code.Unauthenticated);
  });
});

describe("the audit log", () => {
  it("records each change with its operator, app, request id and outcome, and never a value", async () => {
    const ops = await newOperator("auditor-ada", OperatorRole.ADMIN);
    const { app } = await ops.client.createApp({ name: "audited" });
    const id = app!.id;
    // One call over plain Connect JSON, to read the request id the server gave it.
    const res = await fetch(`${t.url}/platform.admin.v1.AdminService/UpdateApp`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${ops.token}` },
      body: JSON.stringify({ appId: id, limits: { mailPerDay: 9 } }),
    });
    expect(res.status).toBe(200);
    const requestId = res.headers.get("x-request-id");
    expect(requestId).toBeTruthy();
    await ops.client.updateApp({ appId: id, status: AppStatus.STOPPED });
    await ops.client.updateApp({ appId: id, status: AppStatus.RUNNING });
    await ops.client.updateApp({ appId: id, mailFrom: "", analyticsEnabled: false });
    const { tokenId } = await ops.client.issueToken({ appId: id, label: "web" });
    await ops.client.revokeToken({ tokenId });
    await ops.client.declareSecrets({ appId: id, names: ["A"] });
    await ops.client.addSecretNames({ appId: id, names: ["B"] });
    await ops.client.setSecret({ appId: id, name: "B", value: "very-secret-value" });
    await ops.client.createSecretLink({ appId: id, name: "A" });
    const { links } = await ops.client.listSecretLinks({ appId: id });
    expect(links.map((l) => l.name)).toEqual(["A"]);
    await ops.client.revokeSecretLink({ appId: id, linkId: links[0].id });
    expect((await ops.client.listSecretLinks({ appId: id })).links).toEqual([]);
    await ops.client.removeSecretNames({ appId: id, names: ["B"], confirmDestroyValues: true });
    await ops.client.publishEvent({ appId: id, kind: "deploy.done" });
    await ops.client.purgeQueue({ appId: id, queue: "jobs" });
    await ops.client.replayDeadLetters({ appId: id, queue: "jobs", all: true });
    await ops.client.purgeDeadLetters({ appId: id, queue: "jobs", all: true });
    // A failed attempt: a stale revision.
    await failure(ops.client.updateApp({ appId: id, mailFrom: "", expectedRevision: 1n }));
    await ops.client.deleteApp({ appId: id });

    const { entries } = await t.admin.listAuditEntries({ operatorId: ops.id, pageSize: 100 });
    const actions = entries.map((e) => `${e.action}:${e.outcome}`).reverse();
    expect(actions).toEqual([
      "app.create:ok",
      "app.limits:ok",
      "app.stop:ok",
      "app.start:ok",
      "app.update:ok",
      "token.issue:ok",
      "token.revoke:ok",
      "secrets.declare:ok",
      "secrets.add:ok",
      "secret.set:ok",
      "secret.link:ok",
      "secret.link.revoke:ok",
      "secrets.remove:ok",
      "event.publish:ok",
      "queue.purge:ok",
      "dead_letters.replay:ok",
      "dead_letters.purge:ok",
      "app.update:failed",
      "app.delete:ok",
    ]);
    for (const e of entries) {
      expect(e).toMatchObject({ operatorId: ops.id, operatorName: "auditor-ada", appId: id, appName: "audited" });
      expect(e.requestId).not.toBe("");
    }
    expect(entries.find((e) => e.action === "app.limits")?.requestId).toBe(requestId);
    expect(entries.find((e) => e.action === "app.limits")?.detail).toMatchObject({ limits: { mailPerDay: 9 } });
    expect(entries.find((e) => e.action === "app.update" && e.outcome === "failed")?.detail).toMatchObject({
      error: "conflict",
    });
    expect(JSON.stringify(entries.map((e) => e.detail))).not.toContain("very-secret-value");
    // The app is gone; its record stays, and the filter by app still finds it by id.
    expect((await t.admin.listAuditEntries({ appId: id, pageSize: 100 })).entries).toHaveLength(entries.length);
  });

  it("a change and its entry commit together: a failed change leaves no ok entry", async () => {
    const { app } = await t.admin.createApp({ name: "atomic" });
    const before = (await t.admin.listAuditEntries({ appId: app!.id, pageSize: 100 })).entries.length;
    // The conflict is found inside the transaction that would write the entry.
    await failure(t.admin.addSecretNames({ appId: app!.id, names: ["X"], expectedRevision: app!.revision + 5n }));
    const { entries } = await t.admin.listAuditEntries({ appId: app!.id, pageSize: 100 });
    expect(entries.length).toBe(before + 1);
    expect(entries[0]).toMatchObject({ action: "secrets.add", outcome: "failed" });
    expect((await t.admin.getApp({ appId: app!.id })).app!.declaredSecrets).toEqual([]);
  });

  it("filters by action and time, pages newest first, and drops entries past AUDIT_RETENTION_DAYS", async () => {
    for (let i = 0; i < 5; i++) await t.admin.createApp({ name: `paged-${i}` });
    const first = await t.admin.listAuditEntries({ action: "app.create", pageSize: 2 });
    expect(first.entries).toHaveLength(2);
    expect(first.entries[0].appName).toBe("paged-4");
    const second = await t.admin.listAuditEntries({
      action: "app.create",
      pageSize: 2,
      pageToken: first.nextPageToken,
    });
    expect(second.entries[0].appName).toBe("paged-2");
    expect(new Set([...first.entries, ...second.entries].map((e) => e.id)).size).toBe(4);
    const future = await t.admin.listAuditEntries({
      since: { seconds: BigInt(Math.floor(Date.now() / 1000) + 3600), nanos: 0 },
      pageSize: 10,
    });
    expect(future.entries).toEqual([]);
    expect((await failure(t.admin.listAuditEntries({ pageToken: "x" }))).code).toBe(Code.InvalidArgument);

    // An entry older than the default 90 days goes with the next sweep; a recent one stays.
    const db = tables(t.server.deps.db);
    await db
      .updateTable("audit_log")
      .set({ at: sql`now() - interval '91 days'` } as never)
      .where("app_name", "=", "paged-0")
      .execute();
    const swept = await t.server.housekeeping.runAll();
    expect(swept["audit log"]).toBe(1);
    const left = await t.admin.listAuditEntries({ action: "app.create", pageSize: 100 });
    expect(left.entries.map((e) => e.appName)).not.toContain("paged-0");
    expect(left.entries.map((e) => e.appName)).toContain("paged-1");
  });
});

describe.skipIf(backend !== "postgres")(
  `the audit log's order (${backend === "postgres" ? "PostgreSQL" : "skipped: needs a PostgreSQL server (DATABASE_URL); holding a change on a lock takes a second connection, and PGlite has one"})`,
  () => {
    const clients = usePgClients(t, 2);
    const [locker, observer] = [() => clients[0], () => clients[1]];
    const newerThan = async (id: bigint) =>
      (await t.admin.listAuditEntries({ pageSize: 100 })).entries.filter((e) => BigInt(e.id) > id);

    it("a poller reading what is newer than the newest it saw misses no entry of a change that committed late", async () => {
      const { app } = await t.admin.createApp({ name: "late-declare" });
      await t.admin.declareSecrets({ appId: app!.id, names: ["A"] });
      await t.admin.createSecretLink({ appId: app!.id, name: "A" });
      let seen = BigInt((await t.admin.listAuditEntries({ pageSize: 1 })).entries[0].id);
      // A link of A held locked from outside: a declaration that drops A waits for it, mid-transaction.
      await locker().query("BEGIN");
      await locker().query("SELECT 1 FROM secret_links WHERE app_id = $1 FOR UPDATE", [app!.id]);
      const declared = t.admin.declareSecrets({ appId: app!.id, names: [] });
      const deadline = Date.now() + 10_000;
      while (
        (
          await observer().query<{ n: number }>(
            "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%secret_links%'",
          )
        ).rows[0].n === 0
      ) {
        if (Date.now() > deadline) throw new Error("the declaration never waited on the link");
        await new Promise((resolve) => setImmediate(resolve));
      }
      // Meanwhile another change commits, and the poller reads it.
      await t.admin.createApp({ name: "meanwhile" });
      const first = await newerThan(seen);
      expect(first.map((e) => e.action)).toEqual(["app.create"]);
      seen = BigInt(first[0].id);
      await locker().query("COMMIT");
      await declared;
      // The declaration committed after it: the next poll finds it (its id and time came after).
      const second = await newerThan(seen);
      expect(second.map((e) => e.action)).toEqual(["secrets.declare"]);
      expect(second[0].at!.seconds * 1000n + BigInt(second[0].at!.nanos) / 1_000_000n).toBeGreaterThanOrEqual(
        first[0].at!.seconds * 1000n + BigInt(first[0].at!.nanos) / 1_000_000n,
      );
    });
  },
);
