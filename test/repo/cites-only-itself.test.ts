/**
 * The repository cites only itself: no tracked file names the external
 * specification or design documents the project was first built from (a
 * reader of this repository cannot open them). What the code relies on is
 * stated in docs/ (docs/api.md: the API, its limits, error codes and what
 * always holds; docs/configuration.md; the facility pages), and that is what
 * comments and docs cite. CHANGELOG.md is history and may quote them. Nor
 * do they cite an issue of the tracker by its number, which a reader cannot
 * open either: a comment says what its check is about.
 */
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";

const root = path.resolve(import.meta.dirname, "../..");
// Spelled in pieces so that this file does not name them itself.
const external = new RegExp(`\\b(${["SP" + "EC", "DES" + "IGN"].join("|")})\\.md\\b`, "i");
const allowed = new Set(["CHANGELOG.md"]);
const trackerIssue = /\bissues? #?\d+\b/i;

describe("the repository's citations", () => {
  it("never name the external specification or design documents, or an issue by number, outside CHANGELOG.md", () => {
    const files = execFileSync("git", ["ls-files", "-z"], { cwd: root, encoding: "utf8" })
      .split("\0")
      .filter((file) => file && !allowed.has(file));
    expect(files.length).toBeGreaterThan(100);
    const citing: string[] = [];
    for (const file of files) {
      const full = path.join(root, file);
      if (!fs.existsSync(full)) continue; // deleted in the work tree, not yet committed
      const bytes = fs.readFileSync(full);
      if (bytes.includes(0)) continue; // binary
      bytes
        .toString("utf8")
        .split("\n")
        .forEach((line, i) => {
          if (external.test(line) || trackerIssue.test(line)) citing.push(`${file}:${i + 1}: ${line.trim()}`);
        });
    }
    expect(citing, "cite docs/ instead, and state the rule there in the project's own words").toEqual([]);
  });

  it("would find a citation", () => {
    expect(external.test(`see ${"SP" + "EC"}.md section 7`)).toBe(true);
    expect(external.test(`(${"des" + "ign"}.md)`)).toBe(true);
    expect(external.test("docs/api.md#errors")).toBe(false);
    expect(trackerIssue.test(`(${"iss" + "ue"} 20 section 1)`)).toBe(true);
    expect(trackerIssue.test(`${"iss" + "ues"} 18 and 20`)).toBe(true);
    expect(trackerIssue.test("issue a token")).toBe(false);
  });
});
