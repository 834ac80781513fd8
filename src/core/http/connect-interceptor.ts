/**
 * The Connect/gRPC side of authentication, the app's limits and error
 * mapping: the same `Authenticator` as the REST router decides who calls (the
 * principal found at the call's head, `headPrincipalKey`, when there is one),
 * the app's limits admit the call (docs/api.md#rate-limits), and every error
 * leaves as a `ConnectError` carrying our string code (`toConnectError`), also
 * one a stream's messages end with: those leave through the response's
 * iterable, after `next` returned, so it is mapped there too (a stream that
 * threw a `PlatformError` was answered `internal`).
 */
import { ConnectError, type Interceptor } from "@connectrpc/connect";
import type { DescMethod } from "@bufbuild/protobuf";
import type { Logger } from "pino";
import { ErrorDetailSchema } from "../../../gen/platform/meta/v1/error_pb.js";
import { headPrincipalKey, principalKey, reauthenticateKey, type Authenticator } from "../auth.ts";
import { noteAnswered, toConnectError, toPlatformError } from "../errors.ts";
import type { DatabaseHealth } from "../database/index.ts";
import { planOf, type RateLimiter } from "../limits/index.ts";
import { runAsTenant } from "../tenant.ts";
import { clientErrorOf } from "./rpc-errors.ts";

export function createConnectInterceptor(
  authenticator: Authenticator,
  logger: Logger,
  health: DatabaseHealth,
  limiter?: RateLimiter,
): Interceptor {
  const mapped = (err: unknown, method: DescMethod): ConnectError => {
    // A streaming method's request is parsed inside the call: bytes that are not its message are the client's.
    const platformError = clientErrorOf(err) ?? toPlatformError(err);
    // The method's name is made here, for the log, not on every call.
    const rpc = `${method.parent.typeName}/${method.name}`;
    noteAnswered(platformError, { original: err, logger, bindings: { rpc } }, health);
    return toConnectError(platformError);
  };
  return (next) => async (req) => {
    try {
      // The request's headers are read only when needed: most calls were authenticated at their head.
      const again = () =>
        authenticator.authenticate(req.header.get("authorization"), req.method, {
          cookie: req.header.get("cookie"),
          origin: req.header.get("origin"),
        });
      const principal = req.contextValues.get(headPrincipalKey) ?? (await again());
      req.contextValues.set(principalKey, principal);
      req.contextValues.set(reauthenticateKey, again);
      // The app's limits: a refusal is RESOURCE_EXHAUSTED with the `rate_limited` detail.
      const admission =
        limiter && principal.kind === "app"
          ? limiter.admit(
              principal.app,
              planOf(req.method.parent.typeName, req.method.name, req.stream ? undefined : req.message),
            )
          : undefined;
      if (admission?.refused) {
        await admission.pause();
        throw admission.refused;
      }
      let res;
      try {
        res =
          admission && principal.kind === "app"
            ? await runAsTenant(principal.app.id, () => next(req))
            : await next(req);
      } catch (err) {
        admission?.release();
        throw err;
      }
      if (!res.stream) {
        admission?.release();
        return res;
      }
      // A stream holds its place until it ends, however it ends (also when its messages are never read).
      if (admission) req.signal.addEventListener("abort", () => admission.release(), { once: true });
      const messages = res.message[Symbol.asyncIterator]();
      // The stream's work is its app's, as a unary call's is: its messages are made when the response is
      // read, after `next` returned and outside `runAsTenant`, so each step runs in the app's name here.
      // Otherwise its statements were nobody's work, outside the app's share of the pool, and one app's
      // streams filled the share that every app's token lookups and shared statements wait on.
      const step = <T>(fn: () => Promise<T>) =>
        admission && principal.kind === "app" ? runAsTenant(principal.app.id, fn) : fn();
      return {
        ...res,
        message: (async function* () {
          // What `yield* messages` did, step by step: a throw or return at the yield goes on to the stream.
          let ended = false;
          try {
            let next = await step(() => messages.next());
            while (!next.done) {
              let thrown: { err: unknown } | undefined;
              try {
                yield next.value;
              } catch (err) {
                thrown = { err };
              }
              next = await step(async () => {
                if (!thrown) return messages.next();
                if (!messages.throw) throw thrown.err;
                return messages.throw(thrown.err);
              });
            }
            ended = true;
          } catch (err) {
            ended = true;
            // Already this service's error (a stream that maps and logs its own): as it is.
            if (err instanceof ConnectError && err.findDetails(ErrorDetailSchema).length > 0) throw err;
            throw mapped(err, req.method);
          } finally {
            try {
              // The reader stopped early (the call was cancelled): the stream's own clean-up runs.
              if (!ended) await step(async () => messages.return?.());
            } finally {
              admission?.release();
            }
          }
        })(),
      };
    } catch (err) {
      throw mapped(err, req.method);
    }
  };
}
