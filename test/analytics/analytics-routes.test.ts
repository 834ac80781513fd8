/**
 * The analytics facility over REST (docs/api.md#analytics), on this
 * run's database with the default SQL event store.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startServer, useTestServer, type TestApp, type TestServer } from "../support/harness.ts";
import { T } from "./store-cases.ts";

const t = useTestServer();

const HOUR = 3_600_000;
/** A since that spans only a few day buckets up to now. */
const RECENT = Date.now() - 2 * 86_400_000;

function api(app: TestApp) {
  return {
    register: (name: string, properties?: Record<string, string>) =>
      t.request("POST", "/v1/analytics/types", {
        token: app.token,
        body: properties === undefined ? { name } : { name, properties },
      }),
    list: () => t.request("GET", "/v1/analytics/types", { token: app.token }),
    log: (events: unknown[]) => t.request("POST", "/v1/analytics/events", { token: app.token, body: { events } }),
    query: (body: Record<string, unknown>) => t.request("POST", "/v1/analytics/query", { token: app.token, body }),
  };
}

async function newApp(types: Record<string, Record<string, string>> = {}) {
  const app = await t.createApp();
  const a = api(app);
  for (const [name, properties] of Object.entries(types)) expect((await a.register(name, properties)).status).toBe(200);
  return { app, ...a };
}

describe("POST /v1/analytics/types", () => {
  it("registers a type and answers it as it now stands", async () => {
    const { register } = await newApp();
    const before = Date.now();
    const res = await register("signup", { plan: "string", seats: "number", paid: "boolean" });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      name: "signup",
      properties: { plan: "string", seats: "number", paid: "boolean" },
      createdAt: expect.any(Number),
      updatedAt: expect.any(Number),
    });
    expect(res.body.createdAt).toBeGreaterThanOrEqual(before - 1000);
  });

  it("defaults properties to {}", async () => {
    const { register } = await newApp();
    const res = await register("pageview");
    expect(res.status).toBe(200);
    expect(res.body.properties).toEqual({});
  });

  it("is idempotent: registering again replaces the properties and keeps createdAt", async () => {
    const { register, list } = await newApp();
    const first = await register("signup", { plan: "string" });
    const second = await register("signup", { country: "string" });
    expect(second.status).toBe(200);
    expect(second.body.properties).toEqual({ country: "string" });
    expect(second.body.createdAt).toBe(first.body.createdAt);
    expect(second.body.updatedAt).toBeGreaterThanOrEqual(first.body.updatedAt);
    const again = await register("signup", { country: "string" });
    expect(again.body.properties).toEqual({ country: "string" });
    expect((await list()).body.types).toHaveLength(1);
  });

  it.each([
    [{ name: "Signup" }, "name"],
    [{ name: "" }, "name"],
    [{}, "name"],
    [{ name: 5 }, "name"],
    [{ name: "a".repeat(64) }, "name"],
    [{ name: "signup", properties: { Plan: "string" } }, "properties.Plan"],
    [{ name: "signup", properties: { plan: "integer" } }, "properties.plan"],
    [{ name: "signup", properties: { plan: 1 } }, "properties.plan"],
    [{ name: "signup", properties: ["plan"] }, "properties"],
  ])("refuses %j with 400 naming %s", async (body, field) => {
    const { app } = await newApp();
    const res = await t.request("POST", "/v1/analytics/types", { token: app.token, body });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe("invalid_argument");
    expect(res.body.error.message.startsWith(`${field}:`)).toBe(true);
  });

  it("refuses a property named __proto__ instead of dropping it", async () => {
    const { app } = await newApp();
    const res = await t.request("POST", "/v1/analytics/types", {
      token: app.token,
      body: '{"name":"signup","properties":{"__proto__":"string"}}',
    });
    expect(res.status).toBe(400);
    expect(res.body.error.message).toMatch(/^properties\.__proto__: /);
  });

  it("refuses more than 64 properties", async () => {
    const { register } = await newApp();
    const properties = Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`p${i}`, "string"]));
    expect((await register("wide", properties)).status).toBe(400);
  });
});

