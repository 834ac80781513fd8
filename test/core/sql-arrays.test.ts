/**
 * `sql-arrays.ts`: a batch's arrays sent as one joined string come back on the
 * server element for element, whatever the JSON texts hold (quotes,
 * backslashes, commas, braces, an escaped record separator, "NULL", text
 * outside the BMP) and when empty. On PostgreSQL and PGlite.
 */
import { sql } from "kysely";
import { describe, expect, it } from "vitest";
import { intArray, jsonTextArray, uuidArray } from "../../src/core/database/index.ts";
import { useTestServer } from "../support/harness.ts";

const t = useTestServer();

async function roundTrip<T>(array: ReturnType<typeof sql<T[]>>): Promise<T[]> {
  const { rows } = await sql<{ a: T[] }>`SELECT ${array} AS a`.execute(t.server.deps.db);
  return rows[0].a;
}

describe("sql-arrays", () => {
  it("jsonTextArray gives back every JSON text unchanged", async () => {
    const texts = [
      JSON.stringify({ q: 'say "hi"', b: "back\\slash", c: "a,b", d: "{x}", e: "NULL" }),
      JSON.stringify("record\u001eseparator and \u0000 nul, escaped by JSON"),
      JSON.stringify(["😀", "é", 1.5, null, true]),
      "NULL",
      '""',
      JSON.stringify("x".repeat(10_000)),
    ];
    expect(JSON.stringify(texts)).not.toContain("\u001e");
    expect(await roundTrip(jsonTextArray(texts))).toEqual(texts);
    expect(await roundTrip(jsonTextArray([texts[0]]))).toEqual([texts[0]]);
    expect(await roundTrip(jsonTextArray([]))).toEqual([]);
  });

  it("uuidArray and intArray give back their elements, and nothing for none", async () => {
    const ids = [crypto.randomUUID(), crypto.randomUUID()];
    expect(await roundTrip(uuidArray(ids))).toEqual(ids);
    expect(await roundTrip(uuidArray([]))).toEqual([]);
    expect(await roundTrip(intArray([0, -3, 2_147_483_647]))).toEqual([0, -3, 2_147_483_647]);
    expect(await roundTrip(intArray([]))).toEqual([]);
  });
});
