/**
 * The unit of work an operator's change and its audit entry share
 * (`core/database/unit-of-work.ts`): everything written on its `Tx` commits
 * or rolls back together, what waits for the commit runs only after it, and a
 * store's `transact` joins the `Tx` instead of opening a transaction of its own.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { migrate, openDatabase, transact, unitOfWork, type Database, type Tx } from "../../src/core/database/index.ts";
import { backend, createTestDatabase, type TestDatabase } from "../support/harness.ts";
import { tables } from "../support/tables.ts";

let tdb: TestDatabase;
let database: Database;

beforeAll(async () => {
  tdb = await createTestDatabase();
  database = await openDatabase({ databaseUrl: tdb.url, dataDir: tdb.dataDir, poolSize: 5 });
  await migrate(database.db);
});
afterAll(async () => {
  await database?.close();
  await tdb?.drop();
});

const uniqueName = () => `uow-${Math.random().toString(36).slice(2)}`;

async function appNamed(name: string): Promise<boolean> {
  const row = await tables(database.db).selectFrom("apps").select("id").where("name", "=", name).executeTakeFirst();
  return row !== undefined;
}

function insertApp(on: ReturnType<typeof tables>, name: string) {
  return on.insertInto("apps").values({ name, status: "running", mail_from: "", limits: "{}" }).execute();
}

describe(`the unit of work on ${backend}`, () => {
  it("commits what was written on it, then runs what waited for the commit, in order", async () => {
    const name = uniqueName();
    const seen: string[] = [];
    const result = await unitOfWork(database.db, async (tx) => {
      await insertApp(tables(tx.db), name);
      tx.afterCommit(() => seen.push("first"));
      tx.afterCommit(() => seen.push("second"));
      expect(seen).toEqual([]);
      return 42;
    });
    expect(result).toBe(42);
    expect(seen).toEqual(["first", "second"]);
    expect(await appNamed(name)).toBe(true);
  });

  it("rolls back everything written on it when the work throws, and runs nothing that waited for the commit", async () => {
    const name = uniqueName();
    let woken = false;
    await expect(
      unitOfWork(database.db, async (tx) => {
        await insertApp(tables(tx.db), name);
        tx.afterCommit(() => {
          woken = true;
        });
        throw new Error("refused after the write");
      }),
    ).rejects.toThrow("refused after the write");
    expect(woken).toBe(false);
    expect(await appNamed(name)).toBe(false);
  });

  it("transact joins the unit of work it runs on (its writes roll back with it) and opens one on the pool", async () => {
    const joined = uniqueName();
    await expect(
      unitOfWork(database.db, async (tx) => {
        await transact(tables(tx.db), (trx) => insertApp(trx, joined));
        throw new Error("the caller's change failed");
      }),
    ).rejects.toThrow("the caller's change failed");
    expect(await appNamed(joined)).toBe(false);

    const alone = uniqueName();
    await expect(
      transact(tables(database.db), async (trx) => {
        await insertApp(trx, alone);
        throw new Error("its own transaction failed");
      }),
    ).rejects.toThrow("its own transaction failed");
    expect(await appNamed(alone)).toBe(false);
    const kept = uniqueName();
    await transact(tables(database.db), (trx) => insertApp(trx, kept));
    expect(await appNamed(kept)).toBe(true);
  });

  it("is made only by unitOfWork: a pool handle cannot pass for a Tx", () => {
    // @ts-expect-error A Tx carries a brand only unitOfWork gives: a Db with an afterCommit is not one.
    const forged: Tx = { db: database.db, afterCommit: () => {} };
    expect(forged.db).toBe(database.db);
  });
});
