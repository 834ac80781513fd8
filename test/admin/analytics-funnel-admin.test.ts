/**
 * QueryAnalyticsFunnel: the funnel the app would run with its own QueryFunnel,
 * asked by an operator through AdminService (the dashboard's funnel view), over
 * Connect against the real server: the same users, conversions and medians as
 * the app's REST answer, the app's own validation, a viewer may ask, and a
 * service token may not; and the CLI's `analytics funnel`, a real child process.
 */
import { describe, expect, it, vi } from "vitest";
import { Code, createClient } from "@connectrpc/connect";
import { fromJson } from "@bufbuild/protobuf";
import { ValueSchema, timestampFromMs } from "@bufbuild/protobuf/wkt";
import { AdminService, OperatorRole } from "../../gen/platform/admin/v1/admin_pb.js";
import { Operator } from "../../gen/platform/analytics/v1/analytics_pb.js";
import { connectError, transportFor, useTestServer, type TestApp } from "../support/harness.ts";
import { cliAgainst } from "../support/service-process.ts";

// The CLI test spawns a process; on a busy machine a spawn takes seconds.
vi.setConfig({ testTimeout: 180_000 });

const t = useTestServer();
const cli = cliAgainst(() => t);
const H = 3_600_000;

/** The funnel's two event types, declared by the app: signup (with a plan) and project. */
async function declareTypes(app: TestApp) {
  for (const [name, properties] of [
    ["signup", { plan: "string" }],
    ["project", {}],
  ] as const) {
    const res = await t.request("POST", "/v1/analytics/types", { token: app.token, body: { name, properties } });
    expect(res.status).toBe(200);
  }
}

