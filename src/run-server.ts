/**
 * Runs the server process: what `npm start` runs, through `main.ts` (which
 * imports this module only once the compile cache is on, so this module's own
 * imports are cached too). Configuration from the environment, then one
 * server on one port, stopped on SIGTERM/SIGINT. With no configuration at all
 * everything runs embedded (PGlite, SQL analytics, mail outbox, offline
 * inference).
 */
import { ConfigError, loadConfig } from "./core/config.ts";
import { adminTokenFile, resolveDataDirSecrets } from "./core/data-dir.ts";
import { createLogger } from "./core/logger.ts";
import { startPlatformServer } from "./platform-server.ts";

async function runServer(): Promise<void> {
  let config;
  try {
    config = loadConfig(process.env);
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`configuration error: ${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
  const logger = createLogger(config.logLevel);
  const { config: resolved, generatedAdminToken } = await resolveDataDirSecrets(config);
  // The log stays JSON lines a collector can parse, and never carries the token: it says where the
  // token is kept; only a person at a terminal is shown the token itself, once listening.
  if (generatedAdminToken) logger.info({ file: adminTokenFile(resolved.dataDir) }, "admin token generated");
  // Listening from here on (answering 503 until the database is open: it may still be starting).
  const server = await startPlatformServer({ config: resolved, logger });
  const url = await server.listen();
  logger.info(
    {
      url,
      ...(server.metricsUrl ? { metrics: `${server.metricsUrl}/metrics` } : {}),
      database: server.deps.database.kind === "pglite" ? `PGlite in ${resolved.dataDir}/pg` : "PostgreSQL",
      analytics: resolved.mongodbUrl ? "MongoDB" : "SQL store",
      mail: resolved.mailProvider === "ses" ? "Amazon SES v2" : "outbox (stored, never delivered)",
      inference:
        resolved.inferenceProvider === "bedrock" ? "Amazon Bedrock" : "built-in offline provider (not a real model)",
    },
    "platform batteries listening",
  );
  if (generatedAdminToken) {
    const terminal = process.stderr.isTTY ? process.stderr : process.stdout.isTTY ? process.stdout : undefined;
    terminal?.write(
      `\nAdmin token (shown once; kept in ${adminTokenFile(resolved.dataDir)}):\n  ${generatedAdminToken}\n` +
        `Next: npm run cli -- apps create my-app && npm run cli -- tokens issue my-app\n\n`,
    );
  }

  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, "shutting down");
    const force = setTimeout(() => process.exit(1), 30_000);
    force.unref();
    server.close().then(
      () => process.exit(0),
      (err: unknown) => {
        logger.error({ err }, "shutdown failed");
        process.exit(1);
      },
    );
  };
  process.on("SIGTERM", () => stop("SIGTERM"));
  process.on("SIGINT", () => stop("SIGINT"));
  // SIGHUP reloads the certificate (renewed in place by certbot, cert-manager, ...) without a restart.
  // Only with TLS: otherwise SIGHUP keeps its default (a closed terminal ends the process).
  if (resolved.tls) process.on("SIGHUP", () => void server.reloadTls());
}

runServer().catch((err: unknown) => {
  // A disagreement found at start (e.g. with the other instances on the database) names its variable, like a bad value.
  if (err instanceof ConfigError) {
    process.stderr.write(`configuration error: ${err.message}\n`);
    process.exit(2);
  }
  process.stderr.write(`failed to start: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
