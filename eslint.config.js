// ESLint: typescript-eslint's type-checked recommendations over the whole
// repository, so an `eslint-disable` comment marks a real, explained exception.
// The module boundaries are checked by dependency-cruiser (.dependency-cruiser.cjs).
import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["gen/**", "node_modules/**", "docs/**", "coverage/**", "**/dist/**", "test-artifacts/**"] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      // `_`-prefixed names are deliberately unused (positional parameters, ignored parts).
      "@typescript-eslint/no-unused-vars": [
        "error",
        { argsIgnorePattern: "^_", varsIgnorePattern: "^_", caughtErrors: "none" },
      ],
      // An async function that only returns is how a Promise-returning interface
      // method is implemented here; \`no-floating-promises\`, \`no-misused-promises\`
      // and \`await-thenable\` still catch the mistakes this rule is after.
      "@typescript-eslint/require-await": "off",
    },
  },
  {
    // Connect marks these "@private Internal code, does not follow semantic
    // versioning": the service uses only Connect's public API, so an update
    // of Connect cannot break it unannounced (see connect-short-path.ts).
    files: ["src/**/*.ts"],
    rules: {
      "no-restricted-imports": [
        "error",
        {
          patterns: [
            {
              regex: "^@connectrpc/connect/protocol",
              message:
                "Connect's internal code (no semantic versioning): use the public API of @connectrpc/connect, -node or -fastify.",
            },
          ],
        },
      ],
      // The same for `import()` and `require()`, which no-restricted-imports does not see.
      "no-restricted-syntax": [
        "error",
        {
          selector: "ImportExpression[source.value=/^@connectrpc\\u002Fconnect\\u002Fprotocol/]",
          message: "Connect's internal code (no semantic versioning): use its public API.",
        },
        {
          selector:
            "CallExpression[callee.name='require'][arguments.0.value=/^@connectrpc\\u002Fconnect\\u002Fprotocol/]",
          message: "Connect's internal code (no semantic versioning): use its public API.",
        },
      ],
    },
  },
  {
    // Tests and benchmarks read JSON answers (`res.body.x`, `await res.json()`),
    // which are `any` by nature; every other type-checked rule still applies.
    files: ["test/**/*.ts", "bench/**/*.ts", "client/test/**/*.ts"],
    rules: {
      "@typescript-eslint/no-unsafe-member-access": "off",
      "@typescript-eslint/no-unsafe-assignment": "off",
      "@typescript-eslint/no-unsafe-argument": "off",
      "@typescript-eslint/no-unsafe-call": "off",
      "@typescript-eslint/no-unsafe-return": "off",
    },
  },
  { files: ["**/*.js", "**/*.cjs"], ...tseslint.configs.disableTypeChecked },
  {
    files: ["**/*.cjs"],
    languageOptions: { sourceType: "commonjs", globals: { module: "writable", require: "readonly" } },
  },
);
