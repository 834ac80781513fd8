/**
 * The SQL store computes funnels in the database (`EventStore.funnel`); the
 * rules are written out once in `computeFunnel`. On random events and
 * funnels (fast-check) both must give the same answer to the last bit:
 * `computeFunnel` over the same store's step events against the store's own
 * statement, with conditions, repeated step types, ties at one instant,
 * breakdowns with folded groups, and windows cutting paths short. Runs on
 * this run's database (PGlite, or PostgreSQL with DATABASE_URL).
 */
import crypto from "node:crypto";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { Condition, StoredEvent } from "../../src/analytics/event-store.ts";
import { computeFunnel, funnelAnswer } from "../../src/analytics/funnel.ts";
import { useSqlEventStore } from "../support/sql-event-store.ts";
import { T } from "./store-cases.ts";

const START = T("2024-03-01T00:00:00Z");
const MINUTE = 60_000;
const TYPES = ["view", "signup", "buy"];
const USERS = ["u1", "u2", "u3", "u4", "u5", "u6", "u7", "u8"];
const PLANS = ["free", "pro", "team", "Pro", "é"];

const eventArb = fc.record({
  type: fc.constantFrom(...TYPES, "noise"),
  // Minutes over about two days, so paths often tie, fall in and out of windows.
  minute: fc.integer({ min: 0, max: 3000 }),
  distinctId: fc.option(fc.constantFrom(...USERS), { nil: undefined, freq: 8 }),
  plan: fc.option(fc.constantFrom(...PLANS), { nil: undefined }),
});

const conditionArb: fc.Arbitrary<Condition> = fc.oneof(
  fc.record({
    property: fc.constant("plan"),
    kind: fc.constant("string" as const),
    op: fc.constantFrom("eq" as const, "neq" as const),
    value: fc.constantFrom(...PLANS),
  }),
  fc.record({
    property: fc.constant(undefined),
    kind: fc.constant("string" as const),
    op: fc.constant("in" as const),
    value: fc.subarray(USERS, { minLength: 1, maxLength: 5 }),
  }),
);

const funnelArb = fc.record({
  steps: fc.array(fc.record({ type: fc.constantFrom(...TYPES), where: fc.array(conditionArb, { maxLength: 1 }) }), {
    minLength: 2,
    maxLength: 4,
  }),
  fromMinute: fc.integer({ min: -100, max: 2000 }),
  lengthMinutes: fc.integer({ min: 1, max: 3000 }),
  windowMinutes: fc.integer({ min: 1, max: 1500 }),
  breakdown: fc.boolean(),
  limit: fc.integer({ min: 1, max: 4 }),
});

describe("funnels computed in the database", () => {
  const fixture = useSqlEventStore();

  it("answer what computeFunnel answers over the same step events", async () => {
    let reachedLater = 0;
    let withGroups = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(eventArb, { minLength: 40, maxLength: 200 }),
        fc.array(funnelArb, { minLength: 1, maxLength: 3 }),
        async (generated, funnels) => {
          const appId = crypto.randomUUID();
          const events = generated.map((e): StoredEvent => ({
            type: e.type,
            at: START + e.minute * MINUTE,
            properties: e.plan === undefined ? {} : { plan: e.plan },
            distinctId: e.distinctId,
          }));
          await fixture.store.insert(appId, events);
          for (const f of funnels) {
            const since = START + f.fromMinute * MINUTE;
            const until = since + f.lengthMinutes * MINUTE;
            const windowMs = f.windowMinutes * MINUTE;
            const laterUntil = until + windowMs;
            const breakdown = f.breakdown ? "plan" : undefined;
            const stepEvents = await Promise.all(
              f.steps.map((s, i) =>
                fixture.store.stepEvents({
                  appId,
                  type: s.type,
                  where: s.where,
                  since,
                  until: i === 0 ? until : laterUntil,
                  breakdown: i === 0 ? breakdown : undefined,
                }),
              ),
            );
            const expected = computeFunnel(stepEvents, {
              types: f.steps.map((s) => s.type),
              windowMs,
              limit: f.limit,
              breakdown: breakdown !== undefined,
            });
            const counts = await fixture.store.funnel!({
              appId,
              steps: f.steps,
              since,
              until,
              windowMs,
              laterUntil,
              breakdown,
              limit: f.limit,
            });
            expect(funnelAnswer(counts), JSON.stringify(f)).toEqual(expected);
            if (expected.steps[1].users > 0) reachedLater++;
            if (expected.groups.length > 1) withGroups++;
          }
        },
      ),
      { numRuns: 60 },
    );
    // Not vacuous: paths went past the first step, and breakdowns held several groups.
    expect(reachedLater).toBeGreaterThan(10);
    expect(withGroups).toBeGreaterThan(5);
  }, 300_000);

  it("answers an empty funnel with every step at zero", async () => {
    const counts = await fixture.store.funnel!({
      appId: crypto.randomUUID(),
      steps: [
        { type: "view", where: [] },
        { type: "buy", where: [] },
      ],
      since: START,
      until: START + MINUTE,
      windowMs: MINUTE,
      laterUntil: START + 2 * MINUTE,
      breakdown: "plan",
      limit: 3,
    });
    expect(counts).toEqual({ steps: [{ users: 0 }, { users: 0 }], groups: [], otherGroups: 0 });
  });
});
