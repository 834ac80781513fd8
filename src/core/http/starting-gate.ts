/**
 * What the one port answers while the server is starting: it listens before
 * the database is open (a start may wait for it, see
 * `database/wait-for-database.ts`), so a process manager or an orchestrator
 * sees a live process at once. Until `open` hands over to the routes,
 * `/health` answers 200 (the process is alive), `/ready` answers 503 (do not
 * send traffic yet), and every other request 503 `unavailable` with
 * `Retry-After`, as during a database outage: over gRPC as status 14
 * (UNAVAILABLE) in a Trailers-Only answer.
 */
import type http from "node:http";
import type http2 from "node:http2";
import { DATABASE_RETRY_AFTER_SECONDS, PlatformError, toEnvelope } from "../errors.ts";

type Request = http.IncomingMessage | http2.Http2ServerRequest;
type Response = http.ServerResponse | http2.Http2ServerResponse;
export type RequestHandler = (req: Request, res: Response) => void;

export interface StartingGate {
  /** The handler the one port serves with; the gate's own answers until `open`. */
  readonly handler: RequestHandler;
  /** From now on every request goes to `handler` (the routes). */
  open(handler: RequestHandler): void;
}

const STARTING = "the server is starting (waiting for its database); retry shortly";

function answer(res: Response, status: number, headers: Record<string, string>, body?: unknown): void {
  const text = body === undefined ? "" : JSON.stringify(body);
  (res as http.ServerResponse).writeHead(status, {
    ...headers,
    ...(body === undefined ? {} : { "content-type": "application/json; charset=utf-8" }),
    "content-length": String(Buffer.byteLength(text)),
    "cache-control": "no-store",
  });
  res.end(text);
}

function startingAnswer(req: Request, res: Response): void {
  // The body is neither read nor wanted: drop it as it comes, so the client can finish sending.
  req.resume();
  const path = (req.url ?? "/").split("?")[0];
  if (req.method === "GET" && path === "/health") return answer(res, 200, {}, { status: "ok" });
  const unavailable = new PlatformError("unavailable", STARTING, {
    retryAfterSeconds: DATABASE_RETRY_AFTER_SECONDS,
  });
  const retryAfter = { "retry-after": String(DATABASE_RETRY_AFTER_SECONDS) };
  if (path === "/ready") {
    return answer(res, 503, retryAfter, { ...toEnvelope(unavailable), checks: { database: "starting" } });
  }
  if (String(req.headers["content-type"] ?? "").startsWith("application/grpc")) {
    return answer(res, 200, {
      "content-type": String(req.headers["content-type"]),
      "grpc-status": "14",
      "grpc-message": encodeURIComponent(STARTING),
    });
  }
  answer(res, 503, retryAfter, toEnvelope(unavailable));
}

export function createStartingGate(): StartingGate {
  let current: RequestHandler = startingAnswer;
  return {
    handler: (req, res) => current(req, res),
    open(handler) {
      current = handler;
    },
  };
}
