/**
 * Error rendering for everything fastify serves outside Connect: every error
 * becomes the envelope `{ error: { code, message, details? } }` (docs/api.md#errors) with
 * the status of its code, so a status is chosen in one place. Errors that are
 * not ours are logged and answered `internal` without their text.
 */
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { OUTCOME_UNKNOWN_HEADER, PlatformError, noteAnswered, toEnvelope, toPlatformError } from "../errors.ts";
import { BODY_LIMIT_BYTES } from "./body-parsers.ts";
import type { DatabaseHealth } from "../database/index.ts";

export function registerErrorHandlers(fastify: FastifyInstance, health: DatabaseHealth): void {
  fastify.setErrorHandler((err: FastifyError | PlatformError, req, reply) => {
    const platformError = fromFastifyError(err);
    noteAnswered(platformError, { original: err, logger: req.log }, health);
    if (platformError.retryAfterSeconds !== undefined)
      void reply.header("retry-after", String(platformError.retryAfterSeconds));
    // A change that may have been made is flagged, so a client does not repeat it without its key (a read changes nothing).
    if ((platformError.mayHaveCommitted || platformError.outcomeUnknown) && req.method !== "GET")
      void reply.header(OUTCOME_UNKNOWN_HEADER, "true");
    // fastify asks to close the connection after a body it could not parse (the client may send more of it).
    // HTTP/2 has no such header: Node drops it with a process warning, and the stream ends on its own.
    if (req.raw.httpVersionMajor === 2) void reply.removeHeader("connection");
    return reply.code(platformError.status).send(toEnvelope(platformError));
  });
  fastify.setNotFoundHandler((req, reply) => {
    const err = new PlatformError("not_found", `no route ${req.method} ${req.url.split("?")[0]}`);
    return reply.code(404).send(toEnvelope(err));
  });
}

/** fastify's `frameworkErrors`: a path that is not valid percent-encoding never reaches a route; answer it with the envelope too. */
export function renderFrameworkError(err: FastifyError, req: FastifyRequest, reply: FastifyReply): void {
  const body = toEnvelope(
    new PlatformError("invalid_argument", "path: not a valid URL (bad percent-encoding)", {
      details: [`path: ${err.code}`],
    }),
  );
  void reply.code(400).header("x-request-id", req.id).send(body);
}

function fromFastifyError(err: FastifyError | PlatformError): PlatformError {
  if (err instanceof PlatformError) return err;
  const code = err.code;
  if (code === "FST_ERR_CTP_BODY_TOO_LARGE") {
    return new PlatformError("payload_too_large", `body: larger than ${BODY_LIMIT_BYTES} bytes`);
  }
  if (code === "FST_ERR_CTP_INVALID_MEDIA_TYPE") {
    return new PlatformError("invalid_argument", "content-type: must be application/json", {
      details: ["content-type: must be application/json"],
    });
  }
  const status = err.statusCode;
  if (typeof code === "string" && code.startsWith("FST_") && status !== undefined && status >= 400 && status < 500) {
    return new PlatformError("invalid_argument", "request: malformed", { details: [`request: ${code}`], cause: err });
  }
  return toPlatformError(err);
}
