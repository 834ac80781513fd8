/**
 * The service's pino logger. Headers are never logged (they carry tokens),
 * nor bodies (they carry values); request lines carry the route template
 * and the request id only.
 *
 * Errors are logged through `serializeError`: pino's own serializer copies
 * every enumerable property of an error, and some errors carry what they were
 * given. Node's HTTP parser leaves the bytes it had read on a client error
 * (`rawPacket`: a request line with a secret link's token, an Authorization
 * header, part of a body), which fastify logs at `trace` on a TLS server; a
 * database error carries the statement's parameters (PGlite's `params`), its
 * text, and a `detail` that quotes a row ("Key (x)=(value) already exists").
 * Those properties are dropped, at every depth of the error's causes.
 */
import { pino, stdSerializers, type DestinationStream, type Logger } from "pino";

/** Properties of an error that may hold request bytes, statement values or row contents. */
const UNLOGGED_ERROR_FIELDS = ["rawPacket", "params", "parameters", "query", "detail", "where", "internalQuery"];

/** pino's error serializer, without the fields above (on the error and on its causes). */
export function serializeError(err: unknown): unknown {
  return err instanceof Error ? withoutValues(stdSerializers.err(err), 0) : err;
}

function withoutValues(serialized: unknown, depth: number): unknown {
  if (serialized === null || typeof serialized !== "object" || depth > 8) return serialized;
  const out = { ...(serialized as Record<string, unknown>) };
  for (const field of UNLOGGED_ERROR_FIELDS) delete out[field];
  if ("cause" in out) out.cause = withoutValues(out.cause, depth + 1);
  if (Array.isArray(out.aggregateErrors))
    out.aggregateErrors = out.aggregateErrors.map((e: unknown) => withoutValues(e, depth + 1));
  return out;
}

export function createLogger(level: string, destination?: DestinationStream): Logger {
  const options = {
    level,
    base: { service: "platform-batteries" },
    serializers: { err: serializeError },
    redact: {
      paths: ["req.headers", "headers.authorization", "token", "value", "*.token", "*.value"],
      censor: "[redacted]",
    },
  };
  return destination ? pino(options, destination) : pino(options);
}
