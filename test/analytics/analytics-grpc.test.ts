/**
 * The analytics facility over gRPC (and Connect for a few calls): the same
 * implementation as REST, so the same rules, with the matching Connect codes
 * and our string code in the error detail.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, ConnectError, type Client } from "@connectrpc/connect";
import { timestampFromMs, timestampMs } from "@bufbuild/protobuf/wkt";
import { AnalyticsService, Interval, PropertyKind } from "../../gen/platform/analytics/v1/analytics_pb.js";
import { ErrorDetailSchema } from "../../gen/platform/meta/v1/error_pb.js";
import { startServer, useTestServer, type Protocol, type TestServer } from "../support/harness.ts";
import { T } from "./store-cases.ts";

const t = useTestServer();

async function failure(promise: Promise<unknown>) {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ConnectError);
  const e = err as ConnectError;
  return { code: e.code, stringCode: e.findDetails(ErrorDetailSchema)[0]?.code, message: e.rawMessage };
}

async function newClient(protocol: Protocol = "grpc") {
  const app = await t.createApp();
  const client = t.client(AnalyticsService, app.token, protocol);
  await client.registerEventType({
    name: "signup",
    properties: { plan: PropertyKind.STRING, seats: PropertyKind.NUMBER, paid: PropertyKind.BOOLEAN },
  });
  return { app, client };
}

const str = (value: string) => ({ kind: { case: "stringValue" as const, value } });
const num = (value: number) => ({ kind: { case: "numberValue" as const, value } });
const bool = (value: boolean) => ({ kind: { case: "boolValue" as const, value } });

function buckets(res: Awaited<ReturnType<Client<typeof AnalyticsService>["queryEvents"]>>) {
  return res.buckets.map((b) => [new Date(timestampMs(b.at!)).toISOString(), b.group ?? null, Number(b.count)]);
}

describe("AnalyticsService over gRPC", () => {
  it("registers, replaces and lists types", async () => {
    const { client } = await newClient();
    const replaced = await client.registerEventType({ name: "signup", properties: { country: PropertyKind.STRING } });
    expect(replaced.eventType?.properties).toEqual({ country: PropertyKind.STRING });
    const { types } = await client.listEventTypes({});
    expect(types.map((x) => x.name)).toEqual(["signup"]);
    expect(timestampMs(types[0].createdAt!)).toBeLessThanOrEqual(timestampMs(types[0].updatedAt!));
  });

  it("refuses a bad name or an unspecified kind with InvalidArgument", async () => {
    const { client } = await newClient();
    const bad = await failure(client.registerEventType({ name: "Bad" }));
    expect(bad).toMatchObject({ code: Code.InvalidArgument, stringCode: "invalid_argument" });
    expect(bad.message).toMatch(/^name: /);
    const kind = await failure(client.registerEventType({ name: "x", properties: { p: PropertyKind.UNSPECIFIED } }));
    expect(kind.message).toMatch(/^properties\.p: /);
  });

  it("logs and counts, grouping number and boolean properties as strings", async () => {
    const { client } = await newClient();
    const at = timestampFromMs(T("2024-02-29T10:15:00Z"));
    const res = await client.logEvents({
      events: [
        { type: "signup", at, properties: { plan: str("pro"), seats: num(3), paid: bool(true) } },
        { type: "signup", at, properties: { seats: num(3), paid: bool(false) } },
        { type: "signup", at: timestampFromMs(T("2024-03-01T00:00:00Z")), properties: {} },
      ],
    });
    expect(res.recorded).toBe(3n);
    expect(res.remainingToday).toBe(100_000n - 3n);
    const range = {
      type: "signup",
      since: timestampFromMs(T("2024-02-29T00:00:00Z")),
      until: timestampFromMs(T("2024-03-02T00:00:00Z")),
    };
    const bySeats = await client.queryEvents({ ...range, groupBy: "seats" });
    expect(bySeats.interval).toBe(Interval.DAY);
    expect(bySeats.groupBy).toBe("seats");
    expect(bySeats.total).toBe(3n);
    expect(buckets(bySeats)).toEqual([
      ["2024-02-29T00:00:00.000Z", "3", 2],
      ["2024-03-01T00:00:00.000Z", null, 1],
    ]);
    const byPaid = await client.queryEvents({ ...range, interval: Interval.MONTH, groupBy: "paid" });
    expect(buckets(byPaid)).toEqual([
      ["2024-02-01T00:00:00.000Z", "false", 1],
      ["2024-02-01T00:00:00.000Z", "true", 1],
      ["2024-03-01T00:00:00.000Z", null, 1],
    ]);
    const week = await client.queryEvents({ ...range, interval: Interval.WEEK });
    expect(buckets(week)).toEqual([["2024-02-26T00:00:00.000Z", null, 3]]);
  });

  it("buckets in a time zone (America/New_York, 25-hour day)", async () => {
    const { client } = await newClient();
    await client.logEvents({
      events: ["2024-11-03T03:59:00Z", "2024-11-03T04:00:00Z", "2024-11-04T04:30:00Z", "2024-11-04T05:00:00Z"].map(
        (iso) => ({
          type: "signup",
          at: timestampFromMs(T(iso)),
        }),
      ),
    });
    const res = await client.queryEvents({
      type: "signup",
      since: timestampFromMs(T("2024-11-02T00:00:00Z")),
      until: timestampFromMs(T("2024-11-06T00:00:00Z")),
      timezone: "America/New_York",
    });
    expect(buckets(res)).toEqual([
      ["2024-11-02T04:00:00.000Z", null, 1],
      ["2024-11-03T04:00:00.000Z", null, 2],
      ["2024-11-04T05:00:00.000Z", null, 1],
    ]);
  });

  for (const protocol of ["connect", "grpc"] as const) {
    it(`a zoned bucket that would start before year 1 is answered from 0001-01-01T00:00Z (${protocol})`, async () => {
      // New York's local day holding 0001-01-01T00:00Z began on 31 December of year 0, which a Timestamp cannot
      // hold: Connect JSON answered 500 with the encoder's message, PGlite (reading the year-0 time) 500 on every protocol.
      const { client } = await newClient(protocol);
      await client.logEvents({
        events: ["0001-01-01T00:00:00Z", "0001-01-01T12:00:00Z"].map((iso) => ({
          type: "signup",
          at: timestampFromMs(T(iso)),
        })),
      });
      const res = await client.queryEvents({
        type: "signup",
        since: timestampFromMs(T("0001-01-01T00:00:00Z")),
        until: timestampFromMs(T("0001-01-03T00:00:00Z")),
        timezone: "America/New_York",
      });
      expect(buckets(res)).toEqual([
        ["0001-01-01T00:00:00.000Z", null, 1],
        ["0001-01-01T04:56:02.000Z", null, 1],
      ]);
    });
  }

  it("refuses a bad batch whole, naming the first bad event", async () => {
    const { client } = await newClient();
    const at = timestampFromMs(T("2024-03-10T10:00:00Z"));
    const good = { type: "signup", at, properties: { plan: str("pro") } };
    const bad = await failure(
      client.logEvents({
        events: [good, good, { type: "signup", at, properties: { plan: num(3) } }, { type: "nope" }],
      }),
    );
    expect(bad).toMatchObject({ code: Code.InvalidArgument, stringCode: "invalid_argument" });
    expect(bad.message).toMatch(/^events\[2\]\.properties\.plan: must be a string/);
    const nan = await failure(
      client.logEvents({ events: [{ type: "signup", properties: { seats: num(Number.NaN) } }] }),
    );
    expect(nan.message).toMatch(/^events\[0\]\.properties\.seats: must be a finite number/);
    const future = await failure(
      client.logEvents({ events: [{ type: "signup", at: timestampFromMs(Date.now() + 25 * 3_600_000) }] }),
    );
    expect(future.message).toMatch(/^events\[0\]\.at: /);
    const empty = await failure(client.logEvents({ events: [] }));
    expect(empty.message).toMatch(/^events: /);
    const res = await client.queryEvents({
      type: "signup",
      since: timestampFromMs(T("2024-03-10T00:00:00Z")),
      until: timestampFromMs(T("2024-03-11T00:00:00Z")),
    });
    expect(res.total).toBe(0n);
  });

  it("answers InvalidArgument for bad queries", async () => {
    const { client } = await newClient();
    const since = timestampFromMs(Date.now() - 86_400_000);
    expect((await failure(client.queryEvents({ type: "nope", since }))).message).toMatch(/^type: /);
    expect((await failure(client.queryEvents({ type: "signup", since, groupBy: "country" }))).message).toMatch(
      /^groupBy: /,
    );
    expect((await failure(client.queryEvents({ type: "signup" }))).message).toMatch(/^since: is required/);
    expect((await failure(client.queryEvents({ type: "signup", since, until: since }))).message).toMatch(/^since: /);
    const wide = await failure(
      client.queryEvents({ type: "signup", since: timestampFromMs(0), interval: Interval.HOUR }),
    );
    expect(wide).toMatchObject({ code: Code.InvalidArgument });
    expect(wide.message).toMatch(/at most 1000/);
    expect((await failure(client.queryEvents({ type: "signup", since, interval: 9 as Interval }))).message).toMatch(
      /^interval: /,
    );
  });

  it("answers ResourceExhausted quota_exceeded once the cap is spent", async () => {
    const { app, client } = await newClient();
    await t.admin.updateApp({ appId: app.id, limits: { eventsPerDay: 2 } });
    expect((await client.logEvents({ events: [{ type: "signup" }, { type: "signup" }] })).remainingToday).toBe(0n);
    const over = await failure(client.logEvents({ events: [{ type: "signup" }] }));
    expect(over).toMatchObject({ code: Code.ResourceExhausted, stringCode: "quota_exceeded" });
  });

  it("records exactly the cap when 200 single-event calls race over gRPC against a cap of 100", async () => {
    const { app, client } = await newClient();
    await t.admin.updateApp({ appId: app.id, limits: { eventsPerDay: 100 } });
    const results = await Promise.allSettled(
      Array.from({ length: 200 }, () => client.logEvents({ events: [{ type: "signup" }] })),
    );
    const ok = results.filter((r) => r.status === "fulfilled");
    const refused = results.filter((r): r is PromiseRejectedResult => r.status === "rejected");
    expect(ok).toHaveLength(100);
    expect(refused).toHaveLength(100);
    for (const r of refused) expect((r.reason as ConnectError).code).toBe(Code.ResourceExhausted);
    const res = await client.queryEvents({
      type: "signup",
      since: timestampFromMs(Date.now() - 3_600_000),
      until: timestampFromMs(Date.now() + 1000),
    });
    expect(res.total).toBe(100n);
  });

  it("follows a type replaced between two batches", async () => {
    const { client } = await newClient();
    const at = timestampFromMs(T("2024-03-10T10:00:00Z"));
    await client.logEvents({ events: [{ type: "signup", at, properties: { plan: str("pro") } }] });
    await client.registerEventType({ name: "signup", properties: { plan: PropertyKind.NUMBER } });
    const old = await failure(client.logEvents({ events: [{ type: "signup", at, properties: { plan: str("pro") } }] }));
    expect(old.message).toMatch(/^events\[0\]\.properties\.plan: must be a number/);
    await client.logEvents({ events: [{ type: "signup", at, properties: { plan: num(2) } }] });
    const res = await client.queryEvents({
      type: "signup",
      since: timestampFromMs(T("2024-03-10T00:00:00Z")),
      until: timestampFromMs(T("2024-03-11T00:00:00Z")),
      groupBy: "plan",
    });
    expect(buckets(res)).toEqual([
      ["2024-03-10T00:00:00.000Z", "2", 1],
      ["2024-03-10T00:00:00.000Z", "pro", 1],
    ]);
  });

  it("answers Unimplemented when analytics is disabled and PermissionDenied to a stopped app", async () => {
    const { app, client } = await newClient();
    await t.admin.updateApp({ appId: app.id, analyticsEnabled: false });
    expect(await failure(client.logEvents({ events: [{ type: "signup" }] }))).toMatchObject({
      code: Code.Unimplemented,
      stringCode: "not_configured",
    });
    await t.admin.updateApp({ appId: app.id, analyticsEnabled: true });
    await app.stop();
    expect(await failure(client.logEvents({ events: [{ type: "signup" }] }))).toMatchObject({
      code: Code.PermissionDenied,
      stringCode: "app_stopped",
    });
    expect(await failure(client.registerEventType({ name: "other" }))).toMatchObject({ code: Code.PermissionDenied });
    expect((await client.listEventTypes({})).types).toHaveLength(1);
    await client.queryEvents({ type: "signup", since: timestampFromMs(Date.now() - 3_600_000) });
    await app.start();
  });

  it("keeps apps apart", async () => {
    const a = await newClient();
    const b = await newClient("connect");
    await a.client.logEvents({ events: [{ type: "signup", at: timestampFromMs(T("2024-03-10T10:00:00Z")) }] });
    const range = {
      type: "signup",
      since: timestampFromMs(T("2024-03-10T00:00:00Z")),
      until: timestampFromMs(T("2024-03-11T00:00:00Z")),
    };
    expect((await b.client.queryEvents(range)).total).toBe(0n);
    expect((await a.client.queryEvents(range)).total).toBe(1n);
  });

  it("answers over gRPC-Web too", async () => {
    const { client } = await newClient("grpc-web");
    expect((await client.logEvents({ events: [{ type: "signup" }] })).recorded).toBe(1n);
  });
});

describe("AnalyticsService with an unreachable store", () => {
  let down: TestServer;
  beforeAll(async () => {
    down = await startServer({
      env: { MONGODB_URL: "mongodb://127.0.0.1:9/?serverSelectionTimeoutMS=300&connectTimeoutMS=300" },
    });
  });
  afterAll(async () => {
    await down?.close();
  });

  it("answers Unavailable upstream_error on log and query, and still registers and lists", async () => {
    const app = await down.createApp();
    const client = down.client(AnalyticsService, app.token, "grpc");
    await client.registerEventType({ name: "signup" });
    expect((await client.listEventTypes({})).types).toHaveLength(1);
    expect(await failure(client.logEvents({ events: [{ type: "signup" }] }))).toMatchObject({
      code: Code.Unavailable,
      stringCode: "upstream_error",
    });
    expect(
      await failure(client.queryEvents({ type: "signup", since: timestampFromMs(Date.now() - 3_600_000) })),
    ).toMatchObject({ code: Code.Unavailable });
  });
});
