/**
 * The ESLint rules that keep Connect's internal modules (`@connectrpc/connect/protocol*`,
 * no semantic versioning) out of `src/`: a static import, a dynamic `import()` and a
 * `require()` are each reported, and the public API is not. Runs the project's own
 * rule block (from eslint.config.js) on source text.
 */
import { ESLint, type Linter } from "eslint";
import { describe, expect, it } from "vitest";

// Loaded by path: the config is plain JavaScript without type declarations.
const configPath = "../../eslint.config.js";
const { default: config } = (await import(configPath)) as { default: Linter.Config[] };
const block = config.find((c) => c.files?.includes("src/**/*.ts") && c.rules?.["no-restricted-imports"] !== undefined);

async function reported(code: string): Promise<string[]> {
  const eslint = new ESLint({
    overrideConfigFile: true,
    overrideConfig: [{ files: ["**/*.js"], rules: block!.rules }],
  });
  const [result] = await eslint.lintText(code, { filePath: "probe.js" });
  return result.messages.map((m) => `${m.ruleId}: ${m.message}`);
}

describe("eslint.config.js: Connect's internal modules", () => {
  it("reports a static import, a dynamic import() and a require() of them", async () => {
    expect(block).toBeDefined();
    const internal = /Connect's internal code/;
    const cases = [
      'import { x } from "@connectrpc/connect/protocol";',
      'export const f = () => import("@connectrpc/connect/protocol-connect");',
      'export const g = () => require("@connectrpc/connect/protocol-grpc");',
    ];
    for (const code of cases) {
      const messages = await reported(code);
      expect(messages, code).toHaveLength(1);
      expect(messages[0], code).toMatch(internal);
    }
  });

  it("lets the public API through", async () => {
    expect(
      await reported(
        'import { Code } from "@connectrpc/connect";\nexport const f = () => import("@connectrpc/connect-node");\n',
      ),
    ).toEqual([]);
  });
});
