/**
 * Declaring a secret never drops another's value: adding a
 * name is additive; removing one is explicit and refused, naming the values
 * it would destroy, until confirmed. DeclareSecrets keeps its documented
 * full-list contract for tools built against it.
 */
import { describe, expect, it, vi } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorDetailSchema } from "../../gen/platform/meta/v1/error_pb.js";
import { toPlatformError } from "../../src/core/errors.ts";
import { backend, useTestServer } from "../support/harness.ts";
import { usePgClients } from "../support/pg-clients.ts";

const t = useTestServer();

async function failure(p: Promise<unknown>): Promise<ConnectError> {
  try {
    await p;
  } catch (err) {
    return ConnectError.from(err);
  }
  throw new Error("expected the call to fail");
}

describe("AddSecretNames / RemoveSecretNames", () => {
  it("adding a name keeps every declared secret and its value", async () => {
    const app = await t.createApp("names-add");
    await t.admin.addSecretNames({ appId: app.id, names: ["DB_URL"] });
    await t.admin.setSecret({ appId: app.id, name: "DB_URL", value: "postgres://x" });
    // Another operator adds a name from a view that never saw DB_URL.
    const { app: after } = await t.admin.addSecretNames({ appId: app.id, names: ["API_KEY", "DB_URL"] });
    expect(after!.declaredSecrets).toEqual(["API_KEY", "DB_URL"]);
    const got = await t.request("GET", "/v1/secrets/DB_URL", { token: app.token });
    expect(got.status).toBe(200);
    expect(got.body.value).toBe("postgres://x");
    expect(got.body.version).toBe(1);
  });

  it("removing a name with a value is refused naming it, unless confirmed; an unset one goes at once", async () => {
    const app = await t.createApp("names-remove");
    await t.admin.addSecretNames({ appId: app.id, names: ["KEEP", "SET_ONE", "UNSET_ONE"] });
    await t.admin.setSecret({ appId: app.id, name: "SET_ONE", value: "v" });
    const err = await failure(t.admin.removeSecretNames({ appId: app.id, names: ["SET_ONE", "UNSET_ONE"] }));
    expect(err.code).toBe(Code.FailedPrecondition);
    expect(err.findDetails(ErrorDetailSchema)[0]?.code).toBe("failed_precondition");
    expect(err.rawMessage).toContain("SET_ONE");
    expect(err.rawMessage).not.toContain("UNSET_ONE");
    expect((await t.admin.getApp({ appId: app.id })).app!.declaredSecrets).toEqual(["KEEP", "SET_ONE", "UNSET_ONE"]);

    const unset = await t.admin.removeSecretNames({ appId: app.id, names: ["UNSET_ONE"] });
    expect(unset.destroyedValues).toEqual([]);
    const confirmed = await t.admin.removeSecretNames({
      appId: app.id,
      names: ["SET_ONE"],
      confirmDestroyValues: true,
    });
    expect(confirmed.destroyedValues).toEqual(["SET_ONE"]);
    expect(confirmed.app!.declaredSecrets).toEqual(["KEEP"]);
    expect((await t.request("GET", "/v1/secrets/SET_ONE", { token: app.token })).status).toBe(404);
  });

  it("bad names are refused as a sentence naming the name", async () => {
    const app = await t.createApp("names-bad");
    const err = await failure(t.admin.addSecretNames({ appId: app.id, names: ["OK", "9bad"] }));
    expect(err.code).toBe(Code.InvalidArgument);
    expect(err.rawMessage).toContain('"9bad" is not a secret name');
    expect((await failure(t.admin.addSecretNames({ appId: app.id, names: [] }))).code).toBe(Code.InvalidArgument);
  });

  it("DeclareSecrets keeps its full-list contract", async () => {
    const app = await t.createApp("names-declare");
    await t.admin.declareSecrets({ appId: app.id, names: ["A", "B"] });
    await t.admin.setSecret({ appId: app.id, name: "A", value: "a" });
    const { app: after } = await t.admin.declareSecrets({ appId: app.id, names: ["B"] });
    expect(after!.declaredSecrets).toEqual(["B"]);
  });
});

