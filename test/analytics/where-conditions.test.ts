/**
 * One `where` condition, three writers (src/analytics/where-conditions.ts): the CLI's
 * `--where PROP:OP:JSON`, the dashboard's filter rows (dashboard/src/conditions.tsx) and the
 * service's operator names. The same condition written in each form is the same message, and every
 * operator of the proto has its one name.
 */
import { create, toJson } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import {
  ConditionSchema,
  EventTypeSchema,
  Operator,
  PropertyKind,
} from "../../gen/platform/analytics/v1/analytics_pb.js";
import { OP_OF, conditionOf, parseWhere } from "../../src/analytics/where-conditions.ts";
import { toConditions, type DraftCondition } from "../../dashboard/src/condition-drafts.ts";

const type = create(EventTypeSchema, {
  name: "checkout",
  properties: { plan: PropertyKind.STRING, amount: PropertyKind.NUMBER, paid: PropertyKind.BOOLEAN },
});

const asJson = (c: Parameters<typeof create<typeof ConditionSchema>>[1]) =>
  toJson(ConditionSchema, create(ConditionSchema, c));

describe("where conditions", () => {
  it("every operator of the proto has one name, and no name is left over", () => {
    const operators = Object.values(Operator).filter(
      (v): v is Operator => typeof v === "number" && v !== Operator.UNSPECIFIED,
    );
    expect(Object.values(OP_OF).sort()).toEqual(operators.sort());
  });

  it.each<[string, DraftCondition]>([
    ['plan:eq:"pro"', { property: "plan", op: "eq", text: "pro" }],
    ['plan:in:["pro","team"]', { property: "plan", op: "in", text: "pro, team" }],
    ["amount:gte:10", { property: "amount", op: "gte", text: "10" }],
    ["amount:in:[10,20.5]", { property: "amount", op: "in", text: "10,20.5" }],
    ["paid:eq:false", { property: "paid", op: "eq", text: "false" }],
    ["paid:exists:true", { property: "paid", op: "exists", text: "true" }],
    ['distinctId:contains:"ann"', { property: "distinctId", op: "contains", text: "ann" }],
  ])("the CLI's %s is the dashboard's row", (text, row) => {
    const cli = parseWhere(text);
    const dashboard = toConditions([row], type, (i) => `Filter ${i + 1}`);
    expect(cli.problem ?? dashboard.problem).toBeUndefined();
    expect(asJson(dashboard.conditions![0])).toEqual(asJson(cli.condition));
  });

  it("the CLI's text is the condition made from its parts", () => {
    expect(asJson(parseWhere('plan:in:["a","b"]').condition)).toEqual(asJson(conditionOf("plan", "in", ["a", "b"])));
    expect(asJson(conditionOf("paid", "exists", undefined))).toEqual({ property: "paid", op: "OPERATOR_EXISTS" });
  });

  it("says what is wrong with a text that is not PROP:OP:JSON", () => {
    expect(parseWhere("plan:like:1").problem).toBe(
      "must be PROP:OP:JSON (OP one of eq, neq, in, contains, gt, gte, lt, lte, exists)",
    );
    expect(parseWhere("plan:eq:pro").problem).toBe("the value must be JSON (a string in double quotes)");
    expect(asJson(parseWhere("paid:exists").condition)).toEqual({ property: "paid", op: "OPERATOR_EXISTS" });
  });
});
