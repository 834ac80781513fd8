/**
 * RPCs sent by hand, byte for byte, as clients this project did not write
 * send them: no client-side deadline, no retries, every header and trailer of
 * the answer kept. For the protocol edges (deadlines, unknown methods,
 * malformed bodies) that a generated client would hide or refuse to send.
 */
import http2 from "node:http2";

export interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
  trailers: Record<string, string>;
}

function flat(h: http2.IncomingHttpHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(h)) {
    if (k.startsWith(":") || v === undefined) continue;
    out[k] = Array.isArray(v) ? v.join(", ") : String(v);
  }
  return out;
}

/** One gRPC frame (flags 0: uncompressed). */
export function grpcFrame(message: Uint8Array, flags = 0): Buffer {
  const out = Buffer.alloc(5 + message.byteLength);
  out[0] = flags;
  out.writeUInt32BE(message.byteLength, 1);
  out.set(message, 5);
  return out;
}

/**
 * One request over h2c (prior knowledge). `body` undefined with `keepOpen`
 * sends the headers and leaves the request stream open (a body that never ends).
 */
export function h2Call(
  url: string,
  path: string,
  headers: Record<string, string>,
  body: Uint8Array | undefined,
  options: { keepOpen?: boolean } = {},
): Promise<RawAnswer> {
  const session = http2.connect(url);
  session.on("error", () => {});
  return new Promise<RawAnswer>((resolve, reject) => {
    const stream = session.request({ ":method": "POST", ":path": path, ...headers });
    let status = 0;
    let head: Record<string, string> = {};
    let trailers: Record<string, string> = {};
    const chunks: Buffer[] = [];
    stream.on("response", (h) => {
      status = Number(h[":status"]);
      head = flat(h);
    });
    stream.on("trailers", (t) => (trailers = flat(t)));
    stream.on("data", (c: Buffer) => chunks.push(c));
    stream.on("end", () => resolve({ status, headers: head, body: Buffer.concat(chunks), trailers }));
    stream.on("error", reject);
    if (body !== undefined) stream.write(body);
    if (!options.keepOpen) stream.end();
  }).finally(() => session.destroy());
}
