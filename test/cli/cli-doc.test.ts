/**
 * docs/cli.md lists every command of the CLI and its output formats: a command
 * added to `src/cli.ts` without a line there, or a global option left out,
 * fails here. The doc groups commands (`apps create|get NAME`), so a name's
 * later words may sit in such a group.
 */
import fs from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { COMMANDS } from "../../src/cli.ts";

const root = path.resolve(import.meta.dirname, "../..");
const doc = fs.readFileSync(path.join(root, "docs/cli.md"), "utf8");

const escape = (word: string) => word.replace(/[-]/g, "\\-");

describe("docs/cli.md", () => {
  it("lists every command", () => {
    const missing = COMMANDS.map((c) => c.name).filter((name) => {
      const words = name.split(" ").map(escape);
      const inGroup = (w: string) => `(?:[\\w-]+\\|)*${w}(?:\\|[\\w-]+)*`;
      const pattern = new RegExp(`(?<![\\w-])${words.map(inGroup).join(" ")}(?![\\w-])`);
      return !pattern.test(doc);
    });
    expect(missing).toEqual([]);
  });

  it("describes --output table|json and --json", () => {
    expect(doc).toContain("--output table|json");
    expect(doc).toContain("--json");
  });
});
