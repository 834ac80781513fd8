/**
 * The abort signal of one call: aborted when its client goes away before the
 * call was answered (a waiting consume then stops waiting and leaves no
 * waiter behind).
 *
 * Why a helper: a client may go away at any moment, also before the handler
 * runs (an HTTP/2 stream reset while fastify was still reading the body or
 * while the caller was being authenticated). The response's `close` event has
 * then already fired, so listening for it alone would miss it and the call
 * would wait its whole time for nobody. The state is checked once the
 * listener is in place. The handler's own end (`done`) is what tells "went
 * away" from "answered": over HTTP/2 a stream the client reset already
 * reports `writableFinished`, so the response's state cannot tell them apart.
 */
import type http from "node:http";
import type http2 from "node:http2";

type NodeResponse = http.ServerResponse | http2.Http2ServerResponse;

export interface CallSignal {
  readonly signal: AbortSignal;
  /** The call was answered (or failed): a close from now on is not a client going away. */
  done(): void;
}

/** Whether the response's connection (HTTP/1.1) or stream (HTTP/2) is already closed. */
export function responseClosed(res: NodeResponse): boolean {
  if ("stream" in res) return res.stream.closed || res.stream.destroyed;
  return res.destroyed || (res.socket?.destroyed ?? false);
}

/**
 * A signal aborted with `reason()` once the client goes away before `done()`, including before this was called.
 *
 * The `AbortController` is made only when `signal` is first read: most calls
 * (a list, a put) never look at it, and a controller with its listeners is a
 * measurable part of a short call's cost. Read late, it comes already aborted
 * if the client left in between.
 */
export function clientGoneSignal(res: NodeResponse, reason: () => unknown): CallSignal {
  let controller: AbortController | undefined;
  let gone = false;
  let finished = false;
  const onClose = () => {
    if (finished || gone) return;
    gone = true;
    controller?.abort(reason());
  };
  res.once("close", onClose);
  if (responseClosed(res)) onClose();
  return {
    get signal() {
      if (!controller) {
        controller = new AbortController();
        if (gone) controller.abort(reason());
      }
      return controller.signal;
    },
    done() {
      finished = true;
      res.off("close", onClose);
    },
  };
}
