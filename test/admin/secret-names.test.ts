/**
 * Declaring a secret never drops another's value (issue 18 item 5): adding a
 * name is additive; removing one is explicit and refused, naming the values
 * it would destroy, until confirmed. DeclareSecrets keeps its documented
 * full-list contract for tools built against it.
 */
import { describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorDetailSchema } from "../../gen/platform/meta/v1/error_pb.js";
import { useTestServer } from "../support/harness.ts";

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
