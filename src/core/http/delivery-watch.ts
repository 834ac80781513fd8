/**
 * The `DeliveryWatch` of one response (see `../delivery.ts`): tells whether
 * the answer was written in full when the response closes.
 *
 * HTTP/1.1: `writableFinished` (every byte handed to the operating system)
 * before the close; a connection cut while the answer was still queued in
 * the process (a client that stopped reading, then left) closes without it.
 * HTTP/2: a reset stream reports `writableFinished` all the same (see
 * `client-gone.ts`), so the stream's own end tells: a stream that ended with
 * both sides done has `rstCode` NGHTTP2_NO_ERROR; one reset by the client
 * (RST_STREAM CANCEL) or cut with its session has another code.
 *
 * Nothing is listened for until an RPC registers an undo: most calls never do.
 */
import type http from "node:http";
import http2 from "node:http2";
import type { DeliveryWatch } from "../delivery.ts";

type NodeResponse = http.ServerResponse | http2.Http2ServerResponse;

/** Whether the closed response's answer was written in full. */
function delivered(res: NodeResponse): boolean {
  if ("stream" in res) return res.stream.rstCode === http2.constants.NGHTTP2_NO_ERROR && res.writableFinished;
  return res.writableFinished;
}

function closed(res: NodeResponse): boolean {
  if ("stream" in res) return res.stream.closed || res.stream.destroyed;
  return res.closed || res.destroyed;
}

class ResponseDeliveryWatch implements DeliveryWatch {
  readonly #res: NodeResponse;
  #undo: (() => void)[] | undefined;

  constructor(res: NodeResponse) {
    this.#res = res;
  }

  onUndelivered(undo: () => void): void {
    const res = this.#res;
    if (closed(res)) {
      if (!delivered(res)) undo();
      return;
    }
    if (this.#undo) {
      this.#undo.push(undo);
      return;
    }
    const list = (this.#undo = [undo]);
    res.once("close", () => {
      if (!delivered(res)) for (const u of list) u();
    });
  }
}

export function watchDelivery(res: NodeResponse): DeliveryWatch {
  return new ResponseDeliveryWatch(res);
}
