/**
 * The queues screen's server side, over Connect against
 * the real server on both backends: hourly put and ack counts per queue
 * (GetQueueActivity), exact through single and batch puts, batch consumes and
 * racing acks, zero-filled, per app; a test message put by an operator
 * (PutTestMessage: admin only, audited as `queue.put`, `_events` refused);
 * and peek paging (PeekMessages page_token / next_page_token).
 */
import { describe, expect, it } from "vitest";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { fromJson, type JsonValue } from "@bufbuild/protobuf";
import { ValueSchema, timestampDate } from "@bufbuild/protobuf/wkt";
import { sql } from "kysely";
import { AdminService, OperatorRole } from "../../gen/platform/admin/v1/admin_pb.js";
import { createQueueStore } from "../../src/queues/queue-store.ts";
import { transportFor, useTestServer } from "../support/harness.ts";

const t = useTestServer();

async function failure(p: Promise<unknown>): Promise<ConnectError> {
  try {
    await p;
  } catch (err) {
    return ConnectError.from(err);
  }
  throw new Error("expected the call to fail");
}

async function activity(appId: string, queue: string) {
  const { hours } = await t.admin.getQueueActivity({ appId, queue });
  return hours.map((h) => ({ at: timestampDate(h.at!).getTime(), puts: Number(h.puts), acks: Number(h.acks) }));
}

const json = (v: JsonValue) => fromJson(ValueSchema, v);

const total = (hours: { puts: number; acks: number }[]) => ({
  puts: hours.reduce((n, h) => n + h.puts, 0),
  acks: hours.reduce((n, h) => n + h.acks, 0),
});

