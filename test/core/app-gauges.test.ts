/**
 * The per-app series of /metrics (src/queues/queue-gauges.ts, src/core/operational-gauges.ts): messages
 * stored, dead letters, the oldest waiting message and the share of a daily cap used, by app, bounded to
 * the top METRICS_APPS_TOP apps per metric and one `app="_other"` series for the rest (summed for
 * amounts, the largest for an age or a share). Read from a real server after real puts, consumes and
 * events on four apps with METRICS_APPS_TOP=2; `foldTopApps` is also checked alone with 10,000 apps.
 */
import { sql } from "kysely";
import { beforeAll, describe, expect, it } from "vitest";
import { foldTopApps, OTHER_APPS } from "../../src/core/metrics.ts";
import { useTestServer, type TestApp } from "../support/harness.ts";

/** Every sample of one metric as its `app` (and `counter`) label → value. */
async function series(text: string, name: string): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const line of text.split("\n")) {
    const match = new RegExp(`^${name}\\{([^}]*)\\} (\\S+)$`).exec(line);
    if (!match) continue;
    const labels = Object.fromEntries([...match[1].matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
    out.set(labels.counter ? `${labels.app}/${labels.counter}` : labels.app, Number(match[2]));
  }
  return out;
}

describe("foldTopApps, the bound of the per-app series", () => {
  it("keeps the top apps and folds the rest into one series, whatever the number of apps", () => {
    const values = Array.from({ length: 10_000 }, (_, i) => ({ app: `app-${i}`, value: i % 100 }));
    const summed = foldTopApps(values, 20, "sum");
    expect(summed).toHaveLength(21);
    expect(summed.slice(0, 20).every((s) => s.value === 99)).toBe(true);
    const total = values.reduce((n, v) => n + v.value, 0);
    expect(summed.reduce((n, s) => n + s.value, 0)).toBe(total); // nothing lost, nothing counted twice
    expect(summed[20]).toEqual({ app: OTHER_APPS, value: total - 20 * 99 });
    expect(foldTopApps(values, 20, "max")[20]).toEqual({ app: OTHER_APPS, value: 99 });
  });

  it("gives apps at zero no series, ties in name order, and no _other when nothing was folded", () => {
    const values = [
      { app: "b", value: 2 },
      { app: "a", value: 2 },
      { app: "z", value: 0 },
    ];
    expect(foldTopApps(values, 5, "sum")).toEqual([
      { app: "a", value: 2 },
      { app: "b", value: 2 },
    ]);
    expect(foldTopApps(values, 0, "sum")).toEqual([{ app: OTHER_APPS, value: 4 }]);
  });
});

describe("the per-app gauges of /metrics, METRICS_APPS_TOP=2", () => {
  const t = useTestServer({ env: { METRICS_APPS_TOP: "2" } });
  const apps: TestApp[] = [];
  let text: string;

  beforeAll(async () => {
    for (let i = 0; i < 4; i++) apps.push(await t.createApp());
    const [a, b, c, d] = apps;
    const call = async (app: TestApp, path: string, body: unknown) => {
      const res = await t.request("POST", path, { token: app.token, body });
      expect(res.status, `${path}: ${JSON.stringify(res.body)}`).toBe(200);
      return res.body as { message: unknown };
    };
    // Messages: a 3, b 2, c 1, d 1.
    for (const [app, n] of [
      [a, 3],
      [b, 2],
      [c, 1],
      [d, 1],
    ] as const) {
      for (let i = 0; i < n; i++) await call(app, "/v1/queues/work", { payload: { i } });
    }
    // c's message has waited an hour, d's a minute: c and d are the two oldest.
    const db = t.server.deps.db;
    await sql`UPDATE queue_messages SET visible_at = now() - interval '1 hour' WHERE app_id = ${c.id}::uuid`.execute(
      db,
    );
    await sql`UPDATE queue_messages SET visible_at = now() - interval '1 minute' WHERE app_id = ${d.id}::uuid`.execute(
      db,
    );
    // A dead letter for b: delivered once (maxDeliveries 1), its lease lapses, the next consume buries it.
    await t.admin.updateApp({ appId: b.id, limits: { maxDeliveries: 1 } });
    await call(b, "/v1/queues/dying", { payload: { n: 1 } });
    expect((await call(b, "/v1/queues/dying/consume", {})).message).not.toBeNull();
    await sql`UPDATE queue_messages SET visible_at = now() - interval '1 millisecond' WHERE queue = 'dying'`.execute(
      db,
    );
    expect((await call(b, "/v1/queues/dying/consume", {})).message).toBeNull();
    // Daily caps: a used 5 of 10 events, b 1 of 10, c 3 of 4, d none.
    for (const [app, cap, used] of [
      [a, 10, 5],
      [b, 10, 1],
      [c, 4, 3],
    ] as const) {
      await t.admin.updateApp({ appId: app.id, limits: { eventsPerDay: cap } });
      await call(app, "/v1/analytics/types", { name: "signup", properties: {} });
      await call(app, "/v1/analytics/events", { events: Array.from({ length: used }, () => ({ type: "signup" })) });
    }
    const res = await t.request("GET", "/metrics");
    expect(res.status).toBe(200);
    text = res.body as string;
  });

  it("names the two apps with the most messages and sums the others in _other", async () => {
    const [a, b] = apps;
    expect(Object.fromEntries(await series(text, "app_queue_messages"))).toEqual({
      [a.name]: 3,
      [b.name]: 2, // its message on "dying" left the queue when it became a dead letter
      [OTHER_APPS]: 2,
    });
  });

  it("names the apps whose messages waited longest, the largest of the rest in _other", async () => {
    const [, , c, d] = apps;
    const ages = await series(text, "app_queue_oldest_waiting_seconds");
    expect([...ages.keys()].sort()).toEqual([c.name, d.name, OTHER_APPS].sort());
    expect(ages.get(c.name)).toBeGreaterThanOrEqual(3600);
    expect(ages.get(c.name)).toBeLessThan(3600 + 600);
    expect(ages.get(d.name)).toBeGreaterThanOrEqual(60);
    expect(ages.get(d.name)).toBeLessThan(3600);
    expect(ages.get(OTHER_APPS)).toBeLessThan(ages.get(d.name)!);
  });

  it("counts each app's dead letters", async () => {
    expect(Object.fromEntries(await series(text, "app_queue_dead_letters"))).toEqual({ [apps[1].name]: 1 });
  });

  it("reports each app's share of a daily cap, the largest of the rest in _other", async () => {
    const [a, , c] = apps;
    expect(Object.fromEntries(await series(text, "app_quota_cap_used_ratio"))).toEqual({
      [`${c.name}/events`]: 0.75,
      [`${a.name}/events`]: 0.5,
      [`${OTHER_APPS}/events`]: 0.1, // b's 1 of 10
    });
  });
});
