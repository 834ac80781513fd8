/**
 * A `where` condition (docs/analytics.md) in the words of the API: the operator names and how a
 * property, an operator and a JSON value become the Condition message. One module for the service
 * (the REST mapping and the query extensions), the CLI's `--where PROP:OP:JSON` and the dashboard's
 * filter rows, which bundles it: the three cannot disagree on a name or a value's form.
 */
import { fromJson, type JsonValue, type MessageInitShape } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { Operator, type ConditionSchema } from "../../gen/platform/analytics/v1/analytics_pb.js";

/** Each operator's name. */
export const OP_OF = {
  eq: Operator.EQ,
  neq: Operator.NEQ,
  in: Operator.IN,
  contains: Operator.CONTAINS,
  gt: Operator.GT,
  gte: Operator.GTE,
  lt: Operator.LT,
  lte: Operator.LTE,
  exists: Operator.EXISTS,
} as const satisfies Record<string, Operator>;

export type ConditionOp = keyof typeof OP_OF;

function isConditionOp(name: string): name is ConditionOp {
  return Object.hasOwn(OP_OF, name);
}

type Condition = MessageInitShape<typeof ConditionSchema>;

/** The Condition message of a property, an operator and its value (none: `exists` means "is set"). */
export function conditionOf(property: string, op: ConditionOp, value: JsonValue | undefined): Condition {
  return { property, op: OP_OF[op], ...(value === undefined ? {} : { value: fromJson(ValueSchema, value) }) };
}

/**
 * `PROP:OP:JSON` (`plan:eq:"pro"`, `amount:gte:10`, `plan:in:["a","b"]`, `paid:exists`) as a Condition,
 * or what is wrong with it. Kinds are the service's to check.
 */
export function parseWhere(
  text: string,
): { condition: Condition; problem?: undefined } | { condition?: undefined; problem: string } {
  const m = /^([^:]+):([a-z]+)(?::(.*))?$/s.exec(text);
  if (!m || !isConditionOp(m[2]))
    return { problem: `must be PROP:OP:JSON (OP one of ${Object.keys(OP_OF).join(", ")})` };
  let value: JsonValue | undefined;
  try {
    value = m[3] === undefined ? undefined : (JSON.parse(m[3]) as JsonValue);
  } catch {
    return { problem: "the value must be JSON (a string in double quotes)" };
  }
  return { condition: conditionOf(m[1], m[2], value) };
}