describe("GET /v1/analytics/types", () => {
  it("lists every registered type of the app, by name", async () => {
    const { list } = await newApp({ signup: { plan: "string" }, checkout: { amount: "number" } });
    const res = await list();
    expect(res.status).toBe(200);
    expect(res.body.types.map((x: { name: string }) => x.name)).toEqual(["checkout", "signup"]);
    expect(res.body.types[0]).toEqual({
      name: "checkout",
      properties: { amount: "number" },
      createdAt: expect.any(Number),
      updatedAt: expect.any(Number),
    });
  });
});

describe("POST /v1/analytics/events", () => {
  it("stores a batch and answers recorded and remainingToday", async () => {
    const { log } = await newApp({ signup: { plan: "string" } });
    const res = await log([
      { type: "signup", properties: { plan: "pro" } },
      { type: "signup" },
      { type: "signup", properties: {} },
    ]);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ recorded: 3, remainingToday: 100_000 - 3 });
  });

  it("takes at as epoch ms or ISO 8601 ending in Z, and now when left out", async () => {
    const { log, query } = await newApp({ signup: {} });
    const now = Date.now();
    expect(
      (
        await log([
          { type: "signup", at: T("2024-02-29T12:00:00Z") },
          { type: "signup", at: "2024-02-29T13:30:00.250Z" },
          { type: "signup", at: "2024-02-29T14:00Z" },
        ])
      ).status,
    ).toBe(200);
    expect((await log([{ type: "signup" }])).status).toBe(200);
    const past = await query({
      type: "signup",
      since: "2024-02-29T00:00:00Z",
      until: "2024-03-01T00:00:00Z",
      interval: "hour",
    });
    expect(past.body.buckets).toEqual([
      { at: T("2024-02-29T12:00:00Z"), group: null, count: 1 },
      { at: T("2024-02-29T13:00:00Z"), group: null, count: 1 },
      { at: T("2024-02-29T14:00:00Z"), group: null, count: 1 },
    ]);
    const recent = await query({ type: "signup", since: now - HOUR, until: Date.now() + 1000 });
    expect(recent.body.total).toBe(1);
  });

  it("accepts at up to 24 h ahead and refuses it beyond", async () => {
    const { log } = await newApp({ signup: {} });
    expect((await log([{ type: "signup", at: Date.now() + 24 * HOUR - 60_000 }])).status).toBe(200);
    const res = await log([{ type: "signup" }, { type: "signup", at: Date.now() + 24 * HOUR + 60_000 }]);
    expect(res.status).toBe(400);
    expect(res.body.error.message).toMatch(/^events\[1\]\.at: /);
  });

  it.each([
    ["a time without Z", "2024-02-29T12:00:00+01:00"],
    ["a date only", "2024-02-29"],
    ["an impossible date", "2023-02-29T12:00:00Z"],
    ["a fraction of a millisecond as a number", 1.5],
    ["a boolean", true],
  ])("refuses at as %s with 400 naming the event", async (_, at) => {
    const { log } = await newApp({ signup: {} });
    const res = await log([{ type: "signup" }, { type: "signup", at }]);
    expect(res.status).toBe(400);
    expect(res.body.error.message).toMatch(/^events\[1\]\.at: /);
  });

  it("refuses an empty batch and one of more than 1000 events", async () => {
    const { log } = await newApp({ signup: {} });
    const empty = await log([]);
    expect(empty.status).toBe(400);
    expect(empty.body.error.message).toMatch(/^events: /);
    expect((await log(Array.from({ length: 1001 }, () => ({ type: "signup" })))).status).toBe(400);
    const full = await log(Array.from({ length: 1000 }, () => ({ type: "signup" })));
    expect(full.body).toEqual({ recorded: 1000, remainingToday: 100_000 - 1000 });
  });

  it("refuses a body without an events array", async () => {
    const { app } = await newApp({ signup: {} });
    for (const body of [{}, { events: "x" }, { events: {} }, [1]]) {
      const res = await t.request("POST", "/v1/analytics/events", { token: app.token, body });
      expect(res.status).toBe(400);
    }
    const notObject = await t.request("POST", "/v1/analytics/events", {
      token: app.token,
      body: { events: [{ type: "signup" }, 5] },
    });
    expect(notObject.body.error.message).toMatch(/^events\[1\]: /);
  });

  it.each([
    ["an unregistered type", { type: "nope" }, "events[3].type: "],
    ["a type that breaks the name pattern", { type: "Nope" }, "events[3].type: "],
    ["an undeclared property", { type: "signup", properties: { coupon: "x" } }, "events[3].properties.coupon: "],
    [
      "a number for a string property",
      { type: "signup", properties: { plan: 3 } },
      "events[3].properties.plan: must be a string",
    ],
    [
      "a string for a number property",
      { type: "signup", properties: { seats: "3" } },
      "events[3].properties.seats: must be a number",
    ],
    [
      "a string for a boolean property",
      { type: "signup", properties: { paid: "true" } },
      "events[3].properties.paid: must be a boolean",
    ],
    ["null as a value", { type: "signup", properties: { plan: null } }, "events[3].properties.plan: "],
    ["an object as a value", { type: "signup", properties: { plan: { a: 1 } } }, "events[3].properties.plan: "],
    ["a value with NUL", { type: "signup", properties: { plan: "a\u0000b" } }, "events[3].properties.plan: "],
    ["a lone surrogate", { type: "signup", properties: { plan: "\ud800" } }, "events[3].properties.plan: "],
    [
      "a value over 1024 bytes",
      { type: "signup", properties: { plan: "é".repeat(513) } },
      "events[3].properties.plan: ",
    ],
    ["properties that are not an object", { type: "signup", properties: [1] }, "events[3].properties: "],
  ])("refuses the whole batch for %s, naming the first bad event by index", async (_, bad, prefix) => {
    const { log, query } = await newApp({ signup: { plan: "string", seats: "number", paid: "boolean" } });
    const good = { type: "signup", at: T("2024-03-10T10:00:00Z"), properties: { plan: "pro", seats: 3, paid: true } };
    const res = await log([good, good, good, { at: T("2024-03-10T10:00:00Z"), ...bad }, { type: "nope" }]);
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe("invalid_argument");
    expect(res.body.error.message.startsWith(prefix)).toBe(true);
    // Nothing of the batch was stored, and nothing of the allowance spent.
    const counted = await query({ type: "signup", since: "2024-03-10T00:00:00Z", until: "2024-03-11T00:00:00Z" });
    expect(counted.body.total).toBe(0);
    expect((await log([good])).body.remainingToday).toBe(100_000 - 1);
  });

  it("refuses an event property named __proto__", async () => {
    const { app } = await newApp({ signup: {} });
    const body = '{"events":[{"type":"signup","properties":{"__proto__":"x"}}]}';
    const res = await t.request("POST", "/v1/analytics/events", { token: app.token, body });
    expect(res.status).toBe(400);
    expect(res.body.error.message).toMatch(/^events\[0\]\.properties\.__proto__: is not declared/);
  });

  it('stores values as strings: numbers and booleans group as "3" and "true"', async () => {
    const { log, query } = await newApp({ signup: { seats: "number", paid: "boolean", ratio: "number" } });
    const at = T("2024-03-10T10:00:00Z");
    await log([
      { type: "signup", at, properties: { seats: 3, paid: true, ratio: 0.5 } },
      { type: "signup", at, properties: { seats: 3, paid: false, ratio: -2 } },
      { type: "signup", at, properties: { seats: 10, paid: true } },
    ]);
    const range = { type: "signup", since: "2024-03-10T00:00:00Z", until: "2024-03-11T00:00:00Z" };
    expect((await query({ ...range, groupBy: "seats" })).body.buckets).toEqual([
      { at: T("2024-03-10T00:00:00Z"), group: "10", count: 1 },
      { at: T("2024-03-10T00:00:00Z"), group: "3", count: 2 },
    ]);
    expect((await query({ ...range, groupBy: "paid" })).body.buckets).toEqual([
      { at: T("2024-03-10T00:00:00Z"), group: "false", count: 1 },
      { at: T("2024-03-10T00:00:00Z"), group: "true", count: 2 },
    ]);
    expect((await query({ ...range, groupBy: "ratio" })).body.buckets).toEqual([
      { at: T("2024-03-10T00:00:00Z"), group: null, count: 1 },
      { at: T("2024-03-10T00:00:00Z"), group: "-2", count: 1 },
      { at: T("2024-03-10T00:00:00Z"), group: "0.5", count: 1 },
    ]);
  });

  it("follows a type replaced between two batches", async () => {
    const { register, log, query } = await newApp({ signup: { plan: "string" } });
    const at = T("2024-03-10T10:00:00Z");
    expect((await log([{ type: "signup", at, properties: { plan: "pro" } }])).status).toBe(200);
    await register("signup", { country: "string" });
    const old = await log([{ type: "signup", at, properties: { plan: "pro" } }]);
    expect(old.status).toBe(400);
    expect(old.body.error.message).toMatch(/^events\[0\]\.properties\.plan: is not declared/);
    expect((await log([{ type: "signup", at, properties: { country: "de" } }])).status).toBe(200);
    const range = { type: "signup", since: "2024-03-10T00:00:00Z", until: "2024-03-11T00:00:00Z" };
    expect((await query({ ...range, groupBy: "country" })).body.buckets).toEqual([
      { at: T("2024-03-10T00:00:00Z"), group: null, count: 1 },
      { at: T("2024-03-10T00:00:00Z"), group: "de", count: 1 },
    ]);
    expect((await query({ ...range, groupBy: "plan" })).status).toBe(400);
    // Changing the kind of a property: later events must use the new kind.
    await register("signup", { country: "number" });
    expect((await log([{ type: "signup", at, properties: { country: "de" } }])).status).toBe(400);
    expect((await log([{ type: "signup", at, properties: { country: 49 } }])).status).toBe(200);
  });

  it("records exactly the cap when 200 single events race against a cap of 100", async () => {
    const { app, log, query } = await newApp({ signup: {} });
    await t.admin.updateApp({ appId: app.id, limits: { eventsPerDay: 100 } });
    const results = await Promise.all(Array.from({ length: 200 }, () => log([{ type: "signup" }])));
    const ok = results.filter((r) => r.status === 200);
    const refused = results.filter((r) => r.status === 429);
    expect(ok).toHaveLength(100);
    expect(refused).toHaveLength(100);
    expect(refused[0].body.error.code).toBe("quota_exceeded");
    expect(Number(refused[0].headers.get("retry-after"))).toBeGreaterThan(0);
    expect(ok.map((r) => r.body.remainingToday).sort((a, b) => a - b)).toEqual(
      Array.from({ length: 100 }, (_, i) => i),
    );
    const counted = await query({ type: "signup", since: Date.now() - 2 * HOUR, until: Date.now() + 1000 });
    expect(counted.body.total).toBe(100);
  });

  it("refuses a batch that does not fit the cap whole", async () => {
    const { app, log, query } = await newApp({ signup: {} });
    await t.admin.updateApp({ appId: app.id, limits: { eventsPerDay: 10 } });
    expect((await log(Array.from({ length: 8 }, () => ({ type: "signup" })))).body).toEqual({
      recorded: 8,
      remainingToday: 2,
    });
    const over = await log(Array.from({ length: 3 }, () => ({ type: "signup" })));
    expect(over.status).toBe(429);
    expect(over.body.error.code).toBe("quota_exceeded");
    expect((await log(Array.from({ length: 2 }, () => ({ type: "signup" })))).body).toEqual({
      recorded: 2,
      remainingToday: 0,
    });
    expect((await log([{ type: "signup" }])).status).toBe(429);
    expect((await query({ type: "signup", since: Date.now() - HOUR, until: Date.now() + 1000 })).body.total).toBe(10);
  });

  it("answers 501 not_configured when the app's analytics is disabled; types still work", async () => {
    const { app, log, query, register, list } = await newApp({ signup: {} });
    await t.admin.updateApp({ appId: app.id, analyticsEnabled: false });
    const logged = await log([{ type: "signup" }]);
    expect(logged.status).toBe(501);
    expect(logged.body.error.code).toBe("not_configured");
    expect((await query({ type: "signup", since: RECENT })).status).toBe(501);
    expect((await register("checkout", {})).status).toBe(200);
    expect((await list()).status).toBe(200);
    await t.admin.updateApp({ appId: app.id, analyticsEnabled: true });
    expect((await log([{ type: "signup" }])).body.remainingToday).toBe(100_000 - 1);
  });

  it("answers 403 to a stopped app on register and log only", async () => {
    const { app, log, query, register, list } = await newApp({ signup: {} });
    await app.stop();
    expect((await register("other", {})).status).toBe(403);
    const logged = await log([{ type: "signup" }]);
    expect(logged.status).toBe(403);
    expect(logged.body.error.code).toBe("app_stopped");
    expect((await list()).status).toBe(200);
    expect((await query({ type: "signup", since: RECENT })).status).toBe(200);
    await app.start();
  });
});

