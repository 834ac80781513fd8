/**
 * Declaring a secret never drops another's value (issue 18 item 5): adding a
 * name is additive; removing one is explicit and refused, naming the values
 * it would destroy, until confirmed. DeclareSecrets keeps its documented
 * full-list contract for tools built against it.
 */
import { describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorDetailSchema } from "../../gen/platform/meta/v1/error_pb.js";
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
  },
);
