/**
 * The fast path of `POST /v1/analytics/events`' body schema (`plainEvents`, given to `LogEventsBody` with
 * `withFastPath`) against the schema itself: for every body, plain or odd, the fast path either leaves it to
 * the schema or answers what the schema answers; and plain batches do take it. Pure functions, no server:
 * the refusals' messages over HTTP are covered by analytics-routes.test.ts and strict-bodies.test.ts.
 */
import { describe, expect, it } from "vitest";
import { LogEventsBody, plainEvents } from "../../src/analytics/analytics-routes.ts";
import { parseJson } from "../../src/core/http/validation.ts";

/** A small deterministic generator (mulberry32), so that a failure is reproduced by its seed. */
function random(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const pick = <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)];
  return { next, pick };
}

/** Values a field may hold: the right kinds and every wrong one. */
const ODD_VALUES: unknown[] = [
  undefined,
  null,
  "",
  "signup",
  0,
  -1,
  1.5,
  2 ** 53,
  -(2 ** 53) - 2,
  1_700_000_000_000,
  true,
  [],
  [1],
  {},
  { plan: "pro" },
  "2026-11-23T10:00:00Z",
  "2026-11-23T10:00:00.123456Z",
  "2026-02-30T10:00:00Z",
  "2026-11-23T10:00:00+01:00",
  "yesterday",
];

function event(r: ReturnType<typeof random>): unknown {
  const roll = r.next();
  if (roll < 0.03) return r.pick(ODD_VALUES);
  const e: Record<string, unknown> = {};
  if (r.next() < 0.9) e.type = roll < 0.1 ? r.pick(ODD_VALUES) : r.pick(["signup", "page_view", ""]);
  if (r.next() < 0.8) e.properties = roll < 0.15 ? r.pick(ODD_VALUES) : { plan: r.pick(["pro", "free"]), n: 3 };
  if (r.next() < 0.7) e.at = roll < 0.25 ? r.pick(ODD_VALUES) : r.pick([1_700_000_000_123, "2026-11-23T10:00:00Z"]);
  if (roll > 0.97) e[r.pick(["distinctId", "timestamp", "__proto__", "Type", "extra"])] = "x";
  return e;
}

function body(r: ReturnType<typeof random>): unknown {
  const roll = r.next();
  if (roll < 0.03) return r.pick(ODD_VALUES);
  const n = roll < 0.06 ? r.pick([0, 1001]) : 1 + Math.floor(r.next() * 5);
  const b: Record<string, unknown> = { events: Array.from({ length: n }, () => event(r)) };
  if (roll > 0.97) b[r.pick(["batch", "event", "__proto__"])] = 1;
  return b;
}

/** What the route reads of a parsed body (`request` in analytics-routes.ts): the same for both paths. */
function read(parsed: { events: { type?: string; properties: Record<string, unknown>; at?: unknown }[] }) {
  return parsed.events.map((e) => ({ type: e.type ?? "", properties: e.properties, at: e.at ?? null }));
}

describe("LogEventsBody's fast path", () => {
  it("answers only what the schema answers, and leaves everything else to it", () => {
    let taken = 0;
    let refused = 0;
    for (let seed = 1; seed <= 4000; seed++) {
      // Through JSON, as bodies arrive (`__proto__` an own key, no undefined).
      const value: unknown = JSON.parse(JSON.stringify(body(random(seed))) ?? "null");
      const fast = plainEvents(value);
      const schema = LogEventsBody.safeParse(value);
      if (fast !== undefined) {
        taken++;
        expect(schema.success, `seed ${seed}: ${JSON.stringify(value)}`).toBe(true);
        expect(read(fast), `seed ${seed}`).toEqual(read(schema.data!));
      }
      if (!schema.success) refused++;
      // parseJson (the path every route takes) agrees with the schema alone, either way.
      let viaParse: unknown;
      try {
        viaParse = read(parseJson(LogEventsBody, value));
      } catch {
        viaParse = "refused";
      }
      expect(viaParse, `seed ${seed}`).toEqual(schema.success ? read(schema.data) : "refused");
    }
    // Both kinds were generated in numbers.
    expect(taken).toBeGreaterThan(500);
    expect(refused).toBeGreaterThan(500);
  });

  it("takes a plain batch of a thousand events, epoch and ISO times alike", () => {
    const events = Array.from({ length: 1000 }, (_, i) => ({
      type: "pageview",
      at: i % 2 ? 1_700_000_000_000 + i : "2026-11-23T10:00:00.250Z",
      properties: { plan: `plan-${i % 20}`, paid: i % 3 === 0 },
    }));
    const fast = plainEvents({ events });
    expect(fast?.events).toHaveLength(1000);
    expect(read(fast!)).toEqual(read(LogEventsBody.parse({ events })));
    expect(fast!.events[0].at).toMatchObject({
      seconds: BigInt(Date.UTC(2026, 10, 23, 10) / 1000),
      nanos: 250_000_000,
    });
  });
});
