/**
 * One listening port for HTTP/1.1 and cleartext HTTP/2 (h2c, which gRPC
 * clients use with prior knowledge). Each new connection is peeked at: if its
 * first bytes are the HTTP/2 connection preface it goes to an `http2` server,
 * otherwise to an `http` server; both hand requests to the same handler.
 *
 * The bytes read while deciding are `unshift`ed back. The HTTP/1.1 path needs
 * `resume()` afterwards; the HTTP/2 path must not call it (the http2 session
 * reads the socket itself, and resuming it broke sessions).
 *
 * With TLS configured, one `http2` secure server with `allowHTTP1` does the
 * same through ALPN.
 *
 * Slow clients are dropped: a connection must decide its protocol and send a
 * whole request header within `headersTimeoutMs`, the whole request within
 * `requestTimeoutMs`; an idle kept-alive connection, or an HTTP/2 session with
 * no open stream, is closed after `keepAliveTimeoutMs`. The inner `http`
 * server never listens, and Node's own checks of the first two did not fire
 * for connections handed to it in every case, so each HTTP/1.1 connection has
 * its own deadline for its next request header, cleared when the header is in.
 *
 * Closing drains: HTTP/2 sessions get a GOAWAY (streams under way finish),
 * every HTTP/1.1 response whose header is sent from then on carries
 * `Connection: close` (also those of requests already under way), and a
 * kept-alive connection that is or becomes idle (its last response went out
 * as keep-alive before the drain) is left open for `DRAIN_GRACE_MS` so that a
 * request a client sent just as the server began to close still gets an
 * answer rather than a reset socket.
 */
import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import type { HttpTimeouts } from "../config.ts";

type Handler = (
  req: http.IncomingMessage | http2.Http2ServerRequest,
  res: http.ServerResponse | http2.Http2ServerResponse,
) => void;

const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");

/** How long an idle HTTP/1.1 connection stays open once the server is closing. */
const DRAIN_GRACE_MS = 1000;

export interface OnePortServer extends net.Server {
  /** Begins the drain: GOAWAY on HTTP/2 sessions, `Connection: close` on HTTP/1.1, idle connections end after the grace. */
  closeIdleConnections(): void;
  /** Destroys every connection at once. */
  closeAllConnections(): void;
  /**
   * With TLS: the key and certificate of every handshake from now on; connections open already keep theirs.
   * Throws (and keeps the ones in use) when they do not make a context: not PEM, or a key that does not
   * match the certificate. Undefined without TLS.
   */
  setTls?(tls: TlsOptions): void;
}

export interface TlsOptions {
  key: Buffer;
  cert: Buffer;
}

export interface OnePortOptions {
  tls?: TlsOptions | undefined;
  timeouts: HttpTimeouts;
}

/**
 * The request-body deadline: a request whose body has not all arrived
 * `requestTimeoutMs` after its head is cut (its HTTP/1.1 connection, or its
 * HTTP/2 stream). Without it a client could send part of a body and hold the
 * request, and what it sent, for ever (Node's own `requestTimeout` never runs
 * for connections handed to the inner servers). One sweep for every request
 * whose body is still coming, not a timer each; a long-poll, whose body is in,
 * is not watched.
 */
function createBodyDeadlines(requestTimeoutMs: number) {
  // A request without a body: over HTTP/1.1 one with neither `content-length` (or 0) nor `transfer-encoding`
  // (the request is handed on before the parser marks it complete); over HTTP/2 END_STREAM on its HEADERS (a
  // GET). Otherwise, HTTP/1.1: the parser's mark, whoever reads the body. HTTP/2: the stream's end (the
  // compatibility request reads its stream as it comes, so this holds once END_STREAM is in, even when nobody
  // reads the request).
  const bodyIn = (req: http.IncomingMessage | http2.Http2ServerRequest) =>
    "stream" in req
      ? req.stream.endAfterHeaders || req.stream.readableEnded || req.stream.destroyed
      : req.complete ||
        ((req.headers["content-length"] === undefined || req.headers["content-length"] === "0") &&
          req.headers["transfer-encoding"] === undefined);
  const watched = new Map<http.IncomingMessage | http2.Http2ServerRequest, number>();
  let sweep: NodeJS.Timeout | undefined;
  const sweepNow = () => {
    const now = Date.now();
    for (const [req, deadline] of watched) {
      if (bodyIn(req)) watched.delete(req);
      else if (now >= deadline) {
        watched.delete(req);
        if ("stream" in req) req.stream.close(http2.constants.NGHTTP2_CANCEL);
        else req.socket.destroy();
      }
    }
    if (watched.size === 0) {
      clearInterval(sweep);
      sweep = undefined;
    }
  };
  return {
    watch(req: http.IncomingMessage | http2.Http2ServerRequest, res: http.ServerResponse | http2.Http2ServerResponse) {
      if (bodyIn(req)) return;
      watched.set(req, Date.now() + requestTimeoutMs);
      res.once("close", () => watched.delete(req));
      sweep ??= setInterval(sweepNow, Math.max(50, Math.min(1000, requestTimeoutMs / 4))).unref();
    },
    stop() {
      clearInterval(sweep);
      watched.clear();
    },
  };
}

