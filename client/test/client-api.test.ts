/**
 * Every method of the client against the real service (a real server on a
 * real socket, real database): request and response shapes, the documented
 * extensions, and errors surfacing as `PlatformError` with the service's
 * code, details, Retry-After and request id.
 */
import { rejection, urlOf } from "./support.ts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fromJson } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { startServer, type TestApp, type TestServer } from "../../test/support/harness.ts";
import { createClient, type PlatformClient } from "../src/index.ts";

let t: TestServer;
let app: TestApp;
let client: PlatformClient;

beforeAll(async () => {
  t = await startServer();
  app = await t.createApp();
  client = createClient({ baseUrl: t.url, token: app.token });
});
afterAll(async () => {
  await client?.close();
  await t?.close();
});

describe("createClient", () => {
  it("reads PLATFORM_ANALYTICS_URL and PLATFORM_SERVICE_TOKEN from the environment", async () => {
    const saved = { url: process.env.PLATFORM_ANALYTICS_URL, token: process.env.PLATFORM_SERVICE_TOKEN };
    process.env.PLATFORM_ANALYTICS_URL = t.url + "/";
    process.env.PLATFORM_SERVICE_TOKEN = app.token;
    try {
      const fromEnv = createClient();
      expect(fromEnv.baseUrl).toBe(t.url);
      expect(Array.isArray(await fromEnv.queues.list())).toBe(true);
      await fromEnv.close();
    } finally {
      for (const [k, v] of [
        ["PLATFORM_ANALYTICS_URL", saved.url],
        ["PLATFORM_SERVICE_TOKEN", saved.token],
      ] as const) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
  });

  it("says which setting is missing", () => {
    const saved = { url: process.env.PLATFORM_ANALYTICS_URL, token: process.env.PLATFORM_SERVICE_TOKEN };
    delete process.env.PLATFORM_ANALYTICS_URL;
    delete process.env.PLATFORM_SERVICE_TOKEN;
    try {
      expect(() => createClient({ token: "x" })).toThrow(/PLATFORM_ANALYTICS_URL/);
      expect(() => createClient({ baseUrl: t.url })).toThrow(/PLATFORM_SERVICE_TOKEN/);
      expect(() => createClient({ baseUrl: "not a url", token: "x" })).toThrow(/not a URL/);
    } finally {
      if (saved.url !== undefined) process.env.PLATFORM_ANALYTICS_URL = saved.url;
      if (saved.token !== undefined) process.env.PLATFORM_SERVICE_TOKEN = saved.token;
    }
  });
});

describe("meta", () => {
  it("health and version", async () => {
    expect(await client.health()).toEqual({ status: "ok" });
    const v = await client.version();
    expect(v).toEqual({ name: expect.any(String), version: expect.stringMatching(/^\d+\.\d+\.\d+/) });
  });
});

describe("errors", () => {
  it("a refused token is PlatformError 401 unauthenticated with the request id", async () => {
    const bad = createClient({ baseUrl: t.url, token: "pbt_not-a-token" });
    const err = await rejection(bad.queues.list());
    expect(err.status).toBe(401);
    expect(err.code).toBe("unauthenticated");
    expect(err.message.length).toBeGreaterThan(0);
    expect(err.requestId).toMatch(/\S/);
    expect(err.name).toBe("PlatformError");
  });

  it("a 400 carries the service's details naming the field", async () => {
    const err = await rejection(client.analytics.registerType({ name: "Bad Name" }));
    expect(err.status).toBe(400);
    expect(err.code).toBe("invalid_argument");
    expect(err.details.join(" ")).toMatch(/name/);
  });

  it("a stopped app gets 403 app_stopped", async () => {
    const other = await t.createApp();
    const c = createClient({ baseUrl: t.url, token: other.token });
    await other.stop();
    const err = await rejection(c.queues.put("jobs", 1));
    expect([err.status, err.code]).toEqual([403, "app_stopped"]);
    await other.start();
    expect((await c.queues.put("jobs", 1)).queue).toBe("jobs");
  });

  it("putting on _events is 403 permission_denied", async () => {
    const err = await rejection(client.queues.put("_events", { kind: "x" }));
    expect([err.status, err.code]).toEqual([403, "permission_denied"]);
  });
});

describe("analytics", () => {
  it("registerType, listTypes, log, query (with groupBy and timezone)", async () => {
    const type = await client.analytics.registerType({
      name: "signup",
      properties: { plan: "string", seats: "number" },
    });
    expect(type).toEqual({
      name: "signup",
      properties: { plan: "string", seats: "number" },
      createdAt: expect.any(Number),
      updatedAt: expect.any(Number),
    });
    expect((await client.analytics.listTypes()).map((x) => x.name)).toContain("signup");

    const day = Date.UTC(2026, 0, 15);
    const logged = await client.analytics.log([
      { type: "signup", at: day + 1000, properties: { plan: "pro", seats: 3 } },
      { type: "signup", at: new Date(day + 2000), properties: { plan: "free" } },
      { type: "signup", at: "2026-01-15T10:00:00Z", properties: { plan: "pro" } },
    ]);
    expect(logged.recorded).toBe(3);
    expect(logged.remainingToday).toBe(100000 - 3);

    const q = await client.analytics.query({
      type: "signup",
      since: day,
      until: new Date(day + 86_400_000),
      interval: "day",
      groupBy: "plan",
    });
    expect(q).toEqual({
      type: "signup",
      interval: "day",
      since: day,
      until: day + 86_400_000,
      groupBy: "plan",
      buckets: [
        { at: day, group: "free", count: 1 },
        { at: day, group: "pro", count: 2 },
      ],
      total: 3,
    });
    // Extension: buckets in a time zone (midnight in Paris is 23:00 UTC the day before).
    const paris = await client.analytics.query({
      type: "signup",
      since: day - 86_400_000,
      until: day + 86_400_000,
      timezone: "Europe/Paris",
    });
    expect(paris.buckets).toEqual([{ at: day - 3_600_000, group: null, count: 3 }]);
  });

  it("an undeclared property is refused with a 400", async () => {
    const err = await rejection(client.analytics.log([{ type: "signup", properties: { nope: 1 } }]));
    expect(err.code).toBe("invalid_argument");
  });
});

describe("mail", () => {
  it("send from the app's address; 501 not_configured without one", async () => {
    const err = await rejection(client.mail.send({ to: "a@example.com", subject: "Hi", text: "Hello" }));
    expect([err.status, err.code]).toEqual([501, "not_configured"]);
    await t.admin.updateApp({ appId: app.id, mailFrom: "app@apps.example" });
    const sent = await client.mail.send({ to: "someone@example.com", subject: "Welcome", text: "Hello there" });
    expect(sent).toEqual({ sent: true, from: "app@apps.example", remainingToday: 99 });
    const { mails } = await t.admin.listMail({ appId: app.id });
    expect(mails.map((m) => [m.to, m.subject, m.text])).toEqual([["someone@example.com", "Welcome", "Hello there"]]);
  });
});

describe("inference", () => {
  it("models, generate (prompt and messages), embed", async () => {
    const models = await client.inference.models();
    expect(models.map((m) => [m.name, m.kind])).toEqual([
      ["platform/fast", "generate"],
      ["platform/embed", "embed"],
    ]);
    const g = await client.inference.generate({ prompt: "Say hello", maxTokens: 16 });
    expect(g).toEqual({
      text: expect.any(String),
      model: "platform/fast",
      finishReason: expect.stringMatching(/^(stop|length|other)$/),
      usage: { inputTokens: expect.any(Number), outputTokens: expect.any(Number) },
      remainingToday: expect.any(Number),
    });
    expect(g.text.length).toBeGreaterThan(0);
    const chat = await client.inference.generate({
      messages: [
        { role: "system", content: "Be brief" },
        { role: "user", content: "Hi" },
      ],
    });
    expect(chat.model).toBe("platform/fast");
    const e = await client.inference.embed({ input: ["one", "two"] });
    expect(e.embeddings).toHaveLength(2);
    expect(e.embeddings[0]).toHaveLength(e.dimensions);
    expect(e.model).toBe("platform/embed");
    expect(e.usage.tokens).toBeGreaterThan(0);
    const err = await rejection(client.inference.generate({ model: "platform/embed", prompt: "x" }));
    expect(err.code).toBe("invalid_argument");
  });
});

describe("queues", () => {
  it("put (with delaySeconds and ttlSeconds), list, consume, ack", async () => {
    const receipt = await client.queues.put("orders", { order: 1, items: ["a"] }, { ttlSeconds: 600 });
    expect(receipt).toEqual({ id: expect.any(String), queue: "orders", expiresAt: expect.any(Number) });
    expect(receipt.expiresAt).toBeLessThanOrEqual(Date.now() + 600_000 + 5000);
    await client.queues.put("orders", "later", { delaySeconds: 3600 });

    // A delayed message counts as waiting.
    const entry = (await client.queues.list()).find((q) => q.name === "orders");
    expect(entry).toEqual({
      name: "orders",
      depth: 2,
      inFlight: 0,
      maxDepth: 10000,
      oldestAt: expect.any(Number),
      deadLetters: 0,
    });

    const m = await client.queues.consume<{ order: number; items: string[] }>("orders", {
      waitSeconds: 0,
      leaseSeconds: 60,
    });
    expect(m).toEqual({
      id: receipt.id,
      queue: "orders",
      payload: { order: 1, items: ["a"] },
      receipt: expect.any(String),
      enqueuedAt: expect.any(Number),
      expiresAt: receipt.expiresAt,
      leaseExpiresAt: expect.any(Number),
      deliveries: 1,
    });
    expect(m!.leaseExpiresAt).toBeGreaterThan(Date.now() + 50_000);
    // The delayed message is not visible yet: an empty queue answers null.
    expect(await client.queues.consume("orders", { waitSeconds: 0 })).toBeNull();
    expect(await client.queues.ack(m!.receipt)).toBe(true);
    expect(await client.queues.ack(m!.receipt)).toBe(false);
    const err = await rejection(client.queues.ack(""));
    expect(err.code).toBe("invalid_argument");
  });

  it("consume long-polls and is woken by a put; an AbortSignal ends the wait", async () => {
    const waiting = client.queues.consume("wakeup", { waitSeconds: 20 });
    await client.queues.put("wakeup", { n: 1 });
    expect((await waiting)?.payload).toEqual({ n: 1 });

    const controller = new AbortController();
    const aborted = client.queues.consume("quiet", { waitSeconds: 20, signal: controller.signal });
    const started = Date.now();
    controller.abort(new Error("stop waiting"));
    await expect(aborted).rejects.toThrow("stop waiting");
    expect(Date.now() - started).toBeLessThan(5000);
  });

  it("a queue name with characters outside the pattern is a 400, not a different path", async () => {
    const err = await rejection(client.queues.put("../analytics/types", 1));
    expect(err.status).toBe(400);
  });
});

describe("secrets", () => {
  it("list, get, createLink; 409 secret_not_set and 404 not_found", async () => {
    await t.admin.declareSecrets({ appId: app.id, names: ["API_KEY", "UNSET"] });
    await t.admin.setSecret({ appId: app.id, name: "API_KEY", value: "k-1" });
    const listed = await client.secrets.list();
    expect(listed).toEqual([
      { name: "API_KEY", set: true, version: expect.any(Number), setAt: expect.any(Number) },
      { name: "UNSET", set: false, version: null, setAt: null },
    ]);
    const s = await client.secrets.get("API_KEY");
    expect(s).toEqual({ name: "API_KEY", value: "k-1", version: listed[0].version, setAt: listed[0].setAt });
    const unset = await rejection(client.secrets.get("UNSET"));
    expect([unset.status, unset.code]).toEqual([409, "secret_not_set"]);
    const undeclared = await rejection(client.secrets.get("NOPE"));
    expect([undeclared.status, undeclared.code]).toEqual([404, "not_found"]);
    const link = await client.secrets.createLink("UNSET");
    expect(link).toEqual({
      url: expect.stringContaining("/secret-links/"),
      name: "UNSET",
      expiresAt: expect.any(Number),
    });
    // The link sets the value; the client then reads it.
    // The server under test listens on a random port; its PUBLIC_URL does not know it.
    const res = await fetch(new URL(new URL(link.url).pathname, t.url), {
      method: "PUT",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ value: "from-link" }),
    });
    expect(res.status).toBeLessThan(300);
    expect((await client.secrets.get("UNSET")).value).toBe("from-link");
  });

  it("the cache serves a value without a call until the listing's version changes", async () => {
    await t.admin.declareSecrets({ appId: app.id, names: ["API_KEY", "UNSET", "ROTATED"] });
    await t.admin.setSecret({ appId: app.id, name: "ROTATED", value: "v1" });
    const paths: string[] = [];
    const counting: typeof fetch = (input, init) => {
      paths.push(`${init?.method ?? "GET"} ${new URL(urlOf(input)).pathname}`);
      return fetch(input, init);
    };
    const cached = createClient({ baseUrl: t.url, token: app.token, fetch: counting, secrets: { maxAgeMs: 60_000 } });
    expect((await cached.secrets.get("ROTATED")).value).toBe("v1");
    expect((await cached.secrets.get("ROTATED")).value).toBe("v1");
    expect(paths).toEqual(["GET /v1/secrets/ROTATED"]);

    const polling = createClient({ baseUrl: t.url, token: app.token, fetch: counting, secrets: { maxAgeMs: 0 } });
    paths.length = 0;
    expect((await polling.secrets.get("ROTATED")).value).toBe("v1");
    expect((await polling.secrets.get("ROTATED")).value).toBe("v1");
    // Same version in the listing: the value is not read again.
    expect(paths).toEqual(["GET /v1/secrets/ROTATED", "GET /v1/secrets"]);
    await t.admin.setSecret({ appId: app.id, name: "ROTATED", value: "v2" });
    paths.length = 0;
    expect((await polling.secrets.get("ROTATED")).value).toBe("v2");
    expect(paths).toEqual(["GET /v1/secrets", "GET /v1/secrets/ROTATED"]);
    // fresh: true skips the cache.
    expect((await cached.secrets.get("ROTATED", { fresh: true })).value).toBe("v2");
    await cached.close();
    await polling.close();
  });

  it("a secret.set platform event refreshes the cache at once (secrets.watch)", async () => {
    const other = await t.createApp();
    await t.admin.declareSecrets({ appId: other.id, names: ["TOKEN"] });
    await t.admin.setSecret({ appId: other.id, name: "TOKEN", value: "old" });
    const paths: string[] = [];
    const c = createClient({
      baseUrl: t.url,
      token: other.token,
      fetch: (input, init) => {
        paths.push(new URL(urlOf(input)).pathname);
        return fetch(input, init);
      },
      secrets: { maxAgeMs: 3_600_000 },
    });
    expect((await c.secrets.get("TOKEN")).value).toBe("old");
    const changed = new Promise<[string, number]>((resolve) => {
      c.secrets.watch({ onChange: (name, version) => resolve([name, version]) });
    });
    // The feed reads from "now": once it holds a cursor, every later event reaches it.
    await c.events.ready();
    const second = await t.admin.setSecret({ appId: other.id, name: "TOKEN", value: "new" });
    expect(await changed).toEqual(["TOKEN", Number(second.version)]);
    const reads = paths.filter((p) => p === "/v1/secrets/TOKEN").length;
    expect(reads).toBe(2);
    // Served from the refreshed cache: no further call.
    expect((await c.secrets.get("TOKEN")).value).toBe("new");
    expect(paths.filter((p) => p.startsWith("/v1/secrets")).length).toBe(2);
    await c.close();
    // Read from the feed: nothing of the _events queue was consumed (both sets' events wait there).
    const theirs = createClient({ baseUrl: t.url, token: other.token });
    const left = (await theirs.queues.list()).find((q) => q.name === "_events");
    expect([left?.depth ?? 0, left?.inFlight ?? 0]).toEqual([2, 0]);
  });
});

