/**
 * Every path a dependency-cruiser rule names exists, so that no boundary of
 * ARCHITECTURE.md is "checked" against a file that was renamed away (the
 * core-independent rule once guarded `src/server.ts` long after it became
 * `platform-server.ts`, and so guarded nothing). Each alternative of a pattern
 * is checked on its own: `^src/(a|b)\.ts$` needs both files, a pattern with
 * wildcards needs at least one tracked file it matches, and an unanchored
 * one (`-service\.ts$`) at least one tracked file anywhere.
 */
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { describe, expect, it } from "vitest";

const root = path.resolve(import.meta.dirname, "../..");

interface PathSelector {
  path?: string | string[];
  pathNot?: string | string[];
}
interface Rule {
  name: string;
  from: PathSelector;
  to: PathSelector;
}
const config = createRequire(import.meta.url)(path.join(root, ".dependency-cruiser.cjs")) as {
  forbidden: Rule[];
  options: { doNotFollow?: PathSelector; exclude?: PathSelector };
};

const tracked = execFileSync("git", ["ls-files"], { cwd: root, encoding: "utf8" }).split("\n").filter(Boolean);

/** Every variant of a pattern, its groups of plain alternatives (`(a|b)`) expanded one by one. */
function expand(pattern: string): string[] {
  const group = /\(([^()]*\|[^()]*)\)/.exec(pattern);
  if (!group) return [pattern];
  return group[1].split("|").flatMap((alternative) => expand(pattern.replace(group[0], alternative)));
}

/** What is wrong with one variant, or undefined when it names something that exists. */
function problem(variant: string): string | undefined {
  if (/\$\d/.test(variant)) return undefined; // a back-reference to the `from` match: nothing to look up
  if (!variant.startsWith("^")) {
    const regex = new RegExp(variant);
    return tracked.some((file) => regex.test(file)) || fs.existsSync(path.join(root, variant))
      ? undefined
      : "matches no tracked file";
  }
  const literal = variant.slice(1).replace(/\$$/, "").replaceAll("\\.", ".");
  if (!/[[\]*+?(){}|\\^$]/.test(literal))
    return fs.existsSync(path.join(root, literal)) ? undefined : `${literal} does not exist`;
  const regex = new RegExp(variant);
  return tracked.some((file) => regex.test(file)) ? undefined : `matches no tracked file`;
}

function patterns(selector: PathSelector | undefined): string[] {
  return [selector?.path ?? [], selector?.pathNot ?? []].flat();
}

describe(".dependency-cruiser.cjs", () => {
  it("names only paths that exist, in every rule", () => {
    const named: [string, string][] = [
      ...config.forbidden.flatMap((rule) =>
        [...patterns(rule.from), ...patterns(rule.to)].map((pattern): [string, string] => [rule.name, pattern]),
      ),
      ...[...patterns(config.options.doNotFollow), ...patterns(config.options.exclude)].map(
        (pattern): [string, string] => ["options", pattern],
      ),
    ];
    expect(named.length).toBeGreaterThan(10);
    const problems = named.flatMap(([rule, pattern]) =>
      // `(^|/)node_modules/x/` is anchored at the top of the repository or any folder: look at the top.
      expand(pattern.replaceAll("(^|/)", "^")).flatMap((variant) => {
        const wrong = problem(variant);
        return wrong ? [`${rule}: ${pattern} (as ${variant}): ${wrong}`] : [];
      }),
    );
    expect(problems).toEqual([]);
  });

  it("would catch a renamed file", () => {
    expect(problem("^src/server\\.ts$")).toBe("src/server.ts does not exist");
    expect(problem("^src/platform-server\\.ts$")).toBeUndefined();
    expect(expand("^src/(a|b)/(c|d)\\.ts$")).toEqual([
      "^src/a/c\\.ts$",
      "^src/a/d\\.ts$",
      "^src/b/c\\.ts$",
      "^src/b/d\\.ts$",
    ]);
  });
});
