import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDatabase, migrate, type Database } from "../../src/core/database/index.ts";
import { createQuotas, withReservation } from "../../src/core/quotas/quotas.ts";
import { PlatformError, toPlatformError } from "../../src/core/errors.ts";
import { DatabaseNoAnswerError } from "../../src/core/database/health.ts";
import { sql } from "kysely";
import { startTcpProxy } from "../support/tcp-proxy.ts";
import { backend, createTestDatabase, type TestDatabase } from "../support/harness.ts";
import { refuseWrites } from "../support/refuse-writes.ts";
import { tables } from "../support/tables.ts";

let tdb: TestDatabase;
let database: Database;

async function newApp(): Promise<string> {
  const row = await tables(database.db)
    .insertInto("apps")
    .values({ name: `q-${Math.random().toString(36).slice(2)}`, status: "running", mail_from: "", limits: "{}" })
    .returning("id")
    .executeTakeFirstOrThrow();
  return row.id;
}

beforeAll(async () => {
  tdb = await createTestDatabase();
  database = await openDatabase({ databaseUrl: tdb.url, dataDir: tdb.dataDir, poolSize: 30 });
  await migrate(database.db);
});
afterAll(async () => {
  await database?.close();
  await tdb?.drop();
});

describe(`quotas on ${backend}`, () => {
  it("reserve: 200 concurrent reservations against a cap of 100 accept exactly 100", async () => {
    const quotas = createQuotas(database.db);
    const appId = await newApp();
    const results = await Promise.allSettled(
      Array.from({ length: 200 }, () => quotas.reserve({ appId: appId, counter: "events", amount: 1, cap: 100 })),
    );
    const accepted = results.filter((r) => r.status === "fulfilled");
    const refused = results.filter((r) => r.status === "rejected");
    expect(accepted).toHaveLength(100);
    expect(refused).toHaveLength(100);
    for (const r of refused) {
      const err = r.reason as PlatformError;
      expect(err).toBeInstanceOf(PlatformError);
      expect(err.code).toBe("quota_exceeded");
      expect(err.retryAfterSeconds).toBeGreaterThan(0);
    }
    expect(await quotas.used(appId, "events")).toBe(100);
  });

  it("reserve: a reservation larger than what is left takes nothing", async () => {
    const quotas = createQuotas(database.db);
    const appId = await newApp();
    await quotas.reserve({ appId: appId, counter: "mail", amount: 7, cap: 10 });
    await expect(quotas.reserve({ appId: appId, counter: "mail", amount: 4, cap: 10 })).rejects.toMatchObject({
      code: "quota_exceeded",
    });
    expect(await quotas.used(appId, "mail")).toBe(7);
    await expect(quotas.reserve({ appId: appId, counter: "fast_tokens", amount: 11, cap: 10 })).rejects.toMatchObject({
      code: "quota_exceeded",
    });
    expect(await quotas.used(appId, "fast_tokens")).toBe(0);
  });

  it("settle: replaces the reservation by the real amount", async () => {
    const quotas = createQuotas(database.db);
    const appId = await newApp();
    const r = await quotas.reserve({ appId: appId, counter: "fast_tokens", amount: 500, cap: 1000 });
    expect(r.remaining).toBe(500);
    expect(await quotas.settle(r, { actual: 120, cap: 1000 })).toBe(880);
    expect(await quotas.used(appId, "fast_tokens")).toBe(120);
  });

  it("release: gives the reservation back whole", async () => {
    const quotas = createQuotas(database.db);
    const appId = await newApp();
    const a = await quotas.reserve({ appId: appId, counter: "embed_tokens", amount: 30, cap: 100 });
    await quotas.reserve({ appId: appId, counter: "embed_tokens", amount: 20, cap: 100 });
    await quotas.release(a);
    expect(await quotas.used(appId, "embed_tokens")).toBe(20);
  });

  it("counts per UTC day: a new day starts from zero", async () => {
    let now = new Date("2026-03-01T23:59:59.000Z");
    const quotas = createQuotas(database.db, () => now);
    const appId = await newApp();
    await quotas.reserve({ appId: appId, counter: "events", amount: 10, cap: 10 });
    await expect(quotas.reserve({ appId: appId, counter: "events", amount: 1, cap: 10 })).rejects.toMatchObject({
      code: "quota_exceeded",
      retryAfterSeconds: 1,
    });
    now = new Date("2026-03-02T00:00:00.000Z");
    await expect(quotas.reserve({ appId: appId, counter: "events", amount: 10, cap: 10 })).resolves.toMatchObject({
      remaining: 0,
      day: "2026-03-02",
    });
  });

  it("counts per app and per counter", async () => {
    const quotas = createQuotas(database.db);
    const a = await newApp();
    const b = await newApp();
    await quotas.reserve({ appId: a, counter: "mail", amount: 5, cap: 5 });
    await expect(quotas.reserve({ appId: b, counter: "mail", amount: 5, cap: 5 })).resolves.toBeDefined();
    await expect(quotas.reserve({ appId: a, counter: "events", amount: 5, cap: 5 })).resolves.toBeDefined();
  });
});