describe("RemoveSecretNames with expected versions", () => {
  it("removes only at the versions the caller saw: a value set since is a conflict naming it, and nothing goes", async () => {
    const app = await t.createApp("names-versions");
    await t.admin.addSecretNames({ appId: app.id, names: ["SEEN", "EMPTY"] });
    await t.admin.setSecret({ appId: app.id, name: "SEEN", value: "one" });
    const names = ["SEEN", "EMPTY"];
    // The caller saw SEEN at version 1 and EMPTY without a value; then SEEN got version 2 and EMPTY a value.
    await t.admin.setSecret({ appId: app.id, name: "SEEN", value: "two" });
    await t.admin.setSecret({ appId: app.id, name: "EMPTY", value: "first" });
    const seen = { SEEN: 1, EMPTY: 0 };
    const err = await failure(
      t.admin.removeSecretNames({ appId: app.id, names, confirmDestroyValues: true, expectedVersions: seen }),
    );
    expect([Code[err.code], err.rawMessage]).toEqual([
      "Aborted",
      "EMPTY, SEEN have changed since you looked (a value was set): nothing was removed; look again",
    ]);
    expect(err.findDetails(ErrorDetailSchema)[0]?.details).toEqual([
      "EMPTY: not at the expected version",
      "SEEN: not at the expected version",
    ]);
    expect((await t.admin.getApp({ appId: app.id })).app!.declaredSecrets).toEqual(["EMPTY", "SEEN"]);
    // At the versions there are now, the removal goes through.
    const { destroyedValues } = await t.admin.removeSecretNames({
      appId: app.id,
      names,
      confirmDestroyValues: true,
      expectedVersions: { SEEN: 2, EMPTY: 1 },
    });
    expect(destroyedValues).toEqual(["EMPTY", "SEEN"]);
    // A version for a name not removed is refused as bad input.
    const bad = await failure(t.admin.removeSecretNames({ appId: app.id, names: ["X"], expectedVersions: { Y: 0 } }));
    expect([Code[bad.code], bad.rawMessage]).toEqual([
      "InvalidArgument",
      "expected_versions: may only give versions of the names removed",
    ]);
  });
});

