/**
 * The load generator of `npm run bench:http`: a fixed number of requests in
 * flight for a fixed time, over HTTP/1.1 (keep-alive connections, one request
 * at a time each) or HTTP/2 without TLS (sessions with several streams each),
 * the same for every protocol and for the baseline, so that the figures differ
 * only by what the servers do.
 *
 * It is deliberately cheap per request, to leave the CPU to the servers: the
 * requests are serialised once up front, HTTP/1.1 is written and parsed on a
 * plain socket (status line, `content-length` or chunked body), and HTTP/2
 * uses `node:http2`'s client session directly.
 *
 * A request counts when it completed with status 200 and, for gRPC and
 * gRPC-Web, with `grpc-status: 0`; anything else counts as an error (the first one is kept
 * for the log).
 */
import http2 from "node:http2";
import net from "node:net";

export interface LoadRequest {
  path: string;
  /** Absent: no body. */
  body?: Buffer;
}

export interface LoadTarget {
  /**
   * `h1`: HTTP/1.1; `h2`: HTTP/2 (h2c, prior knowledge); `grpc`: HTTP/2, success also needs `grpc-status: 0`;
   * `grpc-web`: HTTP/1.1, success also needs `grpc-status: 0` in the body's trailer frame.
   */
  transport: "h1" | "h2" | "grpc" | "grpc-web";
  url: string;
  method: "GET" | "POST";
  headers: Record<string, string>;
  /** Sent in turn, round robin (e.g. one per queue). */
  requests: LoadRequest[];
}

export interface LoadOptions {
  /** Requests in flight at any time. */
  concurrency: number;
  /** HTTP/2 sessions the streams are spread over. */
  h2Sessions: number;
  warmupSeconds: number;
  seconds: number;
}

export interface LoadResult {
  reqPerS: number;
  requests: number;
  /** Answered, warm-up included. */
  allRequests: number;
  errors: number;
  firstError?: string;
}

interface Counters {
  ok: number;
  errors: number;
  firstError?: string;
  stopped: boolean;
}

