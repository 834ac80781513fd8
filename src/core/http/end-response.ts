/**
 * Ending an RPC's answer as the protocols require, over HTTP/1.1 and HTTP/2.
 *
 * An answer without a message (a refusal at the call's head, an error before
 * any message) is one piece: status, header fields and the end of the stream
 * together. Over HTTP/2 that is one HEADERS frame carrying END_STREAM, which
 * gRPC calls Trailers-Only
 * (https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md#responses).
 * Node's HTTP/2 compatibility response sends its HEADERS at `writeHead`, so a
 * `writeHead` followed by `end()` sent HEADERS without END_STREAM and then an
 * empty DATA frame carrying it: curl and `buf curl` read that, but grpc-js
 * ("Received RST_STREAM with code 0") and grpcio ("Stream removed") took the
 * answer for a crash. Setting the fields and calling `end` alone makes the
 * response send its HEADERS with END_STREAM.
 *
 * When the answer is complete while the client is still sending its body, the
 * stream is then reset with NO_ERROR, as HTTP/2 (RFC 9113, section 8.1) and
 * gRPC ask, so the client stops sending a body nobody reads; what it sent is
 * dropped.
 */
import type http from "node:http";
import type http2 from "node:http2";

/** The response of either HTTP version (fastify's `reply.raw`). */
export type NodeResponse = http.ServerResponse | http2.Http2ServerResponse;

/** Header fields as Node takes them. */
export type NodeHeaders = Record<string, string | string[]>;

/**
 * Writes the whole answer and ends it: no body (or an empty one) means the
 * header fields carry the end of the stream. Resolves once it is written or
 * the client went away.
 */
export function endResponse(res: NodeResponse, status: number, headers: NodeHeaders, body?: Uint8Array): Promise<void> {
  return new Promise((resolve) => {
    res.once("close", () => resolve());
    res.statusCode = status;
    for (const [key, value] of Object.entries(headers)) res.setHeader(key, value);
    const ended = () => {
      resetIfBodyOpen(res);
      resolve();
    };
    if (body && body.length > 0) res.end(body, ended);
    else res.end(ended);
  });
}

/**
 * After a complete answer over HTTP/2: resets the stream with NO_ERROR if the
 * client has not ended its body (a body refused unread, one over the limit).
 * Over HTTP/1.1 Node reads and drops the rest of such a body itself.
 */
export function resetIfBodyOpen(res: NodeResponse): void {
  if (!("stream" in res)) return;
  const stream = res.stream;
  if (stream.destroyed || stream.readableEnded) return;
  // Destroyed without an error, a stream not yet closed is reset with NO_ERROR (after the answer, which is out:
  // this runs once it finished), and what came of the body and was never read is dropped. `close(NO_ERROR)`
  // alone kept a stream whose body had been read in part and paused: it never ended, and its session never
  // closed (a server's close then waited for ever).
  stream.destroy();
}