export function createOnePortServer(handler: Handler, options: OnePortOptions): OnePortServer {
  const { timeouts } = options;
  const bodies = createBodyDeadlines(timeouts.requestTimeoutMs);
  /** Every request, over either protocol: its body watched (`createBodyDeadlines`), then handled. */
  const serve: Handler = (req, res) => {
    bodies.watch(req, res);
    handler(req, res);
  };
  const sessions = new Set<http2.ServerHttp2Session>();
  const trackSessions = (server: http2.Http2Server | http2.Http2SecureServer) => {
    server.on("session", (session: http2.ServerHttp2Session) => {
      sessions.add(session);
      session.once("close", () => sessions.delete(session));
      let streams = 0;
      session.on("stream", (stream) => {
        streams++;
        stream.once("close", () => streams--);
      });
      // Idle with no stream: close it. A stream that is quiet (a long-poll) keeps its session.
      // `on`, not the callback of setTimeout (a `once`): the first quiet spell may come while a stream is open.
      session.setTimeout(timeouts.keepAliveTimeoutMs);
      session.on("timeout", () => {
        if (streams === 0) session.close();
      });
    });
  };
  // Node's default of 10 MB per HTTP/2 session refuses (ENHANCE_YOUR_CALM) a single request near the
  // body limit (a full PutMessages); the read limit, not this, is what bounds a request.
  // At most 1000 streams open at once on one session (Node's default is 2^32 - 1): each holds what it was sent.
  const h2Options: http2.ServerOptions = { maxSessionMemory: 128, settings: { maxConcurrentStreams: 1000 } };
  const h1Options: http.ServerOptions = {
    headersTimeout: timeouts.headersTimeoutMs,
    requestTimeout: timeouts.requestTimeoutMs,
    keepAliveTimeout: timeouts.keepAliveTimeoutMs,
  };

  if (options.tls) {
    // A TLS handshake that never completes is dropped like a header that never ends.
    const secure = http2.createSecureServer(
      {
        key: options.tls.key,
        cert: options.tls.cert,
        allowHTTP1: true,
        ...h2Options,
        handshakeTimeout: timeouts.headersTimeoutMs,
        ...h1Options,
      },
      serve as never,
    );
    trackSessions(secure);
    return Object.assign(secure, {
      closeIdleConnections() {
        for (const s of sessions) s.close();
      },
      closeAllConnections() {
        for (const s of sessions) s.destroy();
      },
      setTls(tls: TlsOptions) {
        secure.setSecureContext({ key: tls.key, cert: tls.cert });
      },
    });
  }

  // HTTP/1.1 connections are tracked here (the inner server never listens, so
  // its own connection tracking is not set up): on close, idle ones end after
  // the grace and busy ones right after their response.
  const busy = new Map<net.Socket, number>();
  /** Responses under way: when the drain begins, those whose header is not out yet are told to close. */
  const underway = new Set<http.ServerResponse>();
  let closing = false;
  const headerDeadlines = new Map<net.Socket, { timer: NodeJS.Timeout; ms: number }>();
  /**
   * The next request header must be in by then (after the idle keep-alive time, when one was answered already).
   * One timer per connection and length, restarted (`refresh`) after each answer rather than made anew: a
   * request that arrives leaves it running, and when it fires it ends the connection only if no request is
   * under way on it (as if cleared when the header came in).
   */
  const expectHeader = (socket: net.Socket, ms: number) => {
    const deadline = headerDeadlines.get(socket);
    if (deadline !== undefined && deadline.ms === ms) {
      deadline.timer.refresh();
      return;
    }
    clearTimeout(deadline?.timer);
    const timer = setTimeout(() => {
      if (!busy.has(socket)) socket.destroy();
    }, ms);
    timer.unref();
    headerDeadlines.set(socket, { timer, ms });
  };
  const h1 = http.createServer(h1Options, (req, res) => {
    const socket = req.socket;
    busy.set(socket, (busy.get(socket) ?? 0) + 1);
    if (closing) res.shouldKeepAlive = false;
    underway.add(res);
    res.once("close", () => {
      underway.delete(res);
      const left = (busy.get(socket) ?? 1) - 1;
      if (left > 0) busy.set(socket, left);
      else busy.delete(socket);
      // A response that went out as keep-alive before the drain began: the client may send its next request
      // on this connection any moment, so it is treated as idle (the grace, then the end), never ended at once.
      if (closing && left <= 0) {
        clearTimeout(headerDeadlines.get(socket)?.timer);
        endAfterGrace(socket);
      } else if (left <= 0 && !socket.destroyed)
        expectHeader(socket, timeouts.keepAliveTimeoutMs + timeouts.headersTimeoutMs);
    });
    serve(req, res);
  });
  h1.on("connection", (socket: net.Socket) => {
    expectHeader(socket, timeouts.headersTimeoutMs);
    socket.once("close", () => {
      clearTimeout(headerDeadlines.get(socket)?.timer);
      headerDeadlines.delete(socket);
    });
  });
  const h2 = http2.createServer(h2Options, serve as never);
  trackSessions(h2);
  const sockets = new Set<net.Socket>();
  const isHttp2 = new WeakSet<net.Socket>();

  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
    let decided = false;
    dropIfSilent(socket, timeouts.headersTimeoutMs, () => decided);
    let seen: Buffer = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      seen = seen.length === 0 ? chunk : Buffer.concat([seen, chunk]);
      const n = Math.min(seen.length, PREFACE.length);
      const isPrefixOfPreface = seen.subarray(0, n).equals(PREFACE.subarray(0, n));
      if (isPrefixOfPreface && seen.length < PREFACE.length) return; // not decided yet
      decided = true;
      socket.off("data", onData);
      socket.pause();
      socket.unshift(seen);
      if (isPrefixOfPreface) {
        isHttp2.add(socket);
        h2.emit("connection", socket);
      } else {
        h1.emit("connection", socket);
        socket.resume();
      }
    };
    socket.on("data", onData);
    socket.on("error", () => socket.destroy());
  }) as OnePortServer;

  let drainTimer: NodeJS.Timeout | undefined;
  /** Ends `socket` after the grace unless a request is under way on it then (whose end ends it). */
  const endAfterGrace = (socket: net.Socket) => {
    const timer = setTimeout(() => {
      if (!busy.has(socket)) socket.end();
    }, DRAIN_GRACE_MS);
    timer.unref();
    socket.once("close", () => clearTimeout(timer));
  };
  server.closeIdleConnections = () => {
    if (closing) return;
    closing = true;
    for (const res of underway) if (!res.headersSent) res.shouldKeepAlive = false;
    for (const s of sessions) s.close();
    drainTimer = setTimeout(() => {
      for (const socket of sockets) {
        if (!busy.has(socket) && !isHttp2.has(socket)) socket.end();
      }
    }, DRAIN_GRACE_MS);
    drainTimer.unref();
  };
  server.closeAllConnections = () => {
    closing = true;
    clearTimeout(drainTimer);
    for (const s of sessions) s.destroy();
    for (const s of sockets) s.destroy();
  };
  server.on("close", () => {
    clearTimeout(drainTimer);
    bodies.stop();
  });
  return server;
}

/** Destroys `socket` if `done()` is still false after `ms`: a client that connects and never finishes starting. */
function dropIfSilent(socket: net.Socket, ms: number, done: () => boolean): void {
  const timer = setTimeout(() => {
    if (!done()) socket.destroy();
  }, ms);
  timer.unref();
  socket.once("close", () => clearTimeout(timer));
}