/** Runs the load for `warmupSeconds` (not counted), then `seconds` (counted). */
export async function runLoad(target: LoadTarget, options: LoadOptions): Promise<LoadResult> {
  const counters: Counters = { ok: 0, errors: 0, stopped: false };
  const { loops, close } =
    target.transport === "h1" || target.transport === "grpc-web"
      ? await h1Loops(target, options, counters)
      : await h2Loops(target, options, counters);
  await sleep(options.warmupSeconds * 1000);
  const ok0 = counters.ok;
  const errors0 = counters.errors;
  const t0 = performance.now();
  await sleep(options.seconds * 1000);
  const requests = counters.ok - ok0;
  const errors = counters.errors - errors0;
  const elapsed = (performance.now() - t0) / 1000;
  counters.stopped = true;
  await Promise.all(loops);
  close();
  return {
    reqPerS: requests / elapsed,
    requests,
    allRequests: counters.ok,
    errors,
    ...(counters.firstError === undefined ? {} : { firstError: counters.firstError }),
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function fail(counters: Counters, what: string): void {
  counters.errors++;
  counters.firstError ??= what;
}

async function h1Loops(target: LoadTarget, options: LoadOptions, counters: Counters) {
  const url = new URL(target.url);
  const port = Number(url.port);
  const raw = target.requests.map((r) => {
    const lines = [`${target.method} ${r.path} HTTP/1.1`, `host: ${url.host}`];
    for (const [k, v] of Object.entries(target.headers)) lines.push(`${k}: ${v}`);
    if (r.body) lines.push(`content-length: ${r.body.length}`);
    const head = Buffer.from(lines.join("\r\n") + "\r\n\r\n", "latin1");
    return r.body ? Buffer.concat([head, r.body]) : head;
  });
  const grpcWeb = target.transport === "grpc-web";
  const sockets: net.Socket[] = [];
  let next = 0;
  const connections = await Promise.all(
    Array.from({ length: options.concurrency }, () => h1Connection(url.hostname, port)),
  );
  const loops = connections.map(async (conn) => {
    sockets.push(conn.socket);
    {
      while (!counters.stopped) {
        const req = raw[next++ % raw.length];
        try {
          const { status, body } = await conn.send(req);
          if (status === 200 && (!grpcWeb || grpcWebOk(body))) counters.ok++;
          else fail(counters, `HTTP ${status}: ${body.toString("utf8", 0, 300)}`);
        } catch (err) {
          fail(counters, String(err));
          return;
        }
      }
    }
  });
  return { loops, close: () => sockets.forEach((s) => s.destroy()) };
}

/**
 * Whether a gRPC-Web answer's body ends with a trailer frame (flag 0x80) saying `grpc-status: 0` (an error
 * without a message is Trailers-Only: its status in the header fields, its body empty).
 */
function grpcWebOk(body: Buffer): boolean {
  let at = 0;
  while (at + 5 <= body.length) {
    const length = body.readUInt32BE(at + 1);
    if (body[at] & 0x80) return /(^|\r\n)grpc-status: ?0\r\n/i.test(body.toString("latin1", at + 5, at + 5 + length));
    at += 5 + length;
  }
  return false;
}

/** One keep-alive HTTP/1.1 connection: one request at a time, the response parsed just enough to find its end. */
async function h1Connection(host: string, port: number) {
  const socket = net.connect(port, host);
  socket.setNoDelay(true);
  await new Promise<void>((resolve, reject) => {
    socket.once("connect", resolve);
    socket.once("error", reject);
  });
  let buf: Buffer = Buffer.alloc(0);
  let waiting: { resolve: (r: { status: number; body: Buffer }) => void; reject: (e: Error) => void } | undefined;
  const tryParse = () => {
    const headEnd = buf.indexOf("\r\n\r\n");
    if (headEnd < 0) return;
    const head = buf.toString("latin1", 0, headEnd);
    const status = Number(head.slice(9, 12));
    const bodyStart = headEnd + 4;
    const length = /\r\ncontent-length:\s*(\d+)/i.exec(head);
    let end: number;
    let body: Buffer;
    if (length) {
      end = bodyStart + Number(length[1]);
      if (buf.length < end) return;
      body = buf.subarray(bodyStart, end);
    } else if (/\r\ntransfer-encoding:\s*chunked/i.test(head)) {
      const parts: Buffer[] = [];
      let at = bodyStart;
      for (;;) {
        const lineEnd = buf.indexOf("\r\n", at);
        if (lineEnd < 0) return;
        const size = parseInt(buf.toString("latin1", at, lineEnd), 16);
        if (size === 0) {
          if (buf.length < lineEnd + 4) return;
          end = lineEnd + 4;
          break;
        }
        if (buf.length < lineEnd + 2 + size + 2) return;
        parts.push(buf.subarray(lineEnd + 2, lineEnd + 2 + size));
        at = lineEnd + 2 + size + 2;
      }
      body = Buffer.concat(parts);
    } else {
      end = bodyStart;
      body = Buffer.alloc(0);
    }
    buf = buf.subarray(end);
    const w = waiting;
    waiting = undefined;
    w?.resolve({ status, body });
  };
  socket.on("data", (chunk: Buffer) => {
    buf = buf.length === 0 ? chunk : Buffer.concat([buf, chunk]);
    tryParse();
  });
  const onGone = (err?: Error) => {
    const w = waiting;
    waiting = undefined;
    w?.reject(err ?? new Error("connection closed"));
  };
  socket.on("error", onGone);
  socket.on("close", () => onGone());
  return {
    socket,
    send(req: Buffer): Promise<{ status: number; body: Buffer }> {
      return new Promise((resolve, reject) => {
        waiting = { resolve, reject };
        socket.write(req);
      });
    },
  };
}

async function h2Loops(target: LoadTarget, options: LoadOptions, counters: Counters) {
  const sessions = await Promise.all(
    Array.from({ length: options.h2Sessions }, async () => {
      const session = http2.connect(target.url, { settings: { initialWindowSize: 1 << 20 } });
      session.on("error", (err) => fail(counters, String(err)));
      await new Promise<void>((resolve, reject) => {
        session.once("connect", () => resolve());
        session.once("error", reject);
      });
      return session;
    }),
  );
  const grpc = target.transport === "grpc";
  let next = 0;
  const one = (session: http2.ClientHttp2Session, req: LoadRequest) =>
    new Promise<void>((resolve) => {
      const stream = session.request(
        { ":method": target.method, ":path": req.path, ...target.headers },
        { endStream: req.body === undefined },
      );
      let status = 0;
      let grpcStatus: string | undefined;
      const chunks: Buffer[] = [];
      stream.on("response", (headers) => {
        status = Number(headers[":status"]);
        if (headers["grpc-status"] !== undefined) grpcStatus = String(headers["grpc-status"]);
      });
      stream.on("trailers", (trailers) => {
        if (trailers["grpc-status"] !== undefined) grpcStatus = String(trailers["grpc-status"]);
      });
      stream.on("data", (c: Buffer) => void chunks.push(c));
      stream.on("close", () => {
        if (status === 200 && (!grpc || grpcStatus === "0")) counters.ok++;
        else
          fail(
            counters,
            `HTTP ${status}${grpc ? ` grpc-status ${grpcStatus}` : ""}: ${Buffer.concat(chunks).toString("utf8", 0, 300)}`,
          );
        resolve();
      });
      stream.on("error", () => {});
      if (req.body !== undefined) stream.end(req.body);
    });
  const loops = Array.from({ length: options.concurrency }, async (_, i) => {
    const session = sessions[i % sessions.length];
    while (!counters.stopped && !session.destroyed) {
      await one(session, target.requests[next++ % target.requests.length]);
    }
  });
  return { loops, close: () => sessions.forEach((s) => s.close()) };
}
