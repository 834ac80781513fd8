/**
 * The Connect/gRPC side of authentication and error mapping: the same
 * `Authenticator` as the REST router decides who calls (the principal found
 * at the call's head, `headPrincipalKey`, when there is one), and every error
 * leaves as a `ConnectError` carrying our string code (`toConnectError`).
 */
import type { Interceptor } from "@connectrpc/connect";
import type { Logger } from "pino";
import { headPrincipalKey, principalKey, reauthenticateKey, type Authenticator } from "../auth.ts";
import { toConnectError, toPlatformError } from "../errors.ts";
import type { DatabaseHealth } from "../database/index.ts";
import { planOf, type RateLimiter } from "../limits/index.ts";
import { runAsTenant } from "../tenant.ts";

export function createConnectInterceptor(
  authenticator: Authenticator,
  logger: Logger,
  health: DatabaseHealth,
  limiter?: RateLimiter,
): Interceptor {
  return (next) => async (req) => {
    try {
      // The request's headers are read only when needed: most calls were authenticated at their head.
      const again = () => authenticator.authenticate(req.header.get("authorization"), req.method);
      const principal = req.contextValues.get(headPrincipalKey) ?? (await again());
      req.contextValues.set(principalKey, principal);
      req.contextValues.set(reauthenticateKey, again);
      if (!limiter || principal.kind !== "app") return await next(req);
      // The app's limits (docs/api.md#rate-limits): a refusal is RESOURCE_EXHAUSTED with the `rate_limited` detail.
      const admission = limiter.admit(
        principal.app,
        planOf(req.method.parent.typeName, req.method.name, req.stream ? undefined : req.message),
      );
      if (admission.refused) throw admission.refused;
      let res;
      try {
        res = await runAsTenant(principal.app.id, () => next(req));
      } catch (err) {
        admission.release();
        throw err;
      }
      if (!res.stream) {
        admission.release();
        return res;
      }
      // A stream holds its place until it ends, however it ends (also when its messages are never read).
      req.signal.addEventListener("abort", () => admission.release(), { once: true });
      const messages = res.message;
      return {
        ...res,
        message: (async function* () {
          try {
            yield* messages;
          } finally {
            admission.release();
          }
        })(),
      };
    } catch (err) {
      const platformError = toPlatformError(err);
      if (platformError.code === "internal") {
        logger.error({ err, rpc: `${req.method.parent.typeName}/${req.method.name}` }, "unexpected error");
      } else if (platformError.code === "unavailable") {
        health.failed(platformError.cause);
      }
      throw toConnectError(platformError);
    }
  };
}
