/**
 * The audit log keeps the entry of a call whatever the caller typed: a
 * refused `CreateApp` named "\u0000" (text PostgreSQL cannot hold) is recorded
 * with that text escaped, not lost with a warning ("audit entry lost" before),
 * and a write refused before its change began (an app id naming no app, or
 * holding NUL) is recorded too, once.
 * Over Connect against the real server, on PGlite and PostgreSQL.
 */
import { describe, expect, it } from "vitest";
import { ConnectError } from "@connectrpc/connect";
import { useTestServer } from "../support/harness.ts";

const t = useTestServer();

async function refusedCode(p: Promise<unknown>): Promise<number> {
  try {
    await p;
  } catch (err) {
    return ConnectError.from(err).code;
  }
  throw new Error("expected the call to be refused");
}

/** An AdminService call over Connect's JSON form, the body as written (JSON escapes kept). */
async function callAsJson(rpc: string, body: string): Promise<number> {
  const res = await fetch(`${t.url}/platform.admin.v1.AdminService/${rpc}`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${t.adminToken}` },
    body,
  });
  await res.arrayBuffer();
  return res.status;
}

/** CreateApp over Connect's JSON form, the name written as JSON escapes. */
const createAppAsJson = (nameJson: string) => callAsJson("CreateApp", `{"name":"${nameJson}"}`);

describe("audit entries of input PostgreSQL cannot hold", () => {
  it.each([
    ["NUL alone", "\\u0000", "\\u0000"],
    ["NUL inside a name", "ab\\u0000cd", "ab\\u0000cd"],
  ])("a CreateApp named with %s is refused and recorded with the text escaped", async (_what, nameJson, shown) => {
    const before = (await t.admin.listAuditEntries({ action: "app.create", pageSize: 100 })).entries.length;
    expect(await createAppAsJson(nameJson)).toBe(400);
    const { entries } = await t.admin.listAuditEntries({ action: "app.create", pageSize: 100 });
    expect(entries.length).toBe(before + 1);
    const entry = entries[0];
    expect(entry.outcome).not.toBe("ok");
    expect(JSON.stringify(entry.detail)).toContain(JSON.stringify(shown).slice(1, -1));
  });

  it("a well-formed name with a surrogate pair is recorded as typed", async () => {
    const name = `emoji-\u{1F600}-${Date.now()}`;
    expect(await refusedCode(t.admin.createApp({ name }))).toBeGreaterThan(0);
    const { entries } = await t.admin.listAuditEntries({ action: "app.create", pageSize: 1 });
    expect(JSON.stringify(entries[0].detail)).toContain("\u{1F600}");
  });

  it.each([
    ["UpdateApp", "app.stop", '{"appId":"\\u0000","status":"APP_STATUS_STOPPED"}', "\\u0000"],
    ["UpdateApp", "app.stop", '{"appId":"no-such-app","status":"APP_STATUS_STOPPED"}', "no-such-app"],
    [
      "DeleteApp",
      "app.delete",
      '{"appId":"00000000-0000-4000-8000-000000000000"}',
      "00000000-0000-4000-8000-000000000000",
    ],
    ["IssueToken", "token.issue", '{"appId":"x\\u0000y"}', "x\\u0000y"],
    ["SetSecret", "secret.set", '{"appId":"","name":"A","value":"v"}', undefined],
  ])(
    "%s refused before it began (%s on %s) is recorded once, naming what was typed",
    async (rpc, action, body, app) => {
      const audited = async () =>
        (await t.admin.listAuditEntries({ pageSize: 100 })).entries.filter(
          (e) => e.outcome !== "ok" && (app === undefined ? e.action === action : e.detail?.app === app),
        );
      const before = (await audited()).length;
      const status = await callAsJson(rpc, body);
      expect(status).toBeGreaterThanOrEqual(400);
      expect(status).toBeLessThan(500);
      const after = await audited();
      expect(after.length).toBe(before + 1);
      expect(["app.update", action]).toContain(after[0].action);
      expect(after[0].outcome).toBe("failed");
      expect(after[0].detail?.error).toMatch(/^(not_found|invalid_argument)$/);
    },
  );
});
