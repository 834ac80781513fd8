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
 */
import http from "node:http";
import http2 from "node:http2";
import net from "node:net";

type Handler = (req: http.IncomingMessage | http2.Http2ServerRequest, res: http.ServerResponse | http2.Http2ServerResponse) => void;

const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");

export interface OnePortServer extends net.Server {
  /** Closes idle HTTP/1.1 connections and sends GOAWAY on HTTP/2 sessions (graceful). */
  closeIdleConnections(): void;
  /** Destroys every connection at once. */
  closeAllConnections(): void;
}

export interface TlsOptions {
  key: Buffer;
  cert: Buffer;
}

export function createOnePortServer(handler: Handler, tls?: TlsOptions): OnePortServer {
  const sessions = new Set<http2.ServerHttp2Session>();
  const trackSessions = (server: http2.Http2Server | http2.Http2SecureServer) => {
    server.on("session", (session: http2.ServerHttp2Session) => {
      sessions.add(session);
      session.once("close", () => sessions.delete(session));
    });
  };

  if (tls) {
    const secure = http2.createSecureServer({ key: tls.key, cert: tls.cert, allowHTTP1: true }, handler as never);
    trackSessions(secure);
    return Object.assign(secure, {
      closeIdleConnections() {
        for (const s of sessions) s.close();
      },
      closeAllConnections() {
        for (const s of sessions) s.destroy();
      },
    });
  }

  // HTTP/1.1 connections are tracked here (the inner server never listens, so
  // its own connection tracking is not set up): on close, idle ones end at
  // once and busy ones right after their response.
  const busy = new Map<net.Socket, number>();
  let closing = false;
  const h1 = http.createServer((req, res) => {
    const socket = req.socket;
    busy.set(socket, (busy.get(socket) ?? 0) + 1);
    if (closing) res.shouldKeepAlive = false;
    res.once("close", () => {
      const left = (busy.get(socket) ?? 1) - 1;
      if (left > 0) busy.set(socket, left);
      else busy.delete(socket);
      if (closing && left <= 0) socket.end();
    });
    handler(req, res);
  });
  const h2 = http2.createServer(handler as never);
  trackSessions(h2);
  const sockets = new Set<net.Socket>();
  const isHttp2 = new WeakSet<net.Socket>();

  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
    let seen: Buffer = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      seen = seen.length === 0 ? chunk : Buffer.concat([seen, chunk]);
      const n = Math.min(seen.length, PREFACE.length);
      const isPrefixOfPreface = seen.subarray(0, n).equals(PREFACE.subarray(0, n));
      if (isPrefixOfPreface && seen.length < PREFACE.length) return; // not decided yet
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

  server.closeIdleConnections = () => {
    closing = true;
    for (const s of sessions) s.close();
    for (const socket of sockets) {
      if (!busy.has(socket) && !isHttp2.has(socket)) socket.end();
    }
  };
  server.closeAllConnections = () => {
    closing = true;
    for (const s of sessions) s.destroy();
    for (const s of sockets) s.destroy();
  };
  server.on("close", () => server.closeIdleConnections());
  return server;
}
