/**
 * `distinctId` on events (docs/analytics.md "Identity"): accepted over REST
 * and Connect, checked (1 to 200 characters), stored with the event and its
 * number properties' numeric form, on this run's database (SQL store).
 */
import { sql } from "kysely";
import { describe, expect, it } from "vitest";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { AnalyticsService, PropertyKind } from "../../gen/platform/analytics/v1/analytics_pb.js";
import { toDocuments } from "../../src/analytics/mongo-event-store.ts";
import { useTestServer, type TestApp } from "../support/harness.ts";
import { tables } from "../support/tables.ts";
import { T } from "./store-cases.ts";

const t = useTestServer();

async function newApp(): Promise<TestApp> {
  const app = await t.createApp();
  const res = await t.request("POST", "/v1/analytics/types", {
    token: app.token,
    body: { name: "order", properties: { plan: "string", amount: "number", paid: "boolean" } },
  });
  expect(res.status).toBe(200);
  return app;
}

async function storedRows(appId: string) {
  const { rows } = await sql<{
    distinct_id: string | null;
    numbers: Record<string, number> | null;
    properties: unknown;
  }>`
    SELECT distinct_id, numbers, properties FROM analytics_events WHERE app_id = ${appId}::uuid ORDER BY at`.execute(
    tables(t.server.deps.db),
  );
  return rows;
}

