/**
 * The SPEC.md `/v1` JSON routes. Each route names the RPC it serves; the
 * router authenticates with the same `Authenticator` as the Connect
 * interceptor, builds the RPC's request message from the JSON request, calls
 * the facility's one implementation with a handler context carrying the
 * caller, and maps the response message onto SPEC.md's JSON shape. Errors are
 * thrown as `PlatformError` and rendered by the server's one error handler.
 */
import { create, type DescMethodUnary, type DescMessage, type MessageInitShape, type MessageShape } from "@bufbuild/protobuf";
import { createContextValues, createHandlerContext, type ServiceImpl } from "@connectrpc/connect";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { z } from "zod";
import { principalKey, type Authenticator } from "../auth.ts";
import { PlatformError } from "../errors.ts";

export interface RestInput {
  /** The parsed JSON body; `undefined` when the request had none. */
  body: unknown;
  params: Record<string, string>;
  query: Record<string, string | string[] | undefined>;
}

export interface RestRoute<I extends DescMessage, O extends DescMessage> {
  method: "GET" | "POST" | "PUT" | "DELETE";
  url: string;
  rpc: DescMethodUnary<I, O>;
  /** Builds the RPC request; throws `invalidArgument` naming the field for a wrong JSON shape. */
  request?: (input: RestInput) => MessageInitShape<I>;
  /** SPEC.md's JSON shape of the response. */
  response: (output: MessageShape<O>) => unknown;
}

export interface RestRouter {
  route<I extends DescMessage, O extends DescMessage>(spec: RestRoute<I, O>): void;
}

export function createRestRouter(
  fastify: FastifyInstance,
  authenticator: Authenticator,
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  impl: ServiceImpl<any>,
): RestRouter {
  return {
    route(spec) {
      const handler = impl[spec.rpc.localName] as
        | ((req: MessageShape<DescMessage>, ctx: ReturnType<typeof createHandlerContext>) => Promise<unknown> | unknown)
        | undefined;
      if (!handler) throw new Error(`no implementation of ${spec.rpc.parent.typeName}/${spec.rpc.name} for ${spec.url}`);
      fastify.route({
        method: spec.method,
        url: spec.url,
        handler: async (req: FastifyRequest, reply: FastifyReply) => {
          const principal = await authenticator.authenticate(req.headers.authorization, spec.rpc);
          const input: RestInput = {
            body: req.body,
            params: (req.params ?? {}) as Record<string, string>,
            query: (req.query ?? {}) as Record<string, string>,
          };
          const message = create(spec.rpc.input, spec.request ? spec.request(input) : undefined);
          const abort = new AbortController();
          // A client that goes away ends its request (a waiting consume stops waiting).
          reply.raw.once("close", () => {
            if (!reply.raw.writableFinished) abort.abort(new PlatformError("internal", "client went away"));
          });
          const context = createHandlerContext({
            service: spec.rpc.parent,
            method: spec.rpc,
            protocolName: "rest",
            requestMethod: req.method,
            url: req.url,
            requestHeader: plainHeaders(req.headers),
            requestSignal: abort.signal,
            contextValues: createContextValues().set(principalKey, principal),
          });
          const output = await handler.call(impl, message, context);
          const result = create(spec.rpc.output, output as MessageInitShape<typeof spec.rpc.output>);
          return reply.code(200).send(spec.response(result));
        },
      });
    },
  };
}

/**
 * The request's headers as the `Headers` constructor accepts them. Over
 * HTTP/2, Node's headers object also carries pseudo-headers (`:path`) and a
 * `Symbol(sensitiveHeaders)` key, which `new Headers()` refuses with a
 * TypeError; repeated headers arrive as arrays.
 */
export function plainHeaders(headers: object): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers) as [string, unknown][]) {
    if (name.startsWith(":")) continue;
    if (typeof value === "string") out[name] = value;
    else if (Array.isArray(value)) out[name] = value.filter((v) => typeof v === "string").join(", ");
  }
  return out;
}

/**
 * Parses a JSON value with a zod schema; a mismatch is a 400 whose message
 * names the first bad field and the rule, with every issue in `details`.
 */
export function parseJson<T>(schema: z.ZodType<T>, value: unknown, root = "body"): T {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const details = result.error.issues.map((issue) => `${fieldPath(root, issue.path)}: ${issue.message}`);
  throw new PlatformError("invalid_argument", details[0] ?? `${root}: invalid`, { details });
}

function fieldPath(root: string, path: PropertyKey[]): string {
  let out = root;
  for (const part of path) out += typeof part === "number" ? `[${part}]` : `.${String(part)}`;
  return out.startsWith("body.") ? out.slice(5) : out;
}

/** `body` must be a JSON object (or absent, when `optional`). */
export function bodyObject(body: unknown, optional = false): Record<string, unknown> {
  if (body === undefined || body === null) {
    if (optional) return {};
    throw new PlatformError("invalid_argument", "body: must be a JSON object", { details: ["body: must be a JSON object"] });
  }
  if (typeof body !== "object" || Array.isArray(body)) {
    throw new PlatformError("invalid_argument", "body: must be a JSON object", { details: ["body: must be a JSON object"] });
  }
  return body as Record<string, unknown>;
}
