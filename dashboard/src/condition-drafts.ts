/**
 * Filter conditions (`where`, docs/analytics.md) as a person writes them (the
 * editor is conditions.tsx):
 * property, operator, value, one row each. The operators offered and the
 * value's form follow the property's declared kind, and a value is checked
 * against that kind here before anything is sent, by the server's rules: a
 * number property compares with numbers only (`gt`, `gte`, `lt`, `lte` are for
 * numbers alone), `contains` is for strings and `distinctId`, `in` takes a list
 * (comma-separated here), `exists` is "is set" or "is not set". The server
 * checks again; its refusal is shown as it words it.
 */
import type { JsonValue, MessageInitShape } from "@bufbuild/protobuf";
import { PropertyKind, type ConditionSchema, type EventType } from "../../gen/platform/analytics/v1/analytics_pb.js";
import { conditionOf, type ConditionOp } from "../../src/analytics/where-conditions.ts";

export type Kind = "string" | "number" | "boolean";
/** The operators by the API's names (one module with the service and the CLI). */
export type OpName = ConditionOp;

/** Who did an event: a condition may name it like a declared string property. */
export const DISTINCT_ID = "distinctId";
/** The server's limits: conditions per query, values of one `in`. */
export const MAX_CONDITIONS = 10;
const MAX_IN_VALUES = 100;

export interface DraftCondition {
  property: string;
  op: OpName;
  /** As typed: a number's digits, a list's comma-separated values, "true"/"false" for booleans and `exists`. */
  text: string;
}

/** No conditions: one list for every screen's initial state, so an untouched screen's state never changes. */
export const NO_CONDITIONS: DraftCondition[] = [];

/** Whether `value` is a list of draft conditions: a link's conditions, which may have been edited by hand. */
export function areDraftConditions(value: unknown): value is DraftCondition[] {
  return (
    Array.isArray(value) &&
    value.length <= MAX_CONDITIONS &&
    value.every(
      (c: Partial<Record<keyof DraftCondition, unknown>> | null) =>
        typeof c === "object" &&
        c !== null &&
        typeof c.property === "string" &&
        typeof c.text === "string" &&
        typeof c.op === "string" &&
        Object.hasOwn(OP_LABEL, c.op),
    )
  );
}

export const OP_LABEL: Record<OpName, string> = {
  eq: "is",
  neq: "is not",
  in: "is one of",
  contains: "contains",
  gt: ">",
  gte: "≥",
  lt: "<",
  lte: "≤",
  exists: "is set / not set",
};

/** The operators the server accepts for each kind. */
export const OPS_OF: Record<Kind, OpName[]> = {
  string: ["eq", "neq", "in", "contains", "exists"],
  number: ["eq", "neq", "in", "gt", "gte", "lt", "lte", "exists"],
  boolean: ["eq", "neq", "in", "exists"],
};

const KIND_OF = new Map<PropertyKind, Kind>([
  [PropertyKind.STRING, "string"],
  [PropertyKind.NUMBER, "number"],
  [PropertyKind.BOOLEAN, "boolean"],
]);

/** The declared properties of `type` and their kinds, sorted by name. */
export function declaredKinds(type: EventType | undefined): [string, Kind][] {
  return Object.entries(type?.properties ?? {})
    .map(([name, kind]): [string, Kind] => [name, KIND_OF.get(kind) ?? "string"])
    .sort((a, b) => a[0].localeCompare(b[0]));
}

/** What a condition may name: the declared properties, and `distinctId` (a string). */
export function conditionKinds(type: EventType | undefined): Map<string, Kind> {
  return new Map([...declaredKinds(type), [DISTINCT_ID, "string"]]);
}

/** A new row for `type`: its first property, `is`, nothing typed. */
export function newCondition(type: EventType | undefined): DraftCondition {
  const [[property, kind]] = conditionKinds(type);
  return { property, op: "eq", text: kind === "boolean" ? "true" : "" };
}

function scalar(text: string, kind: Kind, name: string): JsonValue | string {
  const t = text.trim();
  if (kind === "number") {
    const n = t === "" ? NaN : Number(t);
    return Number.isFinite(n) ? n : `${name} is declared number: enter a number`;
  }
  if (kind === "boolean")
    return t === "true" ? true : t === "false" ? false : `${name} is declared boolean: true or false`;
  return text;
}

type Condition = MessageInitShape<typeof ConditionSchema>;

/**
 * The conditions to send, or the first problem (`where` names the rows, e.g.
 * "Filter 2" or "Step 1, condition 2").
 */
export function toConditions(
  drafts: DraftCondition[],
  type: EventType | undefined,
  where: (i: number) => string,
): { conditions: Condition[]; problem?: undefined } | { conditions?: undefined; problem: string } {
  const kinds = conditionKinds(type);
  const conditions: Condition[] = [];
  for (const [i, d] of drafts.entries()) {
    const kind = kinds.get(d.property);
    if (!kind) return { problem: `${where(i)}: ${d.property} is not a property of this type` };
    if (!OPS_OF[kind].includes(d.op))
      return { problem: `${where(i)}: "${OP_LABEL[d.op]}" does not apply to ${d.property} (declared ${kind})` };
    let value: JsonValue;
    if (d.op === "exists") value = d.text !== "false";
    else if (d.op === "in") {
      const parts = d.text.split(",").map((p) => (kind === "string" ? p.trim() : p));
      if (d.text.trim() === "" || parts.length > MAX_IN_VALUES)
        return { problem: `${where(i)}: list 1 to ${MAX_IN_VALUES} values, separated by commas` };
      const list: JsonValue[] = [];
      for (const p of parts) {
        const v = scalar(p, kind, d.property);
        if (typeof v === "string" && kind !== "string") return { problem: `${where(i)}: ${v} in each value` };
        list.push(v);
      }
      value = list;
    } else {
      const v = scalar(d.text, kind, d.property);
      if (typeof v === "string" && kind !== "string") return { problem: `${where(i)}: ${v}` };
      if (d.property === DISTINCT_ID && d.op !== "contains" && d.text === "")
        return { problem: `${where(i)}: enter the distinctId` };
      value = v;
    }
    conditions.push(conditionOf(d.property, d.op, value));
  }
  return { conditions };
}
