/**
 * The audit log keeps the entry of a call whatever the caller typed: a
 * refused `CreateApp` named "\u0000" (text PostgreSQL cannot hold) is recorded
 * with that text escaped, not lost with a warning ("audit entry lost" before).
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

/** CreateApp over Connect's JSON form, the name written as JSON escapes. */
async function createAppAsJson(nameJson: string): Promise<number> {
  const res = await fetch(`${t.url}/platform.admin.v1.AdminService/CreateApp`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${t.adminToken}` },
    body: `{"name":"${nameJson}"}`,
  });
  await res.arrayBuffer();
  return res.status;
}

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
});
