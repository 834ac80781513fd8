/**
 * Funnels over REST and Connect (docs/analytics.md "Funnels") on this run's
 * database, and the MongoDB store's step pipeline on mingo against the SQL
 * store's step events.
 */
import crypto from "node:crypto";
import { aggregate } from "mingo";
import { beforeAll, describe, expect, it } from "vitest";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { AnalyticsService, Operator } from "../../gen/platform/analytics/v1/analytics_pb.js";
import { buildStepPipeline, stepEventsOf, toDocuments } from "../../src/analytics/mongo-event-store.ts";
import type { StepEventsQuery, StoredEvent } from "../../src/analytics/event-store.ts";
import { computeFunnel } from "../../src/analytics/funnel.ts";
import { useTestServer, type TestApp } from "../support/harness.ts";
import { T } from "./store-cases.ts";

const t = useTestServer();
const H = 3_600_000;
const D0 = T("2024-03-01T00:00:00Z");
let app: TestApp;

const funnel = (body: Record<string, unknown>) => t.request("POST", "/v1/analytics/funnel", { token: app.token, body });

beforeAll(async () => {
  app = await t.createApp();
  for (const [name, properties] of [
    ["signup", { plan: "string" }],
    ["project", { kind: "string" }],
    ["invite", {}],
  ] as const) {
    const res = await t.request("POST", "/v1/analytics/types", { token: app.token, body: { name, properties } });
    expect(res.status).toBe(200);
  }
  const e = (type: string, distinctId: string | undefined, at: number, properties: Record<string, string> = {}) => ({
    type,
    at,
    properties,
    ...(distinctId ? { distinctId } : {}),
  });
  const res = await t.request("POST", "/v1/analytics/events", {
    token: app.token,
    body: {
      events: [
        // a: signup (pro), project 1 h later, invite 2 h later: all three.
        e("signup", "a", D0, { plan: "pro" }),
        e("project", "a", D0 + H, { kind: "web" }),
        e("invite", "a", D0 + 3 * H),
        // b: signup (free), project 3 h later, never invites.
        e("signup", "b", D0 + H, { plan: "free" }),
        e("project", "b", D0 + 4 * H, { kind: "api" }),
        // c: signup (pro), project 8 days later: outside the 7-day window.
        e("signup", "c", D0 + 2 * H, { plan: "pro" }),
        e("project", "c", D0 + 2 * H + 8 * 24 * H, { kind: "web" }),
        // d: project before signup only: not in order.
        e("project", "d", D0, { kind: "web" }),
        e("signup", "d", D0 + H, { plan: "free" }),
        // An anonymous signup counts nobody.
        e("signup", undefined, D0 + H, { plan: "pro" }),
      ],
    },
  });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
});

const base = { steps: [{ type: "signup" }, { type: "project" }, { type: "invite" }], since: D0, until: D0 + 24 * H };