describe("events.on", () => {
  it("hands platform events of a kind to their handler, from the feed, consuming nothing", async () => {
    const other = await t.createApp();
    const c = createClient({ baseUrl: t.url, token: other.token });
    const seen: unknown[] = [];
    const got = new Promise<void>((resolve) => {
      c.events.on<{ version: string }>("deploy.done", (event) => {
        seen.push(event);
        if (seen.length === 2) resolve();
      });
    });
    const all: string[] = [];
    const unsubscribeAll = c.events.on("*", (event) => void all.push(event.kind));
    await c.events.ready();
    await t.admin.publishEvent({
      appId: other.id,
      kind: "deploy.done",
      data: fromJson(ValueSchema, { version: "1.2.3" }),
    });
    await t.admin.publishEvent({ appId: other.id, kind: "other.kind", data: fromJson(ValueSchema, null) });
    await t.admin.publishEvent({
      appId: other.id,
      kind: "deploy.done",
      data: fromJson(ValueSchema, { version: "1.2.4" }),
    });
    await got;
    expect(seen).toEqual([
      { kind: "deploy.done", at: expect.any(Number), data: { version: "1.2.3" }, cursor: expect.any(String) },
      { kind: "deploy.done", at: expect.any(Number), data: { version: "1.2.4" }, cursor: expect.any(String) },
    ]);
    expect(all).toEqual(["deploy.done", "other.kind", "deploy.done"]);
    unsubscribeAll();
    await c.events.stop();
    const left = (await c.queues.list()).find((q) => q.name === "_events");
    expect([left?.depth ?? 0, left?.inFlight ?? 0]).toEqual([3, 0]);

    // A subscription after a stop starts a new loop.
    const again = new Promise<unknown>((resolve) => c.events.on("later", (event) => resolve(event.data)));
    await c.events.ready();
    await t.admin.publishEvent({ appId: other.id, kind: "later", data: fromJson(ValueSchema, 42) });
    expect(await again).toBe(42);
    await c.close();
  });
});