describe("POST /v1/analytics/query", () => {
  it("answers the documented shape, with defaults interval day and until now", async () => {
    const { log, query } = await newApp({ signup: { plan: "string" } });
    await log([{ type: "signup", properties: { plan: "pro" } }]);
    const since = Date.now() - 3 * 86_400_000;
    const before = Date.now();
    const res = await query({ type: "signup", since });
    expect(res.status).toBe(200);
    const day = Math.floor(Date.now() / 86_400_000) * 86_400_000;
    expect(res.body).toEqual({
      type: "signup",
      interval: "day",
      since,
      until: expect.any(Number),
      groupBy: null,
      buckets: [{ at: day, group: null, count: 1 }],
      total: 1,
    });
    expect(res.body.until).toBeGreaterThanOrEqual(before);
  });

  it("counts events in [since, until) in calendar buckets, sorted by at then group with null first", async () => {
    const { log, query } = await newApp({ signup: { plan: "string" } });
    await log([
      { type: "signup", at: "2024-02-28T23:59:59.999Z", properties: { plan: "pro" } },
      { type: "signup", at: "2024-02-29T00:00:00Z", properties: { plan: "pro" } },
      { type: "signup", at: "2024-02-29T10:00:00Z" },
      { type: "signup", at: "2024-02-29T23:59:59.999Z", properties: { plan: "basic" } },
      { type: "signup", at: "2024-03-01T00:00:00Z", properties: { plan: "team" } },
      { type: "signup", at: "2024-03-04T00:00:00Z", properties: { plan: "team" } },
    ]);
    const res = await query({
      type: "signup",
      since: "2024-02-28T23:59:59.999Z",
      until: "2024-03-04T00:00:00Z",
      groupBy: "plan",
    });
    expect(res.body.buckets).toEqual([
      { at: T("2024-02-28T00:00:00Z"), group: "pro", count: 1 },
      { at: T("2024-02-29T00:00:00Z"), group: null, count: 1 },
      { at: T("2024-02-29T00:00:00Z"), group: "basic", count: 1 },
      { at: T("2024-02-29T00:00:00Z"), group: "pro", count: 1 },
      { at: T("2024-03-01T00:00:00Z"), group: "team", count: 1 },
    ]);
    expect(res.body.total).toBe(5);
    expect(res.body.groupBy).toBe("plan");
    const weeks = await query({
      type: "signup",
      since: "2024-02-01T00:00:00Z",
      until: "2024-04-01T00:00:00Z",
      interval: "week",
    });
    // 2024-02-26 and 2024-03-04 are Mondays.
    expect(weeks.body.buckets).toEqual([
      { at: T("2024-02-26T00:00:00Z"), group: null, count: 5 },
      { at: T("2024-03-04T00:00:00Z"), group: null, count: 1 },
    ]);
    const months = await query({
      type: "signup",
      since: "2024-02-01T00:00:00Z",
      until: "2024-04-01T00:00:00Z",
      interval: "month",
    });
    expect(months.body.buckets).toEqual([
      { at: T("2024-02-01T00:00:00Z"), group: null, count: 4 },
      { at: T("2024-03-01T00:00:00Z"), group: null, count: 2 },
    ]);
    const hours = await query({
      type: "signup",
      since: "2024-02-29T00:00:00Z",
      until: "2024-02-29T11:00:00Z",
      interval: "hour",
    });
    expect(hours.body.buckets).toEqual([
      { at: T("2024-02-29T00:00:00Z"), group: null, count: 1 },
      { at: T("2024-02-29T10:00:00Z"), group: null, count: 1 },
    ]);
  });

  it("buckets by local calendar with the timezone extension (Europe/Berlin across DST)", async () => {
    const { log, query } = await newApp({ signup: {} });
    await log([
      { type: "signup", at: "2024-03-30T22:59:00Z" },
      { type: "signup", at: "2024-03-30T23:00:00Z" },
      { type: "signup", at: "2024-03-31T21:59:00Z" },
      { type: "signup", at: "2024-03-31T22:00:00Z" },
    ]);
    const res = await query({
      type: "signup",
      since: "2024-03-29T00:00:00Z",
      until: "2024-04-02T00:00:00Z",
      timezone: "Europe/Berlin",
    });
    expect(res.status).toBe(200);
    expect(res.body.buckets).toEqual([
      { at: T("2024-03-29T23:00:00Z"), group: null, count: 1 },
      { at: T("2024-03-30T23:00:00Z"), group: null, count: 2 },
      { at: T("2024-03-31T22:00:00Z"), group: null, count: 1 },
    ]);
    const kolkata = await query({
      type: "signup",
      since: "2024-03-29T00:00:00Z",
      until: "2024-04-02T00:00:00Z",
      timezone: "Asia/Kolkata",
    });
    expect(kolkata.body.buckets).toEqual([
      { at: T("2024-03-30T18:30:00Z"), group: null, count: 2 },
      { at: T("2024-03-31T18:30:00Z"), group: null, count: 2 },
    ]);
  });

  it.each([
    ["an unknown type", { type: "nope", since: RECENT }, "type"],
    ["a type breaking the name pattern", { type: "No", since: RECENT }, "type"],
    ["a missing type", { since: RECENT }, "type"],
    ["an undeclared groupBy", { type: "signup", since: RECENT, groupBy: "country" }, "groupBy"],
    ["a missing since", { type: "signup" }, "since"],
    ["since equal to until", { type: "signup", since: 1000, until: 1000 }, "since"],
    ["since after until", { type: "signup", since: 2000, until: 1000 }, "since"],
    [
      "more than 1000 buckets",
      { type: "signup", since: "2024-01-01T00:00:00Z", until: "2024-02-12T16:00:00Z", interval: "hour" },
      "since",
    ],
    [
      "more than 1000 day buckets",
      { type: "signup", since: "2020-01-01T00:00:00Z", until: "2023-01-01T00:00:00Z" },
      "since",
    ],
    ["an unknown interval", { type: "signup", since: RECENT, interval: "minute" }, "interval"],
    ["a malformed since", { type: "signup", since: "yesterday" }, "since"],
    ["a malformed until", { type: "signup", since: RECENT, until: "2024-01-01" }, "until"],
    ["an unknown time zone", { type: "signup", since: RECENT, timezone: "Mars/Olympus" }, "timezone"],
    ["an offset instead of a zone", { type: "signup", since: RECENT, timezone: "+03:00" }, "timezone"],
    [
      "a time zone on hour buckets",
      { type: "signup", since: 0, until: 3_600_000, interval: "hour", timezone: "Europe/Berlin" },
      "timezone",
    ],
    ["a non-string groupBy", { type: "signup", since: RECENT, groupBy: 3 }, "groupBy"],
  ])("answers 400 for %s", async (_, body, field) => {
    const { query } = await newApp({ signup: { plan: "string" } });
    const res = await query(body);
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe("invalid_argument");
    expect(res.body.error.message.startsWith(`${field}:`)).toBe(true);
  });

  it("allows exactly 1000 buckets", async () => {
    const { query } = await newApp({ signup: {} });
    const res = await query({
      type: "signup",
      since: "2024-01-01T00:00:00Z",
      until: "2024-02-11T16:00:00Z",
      interval: "hour",
    });
    expect(res.status).toBe(200);
  });
});

