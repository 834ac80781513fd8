/**
 * The service's pino logger. Headers are never logged (they carry tokens),
 * nor bodies (they carry values); request lines carry the route template
 * and the request id only.
 */
import { pino, type DestinationStream, type Logger } from "pino";

export function createLogger(level: string, destination?: DestinationStream): Logger {
  const options = {
    level,
    base: { service: "platform-batteries" },
    redact: {
      paths: ["req.headers", "headers.authorization", "token", "value", "*.token", "*.value"],
      censor: "[redacted]",
    },
  };
  return destination ? pino(options, destination) : pino(options);
}
