/**
 * `npm start`: the server's entry point. It turns on Node's compile cache
 * before any other module loads, then runs `run-server.ts`. The cache (in the OS's
 * temporary directory, or NODE_COMPILE_CACHE) keeps the compiled code of the
 * few thousand modules a start loads, which roughly halves the CPU a restart
 * spends loading them; a changed file is compiled again (it is keyed by content).
 */
import module from "node:module";

module.enableCompileCache();
await import("./run-server.ts");
