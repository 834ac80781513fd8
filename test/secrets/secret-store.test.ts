/**
 * What the secrets facility leaves in the database: a dump of every table,
 * as text, holds no plaintext value (in any of the encodings a dump may use)
 * and no link token; tokens only as SHA-256, values only sealed.
 */
import crypto from "node:crypto";
import { describe, expect, it } from "vitest";
import { sql } from "kysely";
import { useTestServer } from "../support/harness.ts";
import { tables } from "../support/tables.ts";

const t = useTestServer();

/** Every row of every table of the schema, as JSON text. */
async function dumpDatabase(): Promise<string> {
  const db = t.server.deps.db;
  const tables = await sql<{ table_name: string }>`
    SELECT table_name FROM information_schema.tables
    WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'
    ORDER BY table_name`.execute(db);
  expect(tables.rows.map((r) => r.table_name)).toEqual(expect.arrayContaining(["secrets", "secret_links"]));
  const parts: string[] = [];
  for (const { table_name } of tables.rows) {
    const rows = await sql<{ row: string }>`SELECT row_to_json(t)::text AS row FROM ${sql.table(table_name)} t`.execute(
      db,
    );
    parts.push(`-- ${table_name}`, ...rows.rows.map((r) => r.row));
  }
  return parts.join("\n");
}

function encodings(text: string): string[] {
  const bytes = Buffer.from(text, "utf8");
  return [text, bytes.toString("hex"), bytes.toString("base64"), bytes.toString("base64url")];
}

describe("the database at rest", () => {
  it("holds no plaintext value and no link token", async () => {
    const app = await t.createApp();
    await t.admin.declareSecrets({ appId: app.id, names: ["BY_OWNER", "BY_LINK", "LINK_ONLY"] });
    const ownerValue = `owner-plaintext-${crypto.randomBytes(8).toString("hex")}`;
    const linkValue = `link-plaintext-${crypto.randomBytes(8).toString("hex")}`;
    await t.admin.setSecret({ appId: app.id, name: "BY_OWNER", value: ownerValue });

    const tokens: string[] = [];
    for (const name of ["BY_LINK", "LINK_ONLY"]) {
      const res = await t.request("POST", `/v1/secrets/${name}/link`, { token: app.token });
      tokens.push(new URL(res.body.url).pathname.split("/").pop()!);
    }
    expect((await t.request("PUT", `/secret-links/${tokens[0]}`, { body: { value: linkValue } })).status).toBe(200);
    // Both values are really there and readable by the app.
    expect((await t.request("GET", "/v1/secrets/BY_LINK", { token: app.token })).body.value).toBe(linkValue);
    expect((await t.request("GET", "/v1/secrets/BY_OWNER", { token: app.token })).body.value).toBe(ownerValue);

    const dump = await dumpDatabase();
    expect(dump).toContain("BY_LINK");
    for (const secret of [ownerValue, linkValue, ...tokens, app.token]) {
      for (const encoded of encodings(secret)) expect(dump).not.toContain(encoded);
    }
    // The links are there, under the SHA-256 of their tokens.
    for (const token of tokens) expect(dump).toContain(crypto.createHash("sha256").update(token).digest("hex"));
    // Two sets of one value do not give the same ciphertext (a fresh IV each time).
    await t.admin.setSecret({ appId: app.id, name: "BY_OWNER", value: ownerValue });
    const rows = await tables(t.server.deps.db)
      .selectFrom("secrets")
      .select(["name", "value_encrypted", "key_id"])
      .where("app_id", "=", app.id)
      .execute();
    const byOwner = rows.find((r) => r.name === "BY_OWNER")!;
    expect(Buffer.from(byOwner.value_encrypted!).length).toBe(12 + 16 + Buffer.byteLength(ownerValue));
    expect(byOwner.key_id).toMatch(/^[0-9a-f]{16}$/);
  });
});
