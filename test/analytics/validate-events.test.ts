/**
 * The rules an event batch passes before any store sees it (validate-events.ts), on their own: each bad
 * event named by its index, in order, whatever type the events before it had; ids counted in characters.
 */
import { describe, expect, it } from "vitest";
import type { Value } from "@bufbuild/protobuf/wkt";
import { PlatformError } from "../../src/core/errors.ts";
import type { EventTypeRecord } from "../../src/analytics/event-type-store.ts";
import { distinctIdRule, validateEvents, type EventInput } from "../../src/analytics/validate-events.ts";

const at = new Date("2026-01-01T00:00:00Z");
const type = (name: string, properties: EventTypeRecord["properties"]): EventTypeRecord => ({
  name,
  properties,
  createdAt: at,
  updatedAt: at,
});
const types = new Map([
  ["signup", type("signup", { plan: "string", seats: "number" })],
  ["order", type("order", { paid: "boolean", amount: "number" })],
]);
const value = (v: string | number | boolean): Value => ({
  $typeName: "google.protobuf.Value",
  kind:
    typeof v === "string"
      ? { case: "stringValue", value: v }
      : typeof v === "number"
        ? { case: "numberValue", value: v }
        : { case: "boolValue", value: v },
});
const event = (t: string, properties: Record<string, string | number | boolean> = {}, distinctId?: string) => {
  const e: EventInput = { type: t, properties: {} };
  for (const [k, v] of Object.entries(properties)) e.properties[k] = value(v);
  if (distinctId !== undefined) e.distinctId = distinctId;
  return e;
};
const now = Date.UTC(2026, 0, 2);

function issues(events: EventInput[]): string[] {
  try {
    validateEvents(events, types, now);
  } catch (err) {
    expect(err).toBeInstanceOf(PlatformError);
    return (err as PlatformError).details ?? [];
  }
  throw new Error("the batch was accepted");
}

describe("validateEvents", () => {
  it("names every bad event of a batch that mixes types, whatever the type of the event before", () => {
    expect(
      issues([
        event("signup", { plan: "pro" }),
        event("nope"),
        event("signup", { plan: 3 }),
        event("order", { paid: true }),
        event(""),
        event("signup", { seats: "x" }),
        event("Bad"),
        event("order", { plan: "pro" }),
        event("signup", { plan: "free" }, ""),
        event("nope"),
      ]),
    ).toEqual([
      'events[1].type: no event type named "nope" is registered',
      "events[2].properties.plan: must be a string (declared string)",
      "events[4].type: is required",
      "events[5].properties.seats: must be a number (declared number)",
      "events[6].type: must match ^[a-z][a-z0-9_.-]{0,62}$",
      'events[7].properties.plan: is not declared by type "order"',
      "events[8].distinctId: must be 1 to 200 characters",
      'events[9].type: no event type named "nope" is registered',
    ]);
  });

  it("stores each event of a mixed batch with its own type's values as strings and its numbers beside them", () => {
    const stored = validateEvents(
      [
        event("signup", { plan: "pro", seats: 3 }, "u1"),
        event("order", { paid: false, amount: 12.5 }),
        event("signup", { plan: "free" }),
      ],
      types,
      now,
    );
    expect(stored).toEqual([
      { type: "signup", at: now, properties: { plan: "pro", seats: "3" }, distinctId: "u1", numbers: { seats: 3 } },
      { type: "order", at: now, properties: { paid: "false", amount: "12.5" }, numbers: { amount: 12.5 } },
      { type: "signup", at: now, properties: { plan: "free" } },
    ]);
  });
});

describe("distinctIdRule", () => {
  it("counts characters, not UTF-16 units: 200 emoji are an id, 201 characters are not", () => {
    expect(distinctIdRule("a".repeat(200))).toBeUndefined();
    expect(distinctIdRule("🙂".repeat(200))).toBeUndefined();
    expect(distinctIdRule(`${"🙂".repeat(199)}ab`)).toBe("must be 1 to 200 characters");
    expect(distinctIdRule("a".repeat(201))).toBe("must be 1 to 200 characters");
    expect(distinctIdRule("")).toBe("must be 1 to 200 characters");
    expect(distinctIdRule("\ud800")).toBe("must be valid Unicode without NUL characters");
  });
});