describe("distinctId over REST", () => {
  it("stores the id with the event, and the numbers beside their strings", async () => {
    const app = await newApp();
    const at = T("2024-02-29T10:00:00Z");
    const res = await t.request("POST", "/v1/analytics/events", {
      token: app.token,
      body: {
        events: [
          { type: "order", at, distinctId: "user-1", properties: { plan: "pro", amount: 12.5, paid: true } },
          { type: "order", at: at + 1, properties: { amount: -3 } },
          { type: "order", at: at + 2, distinctId: "ü".repeat(200) },
        ],
      },
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(await storedRows(app.id)).toEqual([
      {
        distinct_id: "user-1",
        numbers: { amount: 12.5 },
        properties: { plan: "pro", amount: "12.5", paid: "true" },
      },
      { distinct_id: null, numbers: { amount: -3 }, properties: { amount: "-3" } },
      { distinct_id: "ü".repeat(200), numbers: null, properties: {} },
    ]);
  });

  it.each([
    ["", "events[0].distinctId: must be 1 to 200 characters"],
    ["x".repeat(201), "events[0].distinctId: must be 1 to 200 characters"],
    ["a\u0000b", "events[0].distinctId: must be valid Unicode without NUL characters"],
    ["\ud800", "events[0].distinctId: must be valid Unicode without NUL characters"],
    [42, "events[0].distinctId: must be a string"],
  ])("refuses the batch for distinctId %j", async (distinctId, message) => {
    const app = await newApp();
    const res = await t.request("POST", "/v1/analytics/events", {
      token: app.token,
      body: { events: [{ type: "order", distinctId }] },
    });
    expect(res.status).toBe(400);
    expect(res.body.error.message).toBe(message);
    expect(await storedRows(app.id)).toEqual([]);
  });

  it("names distinctId for the words other services use", async () => {
    const app = await newApp();
    for (const word of ["distinct_id", "userId", "user_id"]) {
      const res = await t.request("POST", "/v1/analytics/events", {
        token: app.token,
        body: { events: [{ type: "order", [word]: "u1" }] },
      });
      expect(res.status).toBe(400);
      expect(res.body.error.message).toBe(`unknown field "events[0].${word}": use "distinctId"`);
    }
  });
});

describe("distinctId over Connect and gRPC", () => {
  for (const protocol of ["connect", "grpc"] as const) {
    it(`stores it over ${protocol}, and refuses a long one with InvalidArgument`, async () => {
      const app = await newApp();
      const client = t.client(AnalyticsService, app.token, protocol);
      const at = timestampFromMs(T("2024-02-29T10:00:00Z"));
      await client.logEvents({
        events: [
          {
            type: "order",
            at,
            distinctId: "user-9",
            properties: { amount: { kind: { case: "numberValue", value: 7 } } },
          },
        ],
      });
      expect(await storedRows(app.id)).toEqual([
        { distinct_id: "user-9", numbers: { amount: 7 }, properties: { amount: "7" } },
      ]);
      const err = await client
        .logEvents({ events: [{ type: "order", distinctId: "y".repeat(201) }] })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConnectError);
      expect((err as ConnectError).code).toBe(Code.InvalidArgument);
      expect((err as ConnectError).rawMessage).toBe("events[0].distinctId: must be 1 to 200 characters");
    });
  }

  it("registers types the same way (number kinds give numbers)", async () => {
    const app = await t.createApp();
    const client = t.client(AnalyticsService, app.token, "connect");
    const res = await client.registerEventType({ name: "x", properties: { n: PropertyKind.NUMBER } });
    expect(res.eventType?.properties).toEqual({ n: PropertyKind.NUMBER });
  });
});

describe("the MongoDB store's documents", () => {
  it("carry the id and the numbers as measurements", () => {
    const [doc] = toDocuments(
      "app",
      [{ type: "order", at: 0, properties: { "a.b": "2" }, numbers: { "a.b": 2 }, distinctId: "u" }],
      "batch",
    );
    expect(doc).toEqual({
      at: new Date(0),
      meta: { app: "app", type: "order" },
      p: { "a:b": "2" },
      n: { "a:b": 2 },
      distinctId: "u",
      b: "batch",
    });
    expect(toDocuments("app", [{ type: "order", at: 0, properties: {} }], "batch")[0]).not.toHaveProperty("distinctId");
  });
});

describe("number properties in the rollups, over REST", () => {
  it("count exactly by a number property, before and after its kind changes, a retried batch counted once", async () => {
    const app = await newApp();
    const day = T("2024-03-04T00:00:00Z");
    const query = async (body: Record<string, unknown>) => {
      const res = await t.request("POST", "/v1/analytics/query", {
        token: app.token,
        body: { type: "order", since: day, until: day + 3 * 86_400_000, interval: "day", ...body },
      });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      return res.body as { buckets: { at: number; group?: string | null; count?: number; value?: number }[] };
    };
    const log = async (events: unknown[], key?: string) => {
      const res = await t.request("POST", "/v1/analytics/events", {
        token: app.token,
        body: { events },
        headers: key === undefined ? {} : { "idempotency-key": key },
      });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
    };
    // Day 1: amounts as numbers, the batch sent twice under one key (a client's retry).
    const first = [5, 5, 7, 12.5].map((amount, i) => ({
      type: "order",
      at: day + i * 3_600_000,
      distinctId: `u${i % 2}`,
      properties: { amount, plan: "pro", paid: i % 2 === 0 },
    }));
    await log(first, "batch-1");
    await log(first, "batch-1");
    // Day 2: the type registered again with amount a string; amounts logged as strings.
    const res = await t.request("POST", "/v1/analytics/types", {
      token: app.token,
      body: { name: "order", properties: { plan: "string", amount: "string", paid: "boolean" } },
    });
    expect(res.status).toBe(200);
    await log(
      ["5", "9"].map((amount, i) => ({ type: "order", at: day + 86_400_000 + i * 60_000, properties: { amount } })),
    );
    const d1 = day;
    const d2 = day + 86_400_000;
    const counts = (body: Awaited<ReturnType<typeof query>>) =>
      body.buckets.map((b) => [b.at, b.group ?? null, b.count]).sort();
    expect(counts(await query({ groupBy: "amount" }))).toEqual(
      [
        [d1, "12.5", 1],
        [d1, "5", 2],
        [d1, "7", 1],
        [d2, "5", 1],
        [d2, "9", 1],
      ].sort(),
    );
    expect(counts(await query({ groupBy: "plan" }))).toEqual(
      [
        [d1, "pro", 4],
        [d2, null, 2],
      ].sort(),
    );
    const filtered = await query({ where: [{ property: "amount", op: "eq", value: "5" }] });
    expect(filtered.buckets.map((b) => [b.at, b.value])).toEqual([
      [d1, 2],
      [d2, 1],
    ]);
    const unique = await query({ aggregate: "unique" });
    expect(unique.buckets.map((b) => [b.at, b.value])).toEqual([[d1, 2]]);
  });
});
