/**
 * The one Connect transport of the dashboard: the Connect protocol (JSON) to
 * the origin that served the page, with the admin token as bearer header.
 */
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { getToken } from "./session.ts";
import { describeError } from "./errors.ts";

const bearer: Interceptor = (next) => async (req) => {
  const token = getToken();
  if (token) req.header.set("authorization", `Bearer ${token}`);
  return next(req);
};

export const transport = createConnectTransport({
  baseUrl: window.location.origin,
  interceptors: [bearer],
});

/** The error as a sentence for the operator (see errors.ts). */
export function errorMessage(err: unknown): string {
  return describeError(err);
}

export function isUnauthenticated(err: unknown): boolean {
  return err instanceof ConnectError && err.code === Code.Unauthenticated;
}