describe(`withReservation on ${backend}`, () => {
  it("settles to the actual amount when the work succeeds, and answers what is left", async () => {
    const quotas = createQuotas(database.db);
    const appId = await newApp();
    const { result, remaining } = await withReservation(
      quotas,
      { appId, counter: "fast_tokens", amount: 50, cap: 100, actual: (r: number) => r },
      async (reservation) => {
        expect(reservation.amount).toBe(50);
        expect(await quotas.used(appId, "fast_tokens")).toBe(50); // taken before the work
        return 20;
      },
    );
    expect(result).toBe(20);
    expect(remaining).toBe(80);
    expect(await quotas.used(appId, "fast_tokens")).toBe(20);
  });

  it("answers the work's result when the settle fails, charged at the reservation, and reports the failure", async () => {
    const quotas = createQuotas(database.db);
    const appId = await newApp();
    const settleErrors: unknown[] = [];
    // Giving back part of a reservation is an update lowering `used`: refused here.
    const allow = await refuseWrites(database.db, "quota_usage", "UPDATE", "NEW.used < OLD.used");
    try {
      const { result, remaining } = await withReservation(
        quotas,
        {
          appId,
          counter: "fast_tokens",
          amount: 50,
          cap: 100,
          actual: (r: number) => r,
          onSettleError: (err) => settleErrors.push(err),
        },
        async () => 20,
      );
      expect([result, remaining]).toEqual([20, 50]);
    } finally {
      await allow();
    }
    expect(settleErrors).toHaveLength(1);
    expect(await quotas.used(appId, "fast_tokens")).toBe(50);
  });

  it("gives the reservation back whole when the work throws, and rethrows the work's error", async () => {
    const quotas = createQuotas(database.db);
    const appId = await newApp();
    const failures: unknown[] = [];
    const boom = new Error("provider down");
    await expect(
      withReservation(
        quotas,
        { appId, counter: "mail", amount: 1, cap: 5, onFailure: (err) => failures.push(err) },
        async () => {
          expect(await quotas.used(appId, "mail")).toBe(1);
          throw boom;
        },
      ),
    ).rejects.toBe(boom);
    expect(failures).toEqual([boom]);
    expect(await quotas.used(appId, "mail")).toBe(0);
  });

  it.runIf(process.env.DATABASE_URL !== undefined)(
    "keeps the reservation when the work's statement got no answer (it may have committed): the cap is not overspent",
    async () => {
      const quotas = createQuotas(database.db);
      const appId = await newApp();
      // The work writes through a connection whose answers are lost on the way: the statement runs and
      // commits, and the bounded pool gives up on it (DatabaseNoAnswerError).
      const proxy = await startTcpProxy(tdb.url!);
      const other = await openDatabase({ databaseUrl: proxy.url, dataDir: tdb.dataDir, statementTimeoutMs: 200 });
      try {
        await sql`SELECT 1`.execute(other.db); // connected before the answers are held
        const failed = await withReservation(quotas, { appId, counter: "mail", amount: 1, cap: 1 }, async () => {
          proxy.holdAnswers();
          await sql`UPDATE apps SET name = name || '-done' WHERE id = ${appId}::uuid`.execute(other.db);
        }).catch((err: unknown) => err);
        expect(failed).toBeInstanceOf(DatabaseNoAnswerError);
        const { name } = await tables(database.db)
          .selectFrom("apps")
          .select("name")
          .where("id", "=", appId)
          .executeTakeFirstOrThrow();
        expect(name.endsWith("-done")).toBe(true); // the work was done
        expect(await quotas.used(appId, "mail")).toBe(1); // and stays counted
        await expect(quotas.reserve({ appId: appId, counter: "mail", amount: 1, cap: 1 })).rejects.toMatchObject({
          code: "quota_exceeded",
        });
      } finally {
        proxy.release();
        await other.close();
        await proxy.close();
      }
    },
  );

  it("keeps the reservation when the work's error was made from a statement without answer", async () => {
    const quotas = createQuotas(database.db);
    const appId = await newApp();
    const noAnswer = toPlatformError(new DatabaseNoAnswerError(200));
    await expect(
      withReservation(quotas, { appId, counter: "events", amount: 3, cap: 10 }, () => Promise.reject(noAnswer)),
    ).rejects.toBe(noAnswer);
    expect(await quotas.used(appId, "events")).toBe(3);
  });

  it("answers the new day's figure, never below zero, when the work ran past UTC midnight", async () => {
    let now = new Date("2026-03-01T23:59:59.000Z");
    const quotas = createQuotas(database.db, () => now);
    const appId = await newApp();
    // A generation reserves 60 before midnight and settles (to 10) after it, when today's use is above the cap.
    const settled = withReservation(
      quotas,
      { appId, counter: "fast_tokens", amount: 60, cap: 100, actual: (r: number) => r },
      async () => {
        now = new Date("2026-03-02T00:00:01.000Z");
        const other = await quotas.reserve({ appId: appId, counter: "fast_tokens", amount: 90, cap: 100 });
        await quotas.settle(other, { actual: 130, cap: 100 });
        return 10;
      },
    );
    await expect(settled).resolves.toEqual({ result: 10, remaining: 0 });
    // A mail reserved before midnight and sent after it: what is left is the new day's, 5 of 5 (the mail counts on the day it was reserved).
    now = new Date("2026-03-02T23:59:59.000Z");
    const mail = withReservation(quotas, { appId, counter: "mail", amount: 1, cap: 5 }, async () => {
      now = new Date("2026-03-03T00:00:01.000Z");
      return "sent";
    });
    await expect(mail).resolves.toEqual({ result: "sent", remaining: 5 });
  });

  it("refuses before the work when the allowance is spent (the work never runs)", async () => {
    const quotas = createQuotas(database.db);
    const appId = await newApp();
    let ran = false;
    const refused = await withReservation(quotas, { appId, counter: "events", amount: 11, cap: 10 }, async () => {
      ran = true;
    }).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(PlatformError);
    expect((refused as PlatformError).code).toBe("quota_exceeded");
    expect(ran).toBe(false);
  });
});