describe("POST /v1/analytics/funnel", () => {
  it("counts users in order within the window, with conversions and median times", async () => {
    const res = await funnel(base);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body).toEqual({
      steps: [
        {
          type: "signup",
          users: 4,
          conversionFromFirst: 1,
          conversionFromPrevious: 1,
          medianSecondsFromPrevious: null,
        },
        {
          type: "project",
          users: 2,
          conversionFromFirst: 0.5,
          conversionFromPrevious: 0.5,
          medianSecondsFromPrevious: 7200,
        },
        {
          type: "invite",
          users: 1,
          conversionFromFirst: 0.25,
          conversionFromPrevious: 0.5,
          medianSecondsFromPrevious: 7200,
        },
      ],
      since: D0,
      until: D0 + 24 * H,
      windowSeconds: 604800,
      breakdown: null,
      groups: [],
      otherGroups: 0,
    });
  });

  it("takes a wider window, conditions on steps, and a breakdown by a first-step property", async () => {
    const wide = await funnel({ ...base, steps: base.steps.slice(0, 2), windowSeconds: 9 * 86_400 });
    expect(wide.body.steps.map((s: { users: number }) => s.users)).toEqual([4, 3]);
    const web = await funnel({
      ...base,
      steps: [{ type: "signup" }, { type: "project", where: [{ property: "kind", op: "eq", value: "web" }] }],
    });
    expect(web.body.steps.map((s: { users: number }) => s.users)).toEqual([4, 1]);
    const byPlan = await funnel({ ...base, breakdown: "plan", limit: 1 });
    expect(byPlan.status).toBe(200);
    expect(
      byPlan.body.groups.map((g: { group: string | null; other: boolean; steps: { users: number }[] }) => [
        g.group,
        g.other,
        g.steps.map((s) => s.users),
      ]),
    ).toEqual([
      ["free", false, [2, 1, 0]],
      [null, true, [2, 1, 1]],
    ]);
    expect(byPlan.body.otherGroups).toBe(1);
  });

  it.each([
    [{ ...base, steps: [{ type: "signup" }] }, "steps: must have 2 to 8 steps"],
    [
      { ...base, steps: [{ type: "signup" }, { type: "nope" }] },
      'steps[1].type: no event type named "nope" is registered',
    ],
    [{ ...base, windowSeconds: 0 }, "windowSeconds: must be 1 to 7776000 seconds (90 days)"],
    [{ ...base, breakdown: "kind" }, 'breakdown: "kind" is not a property of the first step\'s type "signup"'],
    [
      { ...base, steps: [{ type: "signup", where: [{ property: "plan", op: "gt", value: 1 }] }, { type: "project" }] },
      "steps[0].where[0].op: gt compares number properties only (plan is declared string)",
    ],
    [{ ...base, since: D0 + 24 * H, until: D0 }, "since: must be before until"],
  ])("refuses %j", async (body, message) => {
    const res = await funnel(body);
    expect(res.status).toBe(400);
    expect(res.body.error.message).toBe(message);
  });

  it("answers the same over Connect", async () => {
    const client = t.client(AnalyticsService, app.token, "connect");
    const res = await client.queryFunnel({
      steps: [
        {
          type: "signup",
          where: [{ property: "plan", op: Operator.EQ, value: { kind: { case: "stringValue", value: "pro" } } }],
        },
        { type: "project" },
      ],
      since: timestampFromMs(D0),
      until: timestampFromMs(D0 + 24 * H),
    });
    expect(res.steps.map((s) => [s.type, Number(s.users), s.conversionFromPrevious])).toEqual([
      ["signup", 2, 1],
      ["project", 1, 0.5],
    ]);
    expect(res.windowSeconds).toBe(604800n);
  });
});

describe("funnel computation", () => {
  it("counts one event once when two steps are of the same type", () => {
    const one = [{ distinctId: "u", at: 10, group: null }];
    expect(
      computeFunnel([one, one], { types: ["view", "view"], windowMs: 1000, limit: 50, breakdown: false }).steps.map(
        (s) => s.users,
      ),
    ).toEqual([1, 0]);
    const two = [...one, { distinctId: "u", at: 20, group: null }];
    expect(
      computeFunnel([one, two], { types: ["view", "view"], windowMs: 1000, limit: 50, breakdown: false }).steps.map(
        (s) => s.users,
      ),
    ).toEqual([1, 1]);
  });

  it("the MongoDB store's step pipeline answers what the SQL store would (mingo)", () => {
    const appId = crypto.randomUUID();
    const events: StoredEvent[] = [
      { type: "signup", at: D0, properties: { plan: "pro" }, distinctId: "a" },
      { type: "signup", at: D0 + 1, properties: {}, distinctId: "b" },
      { type: "signup", at: D0 + 2, properties: { plan: "pro" } },
      { type: "project", at: D0 + 3, properties: { plan: "pro" }, distinctId: "a" },
    ];
    const q: StepEventsQuery = {
      appId,
      type: "signup",
      where: [{ property: "plan", kind: "string", op: "neq", value: "free" }],
      since: D0,
      until: D0 + H,
      breakdown: "plan",
    };
    const docs = toDocuments(appId, events, "b1");
    const rows = stepEventsOf(aggregate(docs, buildStepPipeline(q)) as { d: string; at: Date; g: string | null }[]);
    expect(rows.sort((x, y) => x.at - y.at)).toEqual([
      { distinctId: "a", at: D0, group: "pro" },
      { distinctId: "b", at: D0 + 1, group: null },
    ]);
  });
});
