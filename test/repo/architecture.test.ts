/**
 * ARCHITECTURE.md's folder map tells the truth about `src/core`: every file
 * there is named in it (a migration by its folder, `migrations/`), under the
 * folder it lives in, and the map names no file that is gone. A new core file
 * fails this test until the map says what it is for.
 */
import fs from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";

const root = path.resolve(import.meta.dirname, "../..");
const architecture = fs.readFileSync(path.join(root, "ARCHITECTURE.md"), "utf8");
const map = /```\nsrc\/core\/\n([\s\S]*?)\nsrc\/<facility>\//.exec(architecture)?.[1] ?? "";

/** The map's entries per folder: `{ "": [...top-level text], "database": [...], ... }`, by the indented folder lines. */
function sections(): Map<string, string> {
  const bySection = new Map<string, string>();
  let current = "";
  for (const line of map.split("\n")) {
    const folder = /^ {2}([a-z-]+)\/\s/.exec(line)?.[1];
    if (folder) current = folder;
    else if (/^ {2}\S/.test(line)) current = "";
    bySection.set(current, (bySection.get(current) ?? "") + line + "\n");
  }
  return bySection;
}

describe("ARCHITECTURE.md's folder map of src/core", () => {
  it("names every file of src/core in the section of its folder, and nothing that is not there", () => {
    expect(map).not.toBe("");
    const bySection = sections();
    const files = fs
      .readdirSync(path.join(root, "src/core"), { recursive: true, withFileTypes: true })
      .filter((entry) => entry.isFile() && entry.name.endsWith(".ts"))
      .map((entry) => path.relative(path.join(root, "src/core"), path.join(entry.parentPath, entry.name)));
    const unlisted = files.filter((file) => {
      const parts = file.split(path.sep);
      if (parts[0] === "database" && parts[1] === "migrations")
        return !bySection.get("database")?.includes("migrations/");
      const section = parts.length > 1 ? parts[0] : "";
      return !new RegExp(`(^|[\\s(,])${parts.at(-1)!.replace(".", "\\.")}\\b`).test(bySection.get(section) ?? "");
    });
    expect(unlisted).toEqual([]);
    const named = [...map.matchAll(/([a-z0-9-]+\.ts)\b/g)].map((m) => m[1]);
    const existing = new Set(files.map((file) => path.basename(file)));
    expect(named.filter((name) => !existing.has(name))).toEqual([]);
  });
});
