/**
 * The one Connect transport of the dashboard: the Connect protocol (JSON) to
 * the origin that served the page, with the admin token as bearer header.
 */
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { getToken } from "./session.ts";

const bearer: Interceptor = (next) => async (req) => {
  const token = getToken();
  if (token) req.header.set("authorization", `Bearer ${token}`);
  return next(req);
};

export const transport = createConnectTransport({
  baseUrl: window.location.origin,
  interceptors: [bearer],
});

/** The error envelope's message, as the API wrote it. */
export function errorMessage(err: unknown): string {
  if (err instanceof ConnectError) return err.rawMessage || Code[err.code];
  if (err instanceof Error) return err.message;
  return String(err);
}

export function isUnauthenticated(err: unknown): boolean {
  return err instanceof ConnectError && err.code === Code.Unauthenticated;
}
