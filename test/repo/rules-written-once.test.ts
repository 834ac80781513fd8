/**
 * Rules that used to be written twice, each now with one source; these tie
 * every other place to it, so that a second copy fails here instead of
 * drifting (one copy ignored case, another did not).
 */
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { isUuid } from "../../src/core/apps/apps.ts";

const root = path.resolve(import.meta.dirname, "../..");
const sources = execFileSync("git", ["ls-files", "src"], { cwd: root, encoding: "utf8" })
  .split("\n")
  .filter((file) => /\.tsx?$/.test(file) && fs.existsSync(path.join(root, file)));
const text = new Map(sources.map((file) => [file, fs.readFileSync(path.join(root, file), "utf8")]));

/** The source files whose text matches `pattern`. */
function filesMatching(pattern: RegExp): string[] {
  return sources.filter((file) => pattern.test(text.get(file)!));
}

describe("rules written once", () => {
  it("the UUID shape: one pattern (core/apps/apps.ts `isUuid`), either case", () => {
    expect(filesMatching(/\[0-9a-f\]\{8\}-/i)).toEqual(["src/core/apps/apps.ts"]);
    expect(isUuid("0196a3c4-5b6d-7e8f-9a0b-1c2d3e4f5a6b")).toBe(true);
    expect(isUuid("0196A3C4-5B6D-7E8F-9A0B-1C2D3E4F5A6B")).toBe(true);
    expect(isUuid("0196a3c4-5b6d-7e8f-9a0b-1c2d3e4f5a6")).toBe(false);
  });

  it("a token's last use: one statement (core/apps/app-store.ts `markTokenUsedIn`) for app and operator tokens", () => {
    expect(filesMatching(/SET last_used_at|set\(\{ last_used_at/)).toEqual(["src/core/apps/app-store.ts"]);
    expect(text.get("src/core/operators/operator-store.ts")).toMatch(/markTokenUsedIn\(db, "operator_tokens"/);
  });
});
