/**
 * The `HandlerContext` a REST route gives the facility's implementation: the
 * same interface Connect's own handlers give it, built for a call that is
 * already known to be one message in, one message out.
 *
 * The unary short path in front of connect-fastify (`connect-short-path.ts`)
 * uses it too, for the calls it takes (never one with a deadline).
 *
 * Why not `createHandlerContext` from `@connectrpc/connect`: it builds three
 * `Headers` (validating every request header), a deadline controller and a
 * linked controller for every call, eagerly, and that was about a tenth of the
 * server's CPU on a short REST call (`npm run bench:http`, `docs/benchmarks.md`).
 * Here the request headers, the response headers and trailers, and the abort
 * signal are made when first read; most calls read none of them.
 */
import type { DescMethod, DescService } from "@bufbuild/protobuf";
import type { ContextValues, HandlerContext } from "@connectrpc/connect";

export interface CallContextInit {
  service: DescService;
  method: DescMethod;
  protocolName: string;
  requestMethod: string;
  url: string;
  /** The request's headers as Node gives them (HTTP/1.1 or HTTP/2). */
  headers: object;
  /** Read when the implementation first reads `context.signal` (e.g. `clientGoneSignal`'s). */
  signal: { readonly signal: AbortSignal };
  values: ContextValues;
  /** Response headers and trailers the call starts with (e.g. a protocol's content type). */
  responseHeader?: Record<string, string>;
  responseTrailer?: Record<string, string>;
}

/**
 * A `HandlerContext` whose headers and signal are made on first use; `responseHeaders()` and
 * `responseTrailers()` tell whether any were set.
 */
export interface CallContext extends HandlerContext {
  /** The response headers so far, or undefined when nobody touched them (nor gave initial ones). */
  responseHeaders(): Headers | undefined;
  /** The response trailers so far, or undefined when nobody touched them (nor gave initial ones). */
  responseTrailers(): Headers | undefined;
}

class LazyCallContext implements CallContext {
  readonly method: DescMethod;
  readonly service: DescService;
  readonly protocolName: string;
  readonly requestMethod: string;
  readonly url: string;
  readonly values: ContextValues;
  readonly #headers: object;
  readonly #signal: { readonly signal: AbortSignal };
  readonly #init: CallContextInit;
  #requestHeader: Headers | undefined;
  #responseHeader: Headers | undefined;
  #responseTrailer: Headers | undefined;

  constructor(init: CallContextInit) {
    this.method = init.method;
    this.service = init.service;
    this.protocolName = init.protocolName;
    this.requestMethod = init.requestMethod;
    this.url = init.url;
    this.values = init.values;
    this.#headers = init.headers;
    this.#signal = init.signal;
    this.#init = init;
  }

  get signal(): AbortSignal {
    return this.#signal.signal;
  }

  readonly timeoutMs = (): number | undefined => undefined;

  get requestHeader(): Headers {
    return (this.#requestHeader ??= new Headers(plainHeaders(this.#headers)));
  }

  get responseHeader(): Headers {
    return (this.#responseHeader ??= new Headers(this.#init.responseHeader));
  }

  get responseTrailer(): Headers {
    return (this.#responseTrailer ??= new Headers(this.#init.responseTrailer));
  }

  responseHeaders(): Headers | undefined {
    return this.#responseHeader ?? (this.#init.responseHeader ? this.responseHeader : undefined);
  }

  responseTrailers(): Headers | undefined {
    return this.#responseTrailer ?? (this.#init.responseTrailer ? this.responseTrailer : undefined);
  }
}

export function createCallContext(init: CallContextInit): CallContext {
  return new LazyCallContext(init);
}

/**
 * The request's headers as the `Headers` constructor accepts them. Over
 * HTTP/2, Node's headers object also carries pseudo-headers (`:path`) and a
 * `Symbol(sensitiveHeaders)` key, which `new Headers()` refuses with a
 * TypeError; repeated headers arrive as arrays.
 */
function plainHeaders(headers: object): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers) as [string, unknown][]) {
    if (name.startsWith(":")) continue;
    if (typeof value === "string") out[name] = value;
    else if (Array.isArray(value)) out[name] = value.filter((v) => typeof v === "string").join(", ");
  }
  return out;
}
