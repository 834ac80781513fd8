/**
 * Counts every Connect, gRPC and gRPC-Web call of a facility for the
 * operator's overview (`core/request-counts/`). The outermost interceptor: it
 * sees the calls the authentication and the app's limits refused too, each by
 * the HTTP status of its error's code; the app is the one the call was
 * authenticated as (none when it was refused before). A stream counts once,
 * when it starts (or fails to).
 */
import type { Interceptor } from "@connectrpc/connect";
import { principalKey } from "../auth.ts";
import { toPlatformError } from "../errors.ts";
import { facilityOfService, type RequestCounts } from "../request-counts/index.ts";

export function createRequestCountInterceptor(counts: RequestCounts): Interceptor {
  return (next) => async (req) => {
    const facility = facilityOfService(req.method.parent.typeName);
    if (!facility) return next(req);
    const appOf = () => {
      const principal = req.contextValues.get(principalKey);
      return principal.kind === "app" ? principal.app.id : undefined;
    };
    try {
      const res = await next(req);
      counts.record(facility, appOf(), 200);
      return res;
    } catch (err) {
      counts.record(facility, appOf(), toPlatformError(err).status);
      throw err;
    }
  };
}
