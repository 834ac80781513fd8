/**
 * Every `PlatformError` code, as @grpc/grpc-js and Python grpcio read it:
 * the exact gRPC status code and message, through the server's own protocol
 * stack (`registerConnectRoutes`: the short path, connect-fastify, the
 * interceptor's error mapping, Trailers-Only), unary (grpc-js without a
 * deadline takes the short path, grpcio's deadline takes Connect's handler)
 * and server-streaming. The calls reach a service that refuses with the code
 * its request names (the health service's schema, served by a test-only
 * implementation), so codes no real call can be made to produce on demand
 * (`internal`, `unavailable`, `upstream_error`, `idempotency_key_in_use`) are
 * covered as well; grpc-libraries.test.ts provokes the common ones through
 * the facilities' real calls.
 */
import { create, toBinary } from "@bufbuild/protobuf";
import type { ConnectRouter } from "@connectrpc/connect";
import type { FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Health, HealthCheckRequestSchema } from "../../gen/grpc/health/v1/health_pb.js";
import type { Authenticator } from "../../src/core/auth.ts";
import { loadConfig } from "../../src/core/config.ts";
import { createDatabaseHealth } from "../../src/core/database/health.ts";
import { ERROR_CODES, PlatformError, type ErrorCode } from "../../src/core/errors.ts";
import { BODY_LIMIT_BYTES } from "../../src/core/http/body-parsers.ts";
import { createConnectInterceptor } from "../../src/core/http/connect-interceptor.ts";
import { registerConnectRoutes } from "../../src/core/http/connect-routes.ts";
import { createHttpServer, createListener } from "../../src/core/http/http-server.ts";
import { createLogger } from "../../src/core/logger.ts";
import { createMetrics } from "../../src/core/metrics.ts";
import { closeGrpcJsClients, grpcioCalls, grpcJsCall, type LibraryCall } from "../support/grpc-libraries.ts";

/** The gRPC status of each code, written out (not read from errors.ts): a changed mapping must fail here. */
const GRPC_STATUS: Record<ErrorCode, number> = {
  invalid_argument: 3,
  unauthenticated: 16,
  app_stopped: 7,
  permission_denied: 7,
  not_found: 5,
  secret_not_set: 9,
  conflict: 10,
  failed_precondition: 9,
  payload_too_large: 8,
  quota_exceeded: 8,
  queue_full: 8,
  too_many_links: 8,
  idempotency_key_in_use: 10,
  idempotency_key_reused: 3,
  not_configured: 12,
  upstream_error: 14,
  unavailable: 14,
  rate_limited: 8,
  internal: 13,
  deadline_exceeded: 4,
  unimplemented: 12,
};

/** What the refusal of `code` says: with `/`, `:` and a non-ASCII character, which grpc-message must carry. */
const messageOf = (code: string) => `refused: ${code} / ünïcode`;

let fastify: FastifyInstance;
let url = "";
beforeAll(async () => {
  const logger = createLogger("silent");
  const listener = createListener({ tls: undefined, timeouts: loadConfig({}).http });
  fastify = createHttpServer({
    logger,
    metrics: createMetrics(),
    listener,
    databaseHealth: createDatabaseHealth(),
  });
  // Every call is public here: the service under test only refuses.
  const authenticator: Authenticator = { authenticate: () => Promise.resolve({ kind: "public" }), invalidate() {} };
  const refuse = (code: string) => new PlatformError(code as ErrorCode, messageOf(code));
  const impl = {
    check(req: { service: string }): never {
      throw refuse(req.service);
    },
    // eslint-disable-next-line require-yield
    async *watch(req: { service: string }): AsyncGenerator<never> {
      await Promise.resolve();
      throw refuse(req.service);
    },
    list(): never {
      throw refuse("internal");
    },
  };
  await registerConnectRoutes(fastify, {
    routes: (router: ConnectRouter) => void router.service(Health, impl),
    services: [{ service: Health, impl }],
    interceptors: [createConnectInterceptor(authenticator, logger, createDatabaseHealth())],
    readMaxBytes: BODY_LIMIT_BYTES,
    metrics: createMetrics(),
  });
  await fastify.ready();
  url = await listener.listen(0, "127.0.0.1");
});
afterAll(async () => {
  closeGrpcJsClients();
  await fastify?.close();
});

const request = (code: string) =>
  toBinary(HealthCheckRequestSchema, create(HealthCheckRequestSchema, { service: code }));
const unary = (code: string): LibraryCall => ({ path: "/grpc.health.v1.Health/Check", request: request(code) });
const stream = (code: string): LibraryCall => ({
  path: "/grpc.health.v1.Health/Watch",
  request: request(code),
  stream: true,
});

describe("every PlatformError code over gRPC", () => {
  it("the table names every code", () => {
    expect(Object.keys(GRPC_STATUS).sort()).toEqual([...ERROR_CODES].sort());
  });

  it("@grpc/grpc-js: unary (the short path), with a deadline (Connect's handler), and a stream", async () => {
    for (const code of ERROR_CODES) {
      for (const call of [unary(code), { ...unary(code), timeoutSeconds: 30 }, stream(code)]) {
        const answer = await grpcJsCall(url, call);
        expect({ code, path: call.path, status: answer.code, details: answer.details }).toEqual({
          code,
          path: call.path,
          status: GRPC_STATUS[code],
          details: messageOf(code),
        });
      }
    }
  });

  it("grpcio: unary and a stream", async () => {
    const calls = ERROR_CODES.flatMap((code) => [unary(code), stream(code)]);
    const answers = await grpcioCalls(url, calls);
    answers.forEach((answer, i) => {
      const code = ERROR_CODES[Math.floor(i / 2)];
      expect({ code, path: calls[i].path, status: answer.code, details: answer.details }).toEqual({
        code,
        path: calls[i].path,
        status: GRPC_STATUS[code],
        details: messageOf(code),
      });
    });
  });
});
