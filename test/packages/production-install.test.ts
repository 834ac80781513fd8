/**
 * A production install (`npm ci --omit=dev && npm start`, docs/production.md "Installing
 * without dev dependencies") has no dev dependencies: nothing the server, the CLI or the start
 * and install scripts import may be one. Every module reachable by static or
 * dynamic `import` from those entry points is read, and each package it names
 * must be a dependency in package.json (or Node's own). The one exception is
 * Vite in the dashboard build, loaded only where it is installed. The whole
 * install, packed and started, is checked by `npm run check:production`.
 */
import { builtinModules } from "node:module";
import fs from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";

const root = path.resolve(import.meta.dirname, "../..");
const pkg = JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8")) as {
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
  scripts: Record<string, string>;
  files: string[];
};

/** What `npm start`, `npm run cli`, the `platform-batteries` command and `npm install` (prepare) run. */
const ENTRY_POINTS = [
  "src/main.ts",
  "src/bin.ts",
  "src/cli.ts",
  "scripts/build-embedded-template.ts",
  "scripts/build-dashboard.ts",
];
/** Dev-only packages a runtime module may import, guarded by their presence. */
const GUARDED: Record<string, string[]> = { "scripts/build-dashboard.ts": ["vite"] };

const IMPORT =
  /(?:^|[^.\w])(?:import|export)\s[^;]*?\sfrom\s*["']([^"']+)["']|\bimport\s*\(\s*["']([^"']+)["']\s*\)|^import\s*["']([^"']+)["']/gm;

function packageOf(specifier: string): string {
  const parts = specifier.split("/");
  return specifier.startsWith("@") ? parts.slice(0, 2).join("/") : parts[0];
}

/** Every package named by a module reachable from `entries`: package -> the first module that imports it. */
function packagesReachedFrom(entries: string[]): Map<string, string> {
  const seen = new Set<string>();
  const packages = new Map<string, string>();
  const queue = entries.map((entry) => path.join(root, entry));
  while (queue.length > 0) {
    const file = queue.pop()!;
    if (seen.has(file)) continue;
    seen.add(file);
    const source = fs.readFileSync(file, "utf8").replace(/^\s*(\/\/.*|\*.*|\/\*\*.*)$/gm, "");
    const from = path.relative(root, file);
    for (const match of source.matchAll(IMPORT)) {
      const specifier = match[1] ?? match[2] ?? match[3];
      if (specifier.startsWith(".")) {
        const target = path.resolve(path.dirname(file), specifier);
        // Generated code is imported as .js and stored as .ts.
        queue.push(fs.existsSync(target) ? target : target.replace(/\.js$/, ".ts"));
      } else if (!specifier.startsWith("node:") && !builtinModules.includes(specifier)) {
        const name = packageOf(specifier);
        if (!GUARDED[from]?.includes(name) && !packages.has(name)) packages.set(name, from);
      }
    }
  }
  return packages;
}

describe("the production install (package.json)", () => {
  it("nothing the server, the CLI or the install and start scripts import is a dev dependency", () => {
    const reached = packagesReachedFrom(ENTRY_POINTS);
    expect(reached.size).toBeGreaterThan(10);
    const notDependencies = [...reached].filter(([name]) => !(name in pkg.dependencies));
    expect(notDependencies).toEqual([]);
  });

  it("Node 24 is a dependency, and neither install nor start needs a dev tool", () => {
    expect(pkg.dependencies.node).toMatch(/^\^?24\./);
    for (const script of ["prepare", "prestart", "start"]) {
      for (const tool of ["tsc", "vite", "eslint", "playwright", "vitest"])
        expect(pkg.scripts[script], `${script} runs ${tool}`).not.toMatch(new RegExp(`\\b${tool}\\b`));
    }
    // The packed package carries what a production install serves: the built dashboard and client.
    expect(pkg.files).toEqual(expect.arrayContaining(["dashboard/dist", "client/dist", "scripts", "src", "gen"]));
    expect(pkg.scripts.prepack).toBe("npm run build");
  });
});

describe("an install with npm on an older Node (.npmrc, scripts/build-embedded-template.ts)", () => {
  it("hides npm's engine warnings and says in one line why Node 24 comes with the install", async () => {
    // A fresh `npm ci` by Node 20's npm printed 105 lines of EBADENGINE for packages that never run on it.
    expect(fs.readFileSync(path.join(root, ".npmrc"), "utf8")).toMatch(/^loglevel=error$/m);
    const { olderNodeNote } = await import("../../scripts/build-embedded-template.ts");
    const agent = (node: string) => `npm/11.19.1 node/${node} linux x64 workspaces/false`;
    const note = olderNodeNote({ npm_lifecycle_event: "prepare", npm_config_user_agent: agent("v20.20.2") });
    expect(note).toMatch(/^npm runs on Node v20\.20\.2 here; this install brought Node 24\.[^\n]*\n$/);
    expect(olderNodeNote({ npm_lifecycle_event: "prepare", npm_config_user_agent: agent("v24.21.0") })).toBeUndefined();
    // Only at install (`prepare`), not when `npm start` runs the script.
    expect(
      olderNodeNote({ npm_lifecycle_event: "prestart", npm_config_user_agent: agent("v20.20.2") }),
    ).toBeUndefined();
  });
});