describe.skipIf(backend !== "postgres")(
  `RemoveSecretNames racing a set (${backend === "postgres" ? "PostgreSQL" : "skipped: needs a PostgreSQL server (DATABASE_URL); holding a set open takes a second connection, and PGlite has one"})`,
  () => {
    /** `setter` sets a value in a transaction it holds open; `observer` watches from outside it. */
    const clients = usePgClients(t, 2);
    const [setter, observer] = [() => clients[0], () => clients[1]];

    it("a value set while the removal runs is refused by name, not deleted unconfirmed", async () => {
      const app = await t.createApp("names-race");
      await t.admin.addSecretNames({ appId: app.id, names: ["LATE"] });
      // A set as the store makes one (row locked, value written), its commit held back.
      await setter().query("BEGIN");
      await setter().query("SELECT version FROM secrets WHERE app_id = $1 AND name = 'LATE' FOR UPDATE", [app.id]);
      await setter().query(
        `UPDATE secrets SET value_encrypted = '\\x00'::bytea, key_id = 'k', version = 1, set_at = now()
         WHERE app_id = $1 AND name = 'LATE'`,
        [app.id],
      );
      // The removal starts from the view where LATE has no value, and waits on the set's row.
      const removal = failure(t.admin.removeSecretNames({ appId: app.id, names: ["LATE"] }));
      const deadline = Date.now() + 10_000;
      for (;;) {
        const { rows } = await observer().query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_stat_activity
           WHERE datname = current_database() AND wait_event_type = 'Lock' AND query ILIKE '%secrets%'`,
        );
        if (rows[0].n > 0) break;
        if (Date.now() > deadline) throw new Error("the removal never waited on the set's row");
        await new Promise((resolve) => setImmediate(resolve));
      }
      await setter().query("COMMIT");
      const err = await removal;
      expect(err.code).toBe(Code.FailedPrecondition);
      expect(err.rawMessage).toContain("LATE");
      const { rows } = await observer().query<{ set: boolean }>(
        "SELECT value_encrypted IS NOT NULL AS set FROM secrets WHERE app_id = $1 AND name = 'LATE'",
        [app.id],
      );
      expect(rows).toEqual([{ set: true }]);
      expect((await t.admin.getApp({ appId: app.id })).app!.declaredSecrets).toEqual(["LATE"]);
    });

    /** Waits until `n` of the server's statements wait on a lock (the test's own sessions never do). */
    async function waiting(n: number): Promise<void> {
      await vi.waitFor(
        async () => {
          const { rows } = await observer().query<{ n: number }>(
            `SELECT count(*)::int AS n FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'`,
          );
          expect(rows[0].n).toBe(n);
        },
        { timeout: 10_000, interval: 10 },
      );
    }

    it("a deadlock PostgreSQL breaks, should one still happen, is a 409 conflict to retry, not a 500", async () => {
      const [a, b] = [setter(), observer()];
      await a.query("BEGIN");
      await b.query("BEGIN");
      await a.query("SELECT pg_advisory_xact_lock(1)");
      await b.query("SELECT pg_advisory_xact_lock(2)");
      const first = a.query("SELECT pg_advisory_xact_lock(2)").then(
        () => undefined,
        (e: unknown) => e,
      );
      const second = b.query("SELECT pg_advisory_xact_lock(1)").then(
        () => undefined,
        (e: unknown) => e,
      );
      const broken = (await Promise.race([first, second])) ?? (await first) ?? (await second);
      await a.query("ROLLBACK");
      await b.query("ROLLBACK");
      expect((broken as { code?: string }).code).toBe("40P01");
      const err = toPlatformError(broken);
      expect([err.code, err.status, err.message]).toEqual([
        "conflict",
        409,
        "the change met a concurrent one and was not made; retry it",
      ]);
    });

    it("a removal meeting a link being created waits its turn: both succeed, no deadlock answered as a 500", async () => {
      // The link's creation holds the app row and waits (here, on a table lock) before its insert, which
      // checks its secret's row; the removal comes in between. It locked that row and then waited for the
      // app row: the two waited on each other until PostgreSQL aborted one (a 500).
      const app = await t.createApp("names-link-create");
      await t.admin.addSecretNames({ appId: app.id, names: ["KEY"] });
      await setter().query("BEGIN");
      await setter().query("LOCK TABLE secret_links IN SHARE MODE");
      const created = t.request("POST", "/v1/secrets/KEY/link", { token: app.token });
      await waiting(1);
      const removed = t.admin.removeSecretNames({ appId: app.id, names: ["KEY"], confirmDestroyValues: true }).then(
        () => "removed",
        (e: unknown) => Code[ConnectError.from(e).code],
      );
      await waiting(2);
      await setter().query("COMMIT");
      expect([(await created).status, await removed]).toEqual([200, "removed"]);
      expect((await t.admin.getApp({ appId: app.id })).app!.declaredSecrets).toEqual([]);
      expect((await t.admin.listSecretLinks({ appId: app.id })).links).toEqual([]);
    });

    it("a removal meeting a link being used waits for the use, then refuses to destroy the value it set", async () => {
      // The use holds its link's row and waits (here, on a table lock) before it locks the secret's row;
      // the removal comes in between. It locked the secret's row and then waited for the link's (its
      // deletion cascades to the links): a deadlock whenever it got the secret's row first.
      for (let round = 0; round < 3; round++) {
        const app = await t.createApp(`names-link-use-${round}`);
        await t.admin.addSecretNames({ appId: app.id, names: ["KEY"] });
        const res = await t.request("POST", "/v1/secrets/KEY/link", { token: app.token });
        const linkPath = new URL(res.body.url).pathname;
        await setter().query("BEGIN");
        await setter().query("LOCK TABLE secrets IN EXCLUSIVE MODE");
        const used = t.request("PUT", linkPath, { body: { value: "from the owner" } });
        await waiting(1);
        const removed = t.admin.removeSecretNames({ appId: app.id, names: ["KEY"] }).then(
          () => "removed",
          (e: unknown) => Code[ConnectError.from(e).code],
        );
        await waiting(2);
        await setter().query("COMMIT");
        expect([(await used).status, await removed], `round ${round}`).toEqual([200, "FailedPrecondition"]);
        expect((await t.request("GET", "/v1/secrets/KEY", { token: app.token })).body.value).toBe("from the owner");
      }
    });
  },
);