describe("tenant isolation", () => {
  it("keeps types and events of one app away from another", async () => {
    const a = await newApp({ signup: { plan: "string" } });
    const b = await newApp();
    await a.log([{ type: "signup", at: "2024-03-10T10:00:00Z", properties: { plan: "pro" } }]);
    expect((await b.list()).body.types).toEqual([]);
    const unknown = await b.log([{ type: "signup" }]);
    expect(unknown.status).toBe(400);
    expect((await b.query({ type: "signup", since: RECENT })).status).toBe(400);
    // Same type name in b: a's events are not counted.
    await b.register("signup", { plan: "string" });
    await b.log([{ type: "signup", at: "2024-03-10T11:00:00Z", properties: { plan: "basic" } }]);
    const range = { type: "signup", since: "2024-03-10T00:00:00Z", until: "2024-03-11T00:00:00Z", groupBy: "plan" };
    expect((await a.query(range)).body.buckets).toEqual([{ at: T("2024-03-10T00:00:00Z"), group: "pro", count: 1 }]);
    expect((await b.query(range)).body.buckets).toEqual([{ at: T("2024-03-10T00:00:00Z"), group: "basic", count: 1 }]);
    // Replacing b's type leaves a's alone.
    await b.register("signup", {});
    expect((await a.list()).body.types[0].properties).toEqual({ plan: "string" });
  });
});

