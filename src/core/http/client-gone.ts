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
 * The `AbortController`, and the listener on the response's `close`, are made
 * only when `signal` is first read: most calls (a list, a put) never look at
 * it, and a controller with its listeners is a measurable part of a short
 * call's cost. Read late, it comes already aborted if the client left in
 * between: until `done()`, nothing has been answered, so a response closed by
 * then is a client gone, whether it closed before or after the read.
 */
export function clientGoneSignal(res: NodeResponse, reason: () => unknown): CallSignal {
  return new ClientGoneSignal(res, reason);
}

/**
 * A class, not an object literal with a `get signal()` closure: V8 keeps an
 * accessor's function in the object's map, so each such literal got a map of
 * its own, in the old generation, whose getter held the response and the whole
 * request until the next full collection. Every request's objects were then
 * promoted (about 6 KB a request) and the old generation filled every few
 * hundred milliseconds under load.
 */
class ClientGoneSignal implements CallSignal {
  /** The response until `done()`. */
  #res: NodeResponse | undefined;
  readonly #reason: () => unknown;
  #controller: AbortController | undefined;
  #listening = false;
  readonly #onClose = () => {
    if (this.#res === undefined) return;
    this.#controller!.abort(this.#reason());
  };

  constructor(res: NodeResponse, reason: () => unknown) {
    this.#res = res;
    this.#reason = reason;
  }

  get signal(): AbortSignal {
    if (!this.#controller) {
      this.#controller = new AbortController();
      const res = this.#res;
      if (res !== undefined) {
        if (responseClosed(res)) this.#controller.abort(this.#reason());
        else {
          res.once("close", this.#onClose);
          this.#listening = true;
        }
      }
    }
    return this.#controller.signal;
  }

  done(): void {
    if (this.#listening) this.#res!.off("close", this.#onClose);
    this.#listening = false;
    this.#res = undefined;
  }
}
