/**
 * A streaming RPC's way to send its response headers before its first
 * message. Connect's handlers write the headers with the first message (so
 * that an implementation may still set some); a stream that waits for its
 * first message (an idle queue) would send nothing at all meanwhile, and
 * proxies and clients take a long silence before headers for a dead upstream.
 * A stream calls `sendStreamHeaders` once it has accepted the call (its
 * request checked: a refusal before that is still answered in one piece,
 * Trailers-Only) and before it waits. The protocol layer
 * (`http/connect-routes.ts`) gives each streaming call the function; without
 * it (a call made in-process) this does nothing.
 */
import { createContextKey, type HandlerContext } from "@connectrpc/connect";

export const sendHeadersKey = createContextKey<(header: Headers) => void>(() => {}, {
  description: "sends a stream's response headers now",
});

/** Sends the call's response headers now, if they were not sent yet. */
export function sendStreamHeaders(context: HandlerContext): void {
  context.values.get(sendHeadersKey)(context.responseHeader);
}
