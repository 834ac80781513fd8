/**
 * Concurrent edits of an app never silently overwrite each other
 * (optimistic concurrency on the app record): every change of the app
 * record bumps `App.revision`; a write that
 * carries a stale `expected_revision` fails with `aborted` and the code
 * `conflict`, and a write sends only the fields it changes.
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

describe("App.revision and expected_revision", () => {
  it("every change of settings, limits or blueprint bumps the revision; reads do not", async () => {
    const { app } = await t.admin.createApp({ name: "rev-bumps" });
    const r0 = app!.revision;
    expect(r0).toBeGreaterThan(0n);
    expect((await t.admin.getApp({ appId: app!.id })).app!.revision).toBe(r0);
    const r1 = (await t.admin.updateApp({ appId: app!.id, limits: { mailPerDay: 5 } })).app!.revision;
    expect(r1).toBe(r0 + 1n);
    const r2 = (await t.admin.updateApp({ appId: app!.id, analyticsEnabled: false })).app!.revision;
    expect(r2).toBe(r1 + 1n);
    const r3 = (await t.admin.addSecretNames({ appId: app!.id, names: ["A"] })).app!.revision;
    expect(r3).toBe(r2 + 1n);
    const r4 = (await t.admin.declareSecrets({ appId: app!.id, names: ["A", "B"] })).app!.revision;
    expect(r4).toBe(r3 + 1n);
    expect((await t.admin.listApps({})).apps.find((a) => a.id === app!.id)!.revision).toBe(r4);
  });

  it("a stale write is refused with aborted/conflict, names the current revision and changes nothing", async () => {
    const { app } = await t.admin.createApp({ name: "rev-stale" });
    const loaded = app!.revision;
    // Someone else sets eventsPerDay through the API meanwhile.
    await t.admin.updateApp({ appId: app!.id, limits: { eventsPerDay: 500 } });
    // The open form saves only what it changed, with the revision it loaded.
    const err = await failure(
      t.admin.updateApp({ appId: app!.id, limits: { mailPerDay: 7 }, expectedRevision: loaded }),
    );
    expect(err.code).toBe(Code.Aborted);
    expect(err.findDetails(ErrorDetailSchema)[0]?.code).toBe("conflict");
    expect(err.rawMessage).toBe(`the app was changed since you loaded it (revision ${loaded + 1n}); reload`);
    const after = (await t.admin.getApp({ appId: app!.id })).app!;
    expect(after.limits).toMatchObject({ eventsPerDay: 500, mailPerDay: 100 });
    // Reloaded, the same save goes through and keeps the other change.
    const saved = await t.admin.updateApp({
      appId: app!.id,
      limits: { mailPerDay: 7 },
      expectedRevision: after.revision,
    });
    expect(saved.app!.limits).toMatchObject({ eventsPerDay: 500, mailPerDay: 7 });
  });

  it("the secret-name RPCs check expected_revision too", async () => {
    const { app } = await t.admin.createApp({ name: "rev-secrets" });
    const stale = app!.revision;
    await t.admin.updateApp({ appId: app!.id, mailFrom: "" });
    for (const call of [
      () => t.admin.addSecretNames({ appId: app!.id, names: ["X"], expectedRevision: stale }),
      () => t.admin.removeSecretNames({ appId: app!.id, names: ["X"], expectedRevision: stale }),
      () => t.admin.declareSecrets({ appId: app!.id, names: ["X"], expectedRevision: stale }),
    ]) {
      const err = await failure(call());
      expect(err.code).toBe(Code.Aborted);
      expect(err.findDetails(ErrorDetailSchema)[0]?.code).toBe("conflict");
    }
    expect((await t.admin.getApp({ appId: app!.id })).app!.declaredSecrets).toEqual([]);
  });

  it("writers racing with the same revision: exactly one wins, the others get conflict", async () => {
    const { app } = await t.admin.createApp({ name: "rev-race" });
    const loaded = app!.revision;
    const writers = 8;
    const results = await Promise.allSettled(
      Array.from({ length: writers }, (_, i) =>
        i % 2 === 0
          ? t.admin.updateApp({ appId: app!.id, limits: { mailPerDay: 10 + i }, expectedRevision: loaded })
          : t.admin.addSecretNames({ appId: app!.id, names: [`S${i}`], expectedRevision: loaded }),
      ),
    );
    const won = results.filter((r) => r.status === "fulfilled");
    const lost = results.filter((r): r is PromiseRejectedResult => r.status === "rejected");
    expect(won).toHaveLength(1);
    expect(lost).toHaveLength(writers - 1);
    for (const r of lost) expect(ConnectError.from(r.reason).code).toBe(Code.Aborted);
    const after = (await t.admin.getApp({ appId: app!.id })).app!;
    expect(after.revision).toBe(loaded + 1n);
    // Only the winner's change is there.
    const changedLimits = after.limits!.mailPerDay !== 100 ? 1 : 0;
    expect(changedLimits + after.declaredSecrets.length).toBe(1);
  });

  it("a bad expected_revision is invalid_argument naming the field", async () => {
    const { app } = await t.admin.createApp({ name: "rev-bad" });
    const err = await failure(t.admin.updateApp({ appId: app!.id, mailFrom: "", expectedRevision: 0n }));
    expect(err.code).toBe(Code.InvalidArgument);
    expect(err.rawMessage).toMatch(/^expected_revision: /);
  });
});
