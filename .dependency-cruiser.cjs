/**
 * The module boundaries of ARCHITECTURE.md, checked in CI (`npm run lint`).
 * Facilities: analytics, mail, inference, queues, secrets, admin, meta.
 */
const FACILITY = "(analytics|mail|inference|queues|secrets|admin|meta)";

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: "facility-internals",
      comment:
        "A facility uses another facility only through that facility's index.ts (its public interface), never its internals.",
      severity: "error",
      from: { path: `^src/${FACILITY}/` },
      to: { path: `^src/${FACILITY}/`, pathNot: [`^src/$1/`, `^src/${FACILITY}/index\\.ts$`] },
    },
    {
      name: "core-independent",
      comment:
        "The core knows no facility and no composition root or entry point (every file at the top of src/: platform-server.ts, facilities.ts, run-server.ts, main.ts, bin.ts, cli.ts, ...): facilities depend on the core, never the other way round.",
      severity: "error",
      from: { path: "^src/core/" },
      to: { path: [`^src/${FACILITY}/`, "^src/[^/]+\\.ts$"] },
    },
    {
      name: "service-without-http",
      comment:
        "A service implementation (*-service.ts) is protocol-neutral: it never imports HTTP code (fastify, the Connect Node adapter, core/http).",
      severity: "error",
      from: { path: "-service\\.ts$" },
      to: { path: ["(^|/)node_modules/fastify/", "(^|/)node_modules/@connectrpc/connect-node/", "^src/core/http/"] },
    },
    {
      name: "sql-only-in-stores",
      comment:
        "Only stores (*-store.ts, and the queue store's parts in src/queues/store/) and the database core (src/core/database/) hold SQL: nothing else imports kysely, pg or PGlite.",
      severity: "error",
      from: { path: "^src/", pathNot: ["-store\\.ts$", "^src/queues/store/", "^src/core/database/"] },
      to: { path: ["(^|/)node_modules/(kysely|pg|@electric-sql/pglite|kysely-pglite-dialect)/"] },
    },
    {
      name: "routes-are-tables",
      comment: "A route table (*-routes.ts) maps JSON onto its own facility's service; it reads no store.",
      severity: "error",
      from: { path: "-routes\\.ts$" },
      to: { path: ["-store\\.ts$", "^src/queues/store/"] },
    },
    {
      name: "no-circular",
      comment: "No import cycles (type-only imports excepted: they vanish at run time).",
      severity: "error",
      from: { path: "^src/" },
      to: { circular: true, dependencyTypesNot: ["type-only"] },
    },
    {
      name: "src-not-from-tests",
      comment: "The service never imports test or benchmark code.",
      severity: "error",
      from: { path: "^src/" },
      to: { path: "^(test|bench)/" },
    },
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    exclude: { path: "^gen/" },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.json" },
    enhancedResolveOptions: {
      exportsFields: ["exports"],
      conditionNames: ["import", "require", "node", "default", "types"],
    },
  },
};
