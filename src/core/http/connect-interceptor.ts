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
import { clientErrorOf } from "./rpc-errors.ts";

export function createConnectInterceptor(
  authenticator: Authenticator,
  logger: Logger,
  health: DatabaseHealth,
): Interceptor {
  return (next) => async (req) => {
    try {
      // The request's headers are read only when needed: most calls were authenticated at their head.
      const again = () => authenticator.authenticate(req.header.get("authorization"), req.method);
      const principal = req.contextValues.get(headPrincipalKey) ?? (await again());
      req.contextValues.set(principalKey, principal);
      req.contextValues.set(reauthenticateKey, again);
      return await next(req);
    } catch (err) {
      // A streaming method's request is parsed inside the call: bytes that are not its message are the client's.
      const platformError = clientErrorOf(err) ?? toPlatformError(err);
      if (platformError.code === "internal") {
        logger.error({ err, rpc: `${req.method.parent.typeName}/${req.method.name}` }, "unexpected error");
      } else if (platformError.code === "unavailable") {
        health.failed(platformError.cause);
      }
      throw toConnectError(platformError);
    }
  };
}