describe("GetQueueActivity", () => {
  it("counts puts and acks exactly: single and batch puts, batch consumes, racing acks; purges are not acks", async () => {
    const app = await t.createApp();
    const other = await t.createApp();
    for (let i = 0; i < 3; i++)
      expect((await t.request("POST", "/v1/queues/jobs", { token: app.token, body: { payload: { i } } })).status).toBe(
        200,
      );
    const batch = await t.request("POST", "/v1/queues/jobs/batch", {
      token: app.token,
      body: { messages: Array.from({ length: 50 }, (_, i) => ({ payload: { b: i } })) },
    });
    expect(batch.status).toBe(200);
    // Another app's queue of the same name counts apart.
    await t.request("POST", "/v1/queues/jobs", { token: other.token, body: { payload: json(1) } });

    const consumed = await t.request("POST", "/v1/queues/jobs/consume", {
      token: app.token,
      body: { max: 30, waitSeconds: 0 },
    });
    const receipts: string[] = consumed.body.messages.map((m: { receipt: string }) => m.receipt);
    expect(receipts).toHaveLength(30);
    // Every receipt acked three times at once (single and batch acks racing): 30 acks, no more.
    const acks = await Promise.all([
      ...receipts.map((receipt) => t.request("POST", "/v1/queues/_ack", { token: app.token, body: { receipt } })),
      ...receipts.map((receipt) => t.request("POST", "/v1/queues/_ack", { token: app.token, body: { receipt } })),
      t.request("POST", "/v1/queues/_ack", { token: app.token, body: { receipts } }),
    ]);
    const told = acks.flatMap((r) => (r.body.acked === true || r.body.acked === false ? [r.body.acked] : r.body.acked));
    expect(told.filter((x: boolean) => x)).toHaveLength(30);
    // The rest are removed without an ack.
    expect(Number((await t.admin.purgeQueue({ appId: app.id, queue: "jobs" })).purged)).toBe(23);

    const hours = await activity(app.id, "jobs");
    expect(total(hours)).toEqual({ puts: 53, acks: 30 });
    expect(total(await activity(other.id, "jobs"))).toEqual({ puts: 1, acks: 0 });
    expect(total(await activity(app.id, "nothing-here"))).toEqual({ puts: 0, acks: 0 });
  });

  it("counts racing puts from many connections exactly, and a refused put not at all", async () => {
    const app = await t.createApp();
    await t.admin.updateApp({ appId: app.id, limits: { maxQueueDepth: 150 } });
    // 200 at once: batched into shared statements below the cap, serialised near it; 150 fit.
    const puts = await Promise.all(
      Array.from({ length: 200 }, (_, i) =>
        t.request("POST", "/v1/queues/crowd", { token: app.token, body: { payload: { i } } }),
      ),
    );
    const ok = puts.filter((r) => r.status === 200).length;
    expect(ok).toBe(150);
    expect(puts.filter((r) => r.status !== 200).every((r) => r.status === 429 || r.status === 409)).toBe(true);
    // A whole batch refused (it does not fit) adds nothing.
    const batch = await t.request("POST", "/v1/queues/crowd/batch", {
      token: app.token,
      body: { messages: [{ payload: 1 }, { payload: 2 }] },
    });
    expect(batch.status).not.toBe(200);
    expect(total(await activity(app.id, "crowd"))).toEqual({ puts: 150, acks: 0 });
  });

  it("answers 24 whole UTC hours, oldest first, the current one last, zero-filled", async () => {
    const app = await t.createApp();
    await t.request("POST", "/v1/queues/hours", { token: app.token, body: { payload: "x" } });
    // Counts of 5 and 30 hours ago (as kept by an earlier day's traffic).
    const db = t.server.deps.db;
    for (const ago of [5, 30])
      await sql`
        INSERT INTO queue_activity (app_id, queue, hour, slot, puts, acks)
        VALUES (${app.id}, 'hours', date_trunc('hour', now(), 'UTC') - make_interval(hours => ${ago}), 3, 7, 2)`.execute(
        db,
      );
    const before = Date.now();
    const hours = await activity(app.id, "hours");
    expect(hours).toHaveLength(24);
    for (const [i, h] of hours.entries()) {
      expect(h.at % 3_600_000).toBe(0);
      if (i > 0) expect(h.at - hours[i - 1].at).toBe(3_600_000);
    }
    const current = Math.floor(before / 3_600_000) * 3_600_000;
    expect([current, current + 3_600_000]).toContain(hours[23].at);
    // The hour turning during the test moves the put one place; the sums hold either way.
    expect(hours.filter((h) => h.puts + h.acks > 0)).toHaveLength(2);
    expect(hours[23 - 5]).toMatchObject({ puts: 7, acks: 2 });
    expect(total(hours)).toEqual({ puts: 8, acks: 2 });

    // Housekeeping prunes hours older than it keeps (48), not younger ones.
    await sql`
      INSERT INTO queue_activity (app_id, queue, hour, slot, puts, acks)
      VALUES (${app.id}, 'hours', date_trunc('hour', now(), 'UTC') - interval '50 hours', 0, 1, 1)`.execute(db);
    const store = createQueueStore(t.server.deps.db);
    expect(await store.pruneActivity({ keepHours: 48, limit: 1000 })).toBeGreaterThanOrEqual(1);
    const { rows } = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM queue_activity WHERE app_id = ${app.id}`.execute(db);
    expect(rows[0].n).toBe(3);
  });

  it("refuses a bad queue name and an unknown app", async () => {
    const app = await t.createApp();
    const bad = await failure(t.admin.getQueueActivity({ appId: app.id, queue: "Bad Name" }));
    expect(bad.code).toBe(Code.InvalidArgument);
    expect(bad.rawMessage).toMatch(/^queue: /);
    expect(
      (await failure(t.admin.getQueueActivity({ appId: "00000000-0000-0000-0000-000000000000", queue: "q" }))).code,
    ).toBe(Code.NotFound);
  });
});

describe("PutTestMessage", () => {
  it("puts as the app would: a consumer of the app gets it; audited as queue.put with the operator", async () => {
    const app = await t.createApp();
    const { id } = await t.admin.putTestMessage({
      appId: app.id,
      queue: "tests",
      payload: json({ hello: "operator" }),
    });
    const consumed = await t.request("POST", "/v1/queues/tests/consume", {
      token: app.token,
      body: { waitSeconds: 0 },
    });
    expect(consumed.body.message).toMatchObject({ id, payload: { hello: "operator" } });
    expect(total(await activity(app.id, "tests")).puts).toBe(1);
    const { entries } = await t.admin.listAuditEntries({ appId: app.id, action: "queue.put", pageSize: 10 });
    expect(entries).toHaveLength(1);
    expect(entries[0]).toMatchObject({ operatorId: "owner", action: "queue.put", outcome: "ok", appId: app.id });
    expect(entries[0].detail?.queue).toBe("tests");
  });

  it("refuses _events, a missing payload, a bad queue name, and the app's own limits (as 4xx)", async () => {
    const app = await t.createApp();
    const events = await failure(t.admin.putTestMessage({ appId: app.id, queue: "_events", payload: json(1) }));
    expect(events.code).toBe(Code.InvalidArgument);
    expect(events.rawMessage).toMatch(/^queue: must be an app's own queue/);
    const missing = await failure(t.admin.putTestMessage({ appId: app.id, queue: "q" }));
    expect(missing.rawMessage).toBe("payload: is required (any JSON value)");
    expect((await failure(t.admin.putTestMessage({ appId: app.id, queue: "Bad", payload: json(1) }))).code).toBe(
      Code.InvalidArgument,
    );
    const big = await failure(
      t.admin.putTestMessage({ appId: app.id, queue: "q", payload: json("x".repeat(300_000)) }),
    );
    expect([Code.InvalidArgument, Code.ResourceExhausted, Code.FailedPrecondition]).toContain(big.code);
    // Every refused attempt is recorded once, also those refused before the put began (docs/operators.md).
    const { entries } = await t.admin.listAuditEntries({ appId: app.id, action: "queue.put", pageSize: 10 });
    expect(entries.map((e) => e.outcome)).toEqual(["failed", "failed", "failed", "failed"]);
    expect(entries.at(-1)?.detail?.message).toMatch(/^queue: must be an app's own queue/);
  });

  it("is refused to a viewer by the server, and the attempt is audited as denied", async () => {
    const app = await t.createApp();
    const res = await t.admin.createOperator({ name: "queue-viewer", role: OperatorRole.VIEWER });
    const viewer = createClient(AdminService, transportFor(t.url, "connect", res.token));
    const denied = await failure(viewer.putTestMessage({ appId: app.id, queue: "q", payload: json(1) }));
    expect(denied.code).toBe(Code.PermissionDenied);
    // A viewer reads the activity and peeks.
    expect(await viewer.getQueueActivity({ appId: app.id, queue: "q" })).toMatchObject({ hours: expect.any(Array) });
    expect((await viewer.peekMessages({ appId: app.id, queue: "q" })).messages).toEqual([]);
    expect(total(await activity(app.id, "q")).puts).toBe(0);
    const { entries } = await t.admin.listAuditEntries({ operatorId: res.operator!.id, pageSize: 10 });
    expect(entries.map((e) => `${e.action}:${e.outcome}`)).toEqual(["queue.put:denied"]);
  });
});

describe("PeekMessages paging", () => {
  it("pages past the first page in claim order, each message once, then no token", async () => {
    const app = await t.createApp();
    const put = await t.request("POST", "/v1/queues/line/batch", {
      token: app.token,
      body: { messages: Array.from({ length: 45 }, (_, i) => ({ payload: { i } })) },
    });
    expect(put.status).toBe(200);
    const seen: number[] = [];
    let pageToken = "";
    const sizes: number[] = [];
    do {
      const page = await t.admin.peekMessages({ appId: app.id, queue: "line", limit: 20, pageToken });
      sizes.push(page.messages.length);
      seen.push(...page.messages.map((m) => JSON.parse(m.payload).i as number));
      pageToken = page.nextPageToken;
    } while (pageToken !== "" && sizes.length < 10);
    expect(sizes).toEqual([20, 20, 5]);
    expect(new Set(seen).size).toBe(45);
    // Exactly a page's worth: no token pointing at an empty page.
    const exact = await t.admin.peekMessages({ appId: app.id, queue: "line", limit: 45 });
    expect(exact.messages).toHaveLength(45);
    expect(exact.nextPageToken).toBe("");
  });

  it("refuses a token it did not write", async () => {
    const app = await t.createApp();
    for (const pageToken of [
      "nonsense",
      Buffer.from("2026-02-30T00:00:00.000000Z|2026-02-01T00:00:00.000000Z|x").toString("base64url"),
    ]) {
      const bad = await failure(t.admin.peekMessages({ appId: app.id, queue: "q", pageToken }));
      expect(bad.code).toBe(Code.InvalidArgument);
      expect(bad.rawMessage).toBe("page_token: must be the next_page_token of a previous PeekMessages answer");
    }
  });
});
