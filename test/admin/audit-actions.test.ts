/**
 * The audit action names are written once, in `audit-actions.ts`
 * (`AUDIT_ACTIONS`), and this ties every place that records, documents or
 * offers one to that set: the actions passed to `auditor.audited` /
 * `auditor.refused` (a literal, or the literals of the `const` it names), the
 * CLI's `auditDirect`, single sign-on's `auditSession`, the write RPCs' `RPC_ACTIONS`, the table of
 * docs/operators.md, and the dashboard's audit filter. A misspelt action would
 * otherwise be recorded silently and never match an operator's filter.
 */
import fs from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { AUDIT_ACTIONS, RPC_ACTIONS } from "../../src/admin/roles.ts";
import { AUDIT_FILTER_ACTIONS } from "../../dashboard/src/audit-actions.ts";

const root = path.resolve(import.meta.dirname, "../..");

function sourceFiles(dir: string): string[] {
  return fs
    .readdirSync(path.join(root, dir), { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith(".ts"))
    .map((entry) => path.relative(root, path.join(entry.parentPath, entry.name)));
}

/** Every action a source file records, by where it is written: `file: action`. */
function recordedActions(): { recorded: Map<string, string[]>; unresolved: string[] } {
  const recorded = new Map<string, string[]>();
  const unresolved: string[] = [];
  const add = (action: string, where: string) => recorded.set(action, [...(recorded.get(action) ?? []), where]);
  // auditor.ts defines `audited` and `refused`: its `action` is their parameter.
  for (const file of sourceFiles("src").filter((name) => name !== path.join("src", "admin", "auditor.ts"))) {
    const text = fs.readFileSync(path.join(root, file), "utf8");
    const calls =
      /\b(?:audited|refused)\(\s*context,\s*([^,\s]+)|\b(?:auditDirect|auditSession)\(\s*[\w.]+,\s*([^,\s]+)/g;
    for (const match of text.matchAll(calls)) {
      const argument = match[1] ?? match[2];
      const literal = /^"([^"]+)"$/.exec(argument);
      if (literal) {
        add(literal[1], file);
        continue;
      }
      // A name: the dotted literals of its `const` in the same file are the actions it may hold (others
      // there, such as `"stopped"`, are what it is chosen by).
      const declaration = new RegExp(`const ${argument}(?::[^=]+)? =([^;]+);`).exec(text);
      if (declaration?.[1]!.trim().startsWith("RPC_ACTIONS[")) continue; // in AUDIT_ACTIONS by construction
      const literals = declaration ? [...declaration[1].matchAll(/"([a-z_]+(?:\.[a-z_]+)+)"/g)].map((m) => m[1]) : [];
      if (literals.length === 0) unresolved.push(`${file}: ${match[0]}`);
      for (const action of literals) add(action, file);
    }
  }
  return { recorded, unresolved };
}

describe("audit actions", () => {
  it("every action recorded anywhere in src/ is one of roles.ts's AUDIT_ACTIONS", () => {
    const { recorded, unresolved } = recordedActions();
    expect(unresolved).toEqual([]);
    expect(recorded.size).toBeGreaterThan(20);
    const unknown = [...recorded].filter(([action]) => !AUDIT_ACTIONS.has(action));
    expect(unknown).toEqual([]);
    // And nothing in the set is stale: each is recorded somewhere (a write RPC refused to a viewer counts).
    const rpcActions = new Set(Object.values(RPC_ACTIONS));
    expect([...AUDIT_ACTIONS].filter((action) => !recorded.has(action) && !rpcActions.has(action))).toEqual([]);
    expect([...rpcActions].filter((action) => !recorded.has(action))).toEqual([]);
  });

  it("are the actions of docs/operators.md's table, no more and no fewer", () => {
    const doc = fs.readFileSync(path.join(root, "docs/operators.md"), "utf8");
    const table = /Audited actions:\n\n([\s\S]*?)\n\n/.exec(doc)?.[1] ?? "";
    const documented = new Set(
      table
        .split("\n")
        .slice(2)
        .flatMap((row) => [...(row.split("|")[1] ?? "").matchAll(/`([^`]+)`/g)].map((m) => m[1])),
    );
    expect(documented.size).toBeGreaterThan(20);
    expect([...AUDIT_ACTIONS].sort()).toEqual([...documented].sort());
  });

  it("are the actions the dashboard's audit filter offers", () => {
    expect([...AUDIT_FILTER_ACTIONS].sort()).toEqual([...AUDIT_ACTIONS].sort());
  });
});