describe("QueryAnalyticsFunnel", () => {
  it("answers what the app's own funnel answers, with its validation; viewers may ask, a service token not", async () => {
    const app = await t.createApp();
    await declareTypes(app);
    const start = Date.now() - 10 * H;
    const events = [
      // u1 and u2 create a project 1 h and 3 h after signing up; u3 never does.
      { type: "signup", distinctId: "u1", at: start, properties: { plan: "pro" } },
      { type: "project", distinctId: "u1", at: start + H },
      { type: "signup", distinctId: "u2", at: start, properties: { plan: "free" } },
      { type: "project", distinctId: "u2", at: start + 3 * H },
      { type: "signup", distinctId: "u3", at: start, properties: { plan: "pro" } },
    ];
    expect((await t.request("POST", "/v1/analytics/events", { token: app.token, body: { events } })).status).toBe(200);
    const since = start - H;
    const until = start + 5 * H;

    const admin = await t.admin.queryAnalyticsFunnel({
      appId: app.id,
      steps: [{ type: "signup" }, { type: "project" }],
      since: timestampFromMs(since),
      until: timestampFromMs(until),
      windowSeconds: 86_400n,
      breakdown: "plan",
    });
    const own = await t.request("POST", "/v1/analytics/funnel", {
      token: app.token,
      body: {
        steps: [{ type: "signup" }, { type: "project" }],
        since,
        until,
        windowSeconds: 86_400,
        breakdown: "plan",
      },
    });
    expect(own.status).toBe(200);
    const shape = (
      steps: { users: unknown; conversionFromFirst: number; medianSecondsFromPrevious?: number | null }[],
    ) => steps.map((s) => [Number(s.users), s.conversionFromFirst, s.medianSecondsFromPrevious ?? null]);
    expect(shape(admin.steps)).toEqual([
      [3, 1, null],
      [2, 2 / 3, 2 * 3600],
    ]);
    expect(shape(admin.steps)).toEqual(shape(own.body.steps));
    expect(admin.windowSeconds).toBe(86_400n);
    expect(admin.breakdown).toBe("plan");
    expect(Object.fromEntries(admin.groups.map((g) => [g.group, g.steps.map((s) => Number(s.users))]))).toEqual({
      pro: [2, 1],
      free: [1, 1],
    });

    // A step's condition, as the app's: only pro signups start.
    const pro = await t.admin.queryAnalyticsFunnel({
      appId: app.id,
      steps: [
        { type: "signup", where: [{ property: "plan", op: Operator.EQ, value: fromJson(ValueSchema, "pro") }] },
        { type: "project" },
      ],
      since: timestampFromMs(since),
      until: timestampFromMs(until),
    });
    expect(pro.steps.map((s) => Number(s.users))).toEqual([2, 1]);

    // The app's own validation, message and all.
    const bad = await connectError(
      t.admin.queryAnalyticsFunnel({
        appId: app.id,
        steps: [{ type: "signup" }],
        since: timestampFromMs(since),
      }),
    );
    expect(bad.code).toBe(Code.InvalidArgument);
    expect(bad.rawMessage).toMatch(/^steps/);
    const mismatched = await connectError(
      t.admin.queryAnalyticsFunnel({
        appId: app.id,
        steps: [
          { type: "signup", where: [{ property: "plan", op: Operator.GT, value: fromJson(ValueSchema, 3) }] },
          { type: "project" },
        ],
        since: timestampFromMs(since),
      }),
    );
    expect(mismatched.code).toBe(Code.InvalidArgument);

    // A viewer reads it; a service token is not an operator.
    const viewer = await t.admin.createOperator({ name: "funnel-viewer", role: OperatorRole.VIEWER });
    const asViewer = createClient(AdminService, transportFor(t.url, "connect", viewer.token));
    const seen = await asViewer.queryAnalyticsFunnel({
      appId: app.id,
      steps: [{ type: "signup" }, { type: "project" }],
      since: timestampFromMs(since),
      until: timestampFromMs(until),
    });
    expect(seen.steps.map((s) => Number(s.users))).toEqual([3, 2]);
    const asApp = createClient(AdminService, transportFor(t.url, "connect", app.token));
    expect(
      (await connectError(asApp.queryAnalyticsFunnel({ appId: app.id, steps: [], since: timestampFromMs(since) })))
        .code,
    ).toBe(Code.Unauthenticated);
  });

  it("is the CLI's analytics funnel, with conditions per step", async () => {
    const app = await t.createApp("cli-funnel");
    await declareTypes(app);
    const start = Date.now() - 10 * H;
    const events = [
      { type: "signup", distinctId: "u1", at: start, properties: { plan: "pro" } },
      { type: "project", distinctId: "u1", at: start + H },
      { type: "signup", distinctId: "u2", at: start, properties: { plan: "free" } },
    ];
    expect((await t.request("POST", "/v1/analytics/events", { token: app.token, body: { events } })).status).toBe(200);
    const since = new Date(start - H).toISOString();
    const all = await cli(["analytics", "funnel", "cli-funnel", "signup", "project", "--since", since]);
    expect(all.code, all.stderr).toBe(0);
    const out = JSON.parse(all.stdout) as { steps: { type: string; users: number; conversionFromFirst: number }[] };
    expect(out.steps.map((s) => [s.type, Number(s.users), s.conversionFromFirst])).toEqual([
      ["signup", 2, 1],
      ["project", 1, 0.5],
    ]);
    const pro = await cli([
      ...["analytics", "funnel", "cli-funnel", "signup", "project", "--since", since],
      ...["--where", '1:plan:eq:"pro"', "--window", "7200"],
    ]);
    expect(pro.code, pro.stderr).toBe(0);
    expect((JSON.parse(pro.stdout) as typeof out).steps.map((s) => Number(s.users))).toEqual([1, 1]);
    const badStep = await cli([
      "analytics",
      "funnel",
      "cli-funnel",
      "signup",
      "project",
      "--since",
      since,
      "--where",
      '3:plan:eq:"pro"',
    ]);
    expect(badStep.code).toBe(2);
    expect(badStep.stderr).toContain('--where 3:plan:eq:"pro": must be STEP:PROP:OP:JSON (STEP 1 to 2)');
    const refused = await cli(["analytics", "funnel", "cli-funnel", "signup", "--since", since]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain("steps");
  });
});