describe("an unreachable analytics store", () => {
  let down: TestServer;
  beforeAll(async () => {
    // MongoDB configured where nothing listens: events fail, types do not.
    down = await startServer({
      env: { MONGODB_URL: "mongodb://127.0.0.1:9/?serverSelectionTimeoutMS=300&connectTimeoutMS=300" },
    });
  });
  afterAll(async () => {
    await down?.close();
  });

  it("answers 502 upstream_error on log and query, spends nothing, and still registers and lists types", async () => {
    const app = await down.createApp();
    const call = (method: string, path: string, body?: unknown) =>
      down.request(method, path, { token: app.token, body });
    expect((await call("POST", "/v1/analytics/types", { name: "signup" })).status).toBe(200);
    expect((await call("GET", "/v1/analytics/types")).body.types).toHaveLength(1);
    const logged = await call("POST", "/v1/analytics/events", { events: [{ type: "signup" }] });
    expect(logged.status).toBe(502);
    expect(logged.body.error.code).toBe("upstream_error");
    expect(JSON.stringify(logged.body)).not.toContain("127.0.0.1");
    const queried = await call("POST", "/v1/analytics/query", { type: "signup", since: RECENT });
    expect(queried.status).toBe(502);
    const usage = await down.admin.getUsage({ appId: app.id });
    expect(Number(usage.events?.used ?? 0)).toBe(0);
  });
});
