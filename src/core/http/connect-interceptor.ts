/**
 * The Connect/gRPC side of authentication and error mapping: the same
 * `Authenticator` as the REST router decides who calls, and every error
 * leaves as a `ConnectError` carrying our string code (`toConnectError`).
 */
import type { Interceptor } from "@connectrpc/connect";
import type { Logger } from "pino";
import { principalKey, reauthenticateKey, type Authenticator } from "../auth.ts";
import { toConnectError, toPlatformError } from "../errors.ts";
import type { DatabaseHealth } from "../database/index.ts";

export function createConnectInterceptor(
  authenticator: Authenticator,
  logger: Logger,
  health: DatabaseHealth,
): Interceptor {
  return (next) => async (req) => {
    try {
      const authorization = req.header.get("authorization");
      const principal = await authenticator.authenticate(authorization, req.method);
      req.contextValues.set(principalKey, principal);
      req.contextValues.set(reauthenticateKey, () => authenticator.authenticate(authorization, req.method));
      return await next(req);
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
