/**
 * The `/v1` JSON routes (docs/api.md). A facility describes its routes as a table
 * of `RestRoute` entries: the RPC each serves, the zod schemas of its JSON
 * body, query and path (walkable, e.g. to write an OpenAPI document), how the
 * parsed input becomes the RPC's request message, and how the response
 * message becomes the documented JSON shape. This router serves such a table: it
 * authenticates with the same `Authenticator` as the Connect interceptor,
 * parses the input with the schemas (a 400 naming the field otherwise), calls
 * the facility's one implementation with a handler context carrying the
 * caller, and maps the answer. Errors are thrown as `PlatformError` and
 * rendered by the server's one error handler.
 */
import {
  create,
  type DescMethodUnary,
  type DescMessage,
  type MessageInitShape,
  type MessageShape,
} from "@bufbuild/protobuf";
import { createContextValues, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { z } from "zod";
import { principalKey, reauthenticateKey, type Authenticator, type Principal } from "../auth.ts";
import { deliveryKey } from "../delivery.ts";
import { PlatformError, type ErrorCode } from "../errors.ts";
import { planOf, type RateLimiter } from "../limits/index.ts";
import { runAsTenant } from "../tenant.ts";
import { createCallContext } from "./call-context.ts";
import { clientGoneSignal } from "./client-gone.ts";
import { watchDelivery } from "./delivery-watch.ts";
import { NoBody, parseJson } from "./validation.ts";

const takesBody = (method: string) => method !== "GET" && method !== "HEAD";

/** The parsed parts of a request, as the route's schemas made them. */
interface RestInput<B, Q, P> {
  body: B;
  query: Q;
  params: P;
}

export interface RestRoute<
  I extends DescMessage = DescMessage,
  O extends DescMessage = DescMessage,
  B = unknown,
  Q = unknown,
  P = Record<string, string>,
> {
  method: "GET" | "POST" | "PUT" | "DELETE";
  url: string;
  rpc: DescMethodUnary<I, O>;
  /** The JSON body; absent means the body is not read. */
  body?: z.ZodType<B>;
  /** The query string. */
  query?: z.ZodType<Q>;
  /** The path parameters (`:name` segments). */
  params?: z.ZodType<P>;
  /** Builds the RPC request from the parsed input; may throw `invalid_argument` for rules across fields. */
  request?: (input: RestInput<B, Q, P>) => MessageInitShape<I>;
  /** The documented JSON shape of the response (docs/api.md); `request` is the RPC request it answers (a shape may depend on it). */
  response: (output: MessageShape<O>, request: MessageShape<I>) => unknown;
  /** What `response` returns, as a schema: the OpenAPI document's 200 body comes from it. */
  responseSchema?: z.ZodType;
  /** What the OpenAPI document says beyond the schemas (see `openapi.ts`). */
  doc?: RouteDoc;
  /**
   * Honours the `Idempotency-Key` header (see `idempotency.ts`), on this
   * route and on its RPC over Connect and gRPC: set on every POST that
   * changes state or spends allowance.
   */
  idempotent?: boolean;
}

/** The prose, error codes and examples of one operation in the OpenAPI document. */
interface RouteDoc {
  summary: string;
  description?: string;
  /** Error codes this operation answers besides the ones every authenticated route can (401, 500, 503). */
  errors: readonly ErrorCode[];
  /** A request body example (JSON). */
  requestExample?: unknown;
  /** A 200 body example (JSON). */
  responseExample: unknown;
  /** True for the routes without a token (`/health`, `/version`). */
  public?: boolean;
}

/** A route table entry of any RPC, as a table holds it. */
export type AnyRestRoute = RestRoute<DescMessage, DescMessage, unknown, unknown, unknown>;

/** Declares one route, typed against its RPC and schemas; the table keeps it untyped. */
export function defineRoute<
  I extends DescMessage,
  O extends DescMessage,
  B = unknown,
  Q = unknown,
  P = Record<string, string>,
>(route: RestRoute<I, O, B, Q, P>): AnyRestRoute {
  return route as unknown as AnyRestRoute;
}

type Handler = (req: unknown, ctx: HandlerContext) => unknown;

const clientWentAway = () => new PlatformError("internal", "client went away");

/** The caller, authenticated when the request's head arrived (see `registerRestRoutes`). */
interface AuthenticatedRequest extends FastifyRequest {
  principal: Principal | undefined;
}

/**
 * Registers a facility's route table; each route calls `impl`, the facility's one implementation.
 *
 * The caller is authenticated in the route's `onRequest`, before its body is read: a body of up to 32 MiB
 * from a client without a valid token is refused unread, not parsed and checked first.
 */
export function registerRestRoutes(
  fastify: FastifyInstance,
  authenticator: Authenticator,
  impl: ServiceImpl<never> | Record<string, unknown>,
  routes: readonly AnyRestRoute[],
  limiter?: RateLimiter,
): void {
  if (!fastify.hasRequestDecorator("principal")) fastify.decorateRequest("principal", undefined);
  for (const spec of routes) {
    const handler = (impl as Record<string, unknown>)[spec.rpc.localName] as Handler | undefined;
    if (typeof handler !== "function")
      throw new Error(`no implementation of ${spec.rpc.parent.typeName}/${spec.rpc.name} for ${spec.url}`);
    const checkHead = async (req: FastifyRequest, reply: FastifyReply) => {
      const principal = await authenticator.authenticate(req.headers.authorization, spec.rpc);
      (req as AuthenticatedRequest).principal = principal;
      // An app past its rate, or above its share of a saturated process, is refused before its body is read
      // and parsed (the full check follows it).
      if (limiter && principal.kind === "app" && spec.body) {
        const plan = { ...planOf(spec.rpc.parent.typeName, spec.rpc.name, undefined), early: true };
        const early = limiter.admit(principal.app, plan);
        if (early.refused) {
          for (const [name, value] of early.headers) void reply.header(name, value);
          await early.pause();
          throw early.refused;
        }
      }
    };
    fastify.route({
      method: spec.method,
      url: spec.url,
      // A callback hook, not an async one: a remembered token (most requests) is decided at once, without the
      // promises of the async path.
      onRequest: (req: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void) => {
        const known = authenticator.authenticateNow?.(req.headers.authorization, spec.rpc);
        if (known !== undefined && !(limiter && known.kind === "app" && spec.body)) {
          (req as AuthenticatedRequest).principal = known;
          return done();
        }
        checkHead(req, reply).then(() => done(), done);
      },
      handler: async (req: FastifyRequest, reply: FastifyReply) => {
        // A client that goes away ends its request (a waiting consume stops
        // waiting), whenever it goes: before the handler ran, too.
        const call = clientGoneSignal(reply.raw, clientWentAway);
        const principal = (req as AuthenticatedRequest).principal!;
        const input: RestInput<unknown, unknown, unknown> = {
          // An operation without a body schema takes none: a field sent to it would be dropped unread.
          body: spec.body
            ? parseJson(spec.body, req.body, "body")
            : takesBody(spec.method)
              ? parseJson(NoBody, req.body, "body")
              : undefined,
          query: spec.query ? parseJson(spec.query, req.query ?? {}, "query") : req.query,
          params: spec.params ? parseJson(spec.params, req.params ?? {}, "path") : req.params,
        };
        const message = create(spec.rpc.input, spec.request ? spec.request(input) : undefined);
        // The parsed JSON is not read again: not kept while the call runs (a batch of 1,000 events is ~180 KB).
        req.body = undefined;
        // The app's limits (docs/api.md#rate-limits): decided in memory, the headers on every answer.
        const admission =
          limiter && principal.kind === "app"
            ? limiter.admit(principal.app, {
                ...planOf(spec.rpc.parent.typeName, spec.rpc.name, message),
                afterHead: spec.body !== undefined,
              })
            : undefined;
        if (admission) {
          for (const [name, value] of admission.headers) void reply.header(name, value);
          if (admission.refused) {
            call.done();
            await admission.pause();
            throw admission.refused;
          }
        }
        const context = createCallContext({
          service: spec.rpc.parent,
          method: spec.rpc,
          protocolName: "rest",
          requestMethod: req.method,
          url: req.url,
          headers: req.headers,
          signal: call,
          values: createContextValues()
            .set(principalKey, principal)
            .set(deliveryKey, watchDelivery(reply.raw))
            .set(reauthenticateKey, () => authenticator.authenticate(req.headers.authorization, spec.rpc)),
        });
        // Headers the implementation set (e.g. `Idempotent-Replayed`), on an answer and on an error alike.
        const withHeaders = () => context.responseHeaders()?.forEach((value, name) => void reply.header(name, value));
        let output: unknown;
        try {
          output =
            principal.kind === "app"
              ? await runAsTenant(principal.app.id, () => handler.call(impl, message, context))
              : await handler.call(impl, message, context);
        } catch (err) {
          withHeaders();
          throw err;
        } finally {
          call.done();
          admission?.release();
        }
        const result = create(spec.rpc.output, output as MessageInitShape<DescMessage>);
        withHeaders();
        return reply.code(200).send(spec.response(result, message));
      },
    });
  }
}
