/**
 * The README stays a front page: what the service is, the two commands, the
 * quick start and where to go next, in at most 250 lines. Everything else
 * lives in docs/ (docs/configuration.md, docs/production.md, docs/cli.md,
 * docs/development.md, ...), which the README's last table points to.
 */
import fs from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";

const root = path.resolve(import.meta.dirname, "../..");

describe("README.md", () => {
  it("is at most 250 lines, and every docs/ page it links to exists", () => {
    const readme = fs.readFileSync(path.join(root, "README.md"), "utf8");
    expect(readme.split("\n").length).toBeLessThanOrEqual(250);
    const linked = [...readme.matchAll(/\]\(((?:docs\/)?[\w./-]+\.md)(?:#[\w-]+)?\)/g)].map((m) => m[1]);
    expect(linked).toContain("docs/configuration.md");
    expect(linked.filter((file) => !fs.existsSync(path.join(root, file)))).toEqual([]);
  });
});
